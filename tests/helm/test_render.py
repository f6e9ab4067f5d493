"""The Helm chart in conf/helm/vmpooler, linted and rendered by the real Helm engine
(helm-python-sdk), offline: no cluster, so `lookup` finds nothing. The manifests are checked as
parsed YAML: the objects, the pods, the checksum that rolls them, the managers' strategy and
disruption budgets, the labels and selectors, the Services and the Ingress.
"""

from __future__ import annotations

import copy
import hashlib
import tomllib

import helm_python
import pytest
import yaml

from tests.helm.chart import (
    CHART,
    DUMMY_POOLS,
    ROOT,
    checksum,
    container,
    env_of,
    names,
    one,
    render,
    their_values,
)

# Lint and render -----------------------------------------------------------------------------

@pytest.mark.parametrize("values", [None, "theirs"], ids=["defaults", "vmpooler-deployment"])
def test_the_chart_lints_clean(values: str | None) -> None:
    report = helm_python.lint(str(CHART), their_values() if values else None, strict=True,
                              namespace="pooling")
    assert report["errors"] == []
    # Severity 1 is INFO: only "icon is recommended" (the project has no logo to point at).
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_the_app_version_is_the_package_version(chart: helm_python.Chart) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart.metadata["appVersion"] == project["version"]
    assert chart.metadata["apiVersion"] == "v2"
    assert not chart.metadata.get("dependencies")


def test_default_values_render_a_whole_vmpooler(chart: helm_python.Chart) -> None:
    docs = render(chart)
    assert {(d["kind"], d["metadata"]["name"]) for d in docs} == {
        ("ConfigMap", "vmpooler-baseconfig"),
        ("ConfigMap", "vmpooler-pools"),
        ("Deployment", "vmpooler-api"),
        ("Deployment", "vmpooler-manager"),
        ("Deployment", "vmpooler-redis-master"),
        ("Service", "vmpooler-api"),
        ("Service", "vmpooler-manager"),
        ("Service", "vmpooler-redis-master"),
        ("Secret", "vmpooler-redis"),
        ("PersistentVolumeClaim", "vmpooler-redis-data"),
        ("ServiceAccount", "vmpooler"),
        ("PodDisruptionBudget", "vmpooler-api"),
    }


# Pods ----------------------------------------------------------------------------------------

def test_probes_get_the_health_endpoints(chart: helm_python.Chart) -> None:
    docs = render(chart, {"service": {"port": 8080}})
    expected = {"vmpooler-api": ("/healthcheck", "/api/v3/readiness"),
                "vmpooler-manager": ("/healthcheck", "/ready")}
    for deployment, (live, ready) in expected.items():
        c = container(docs, deployment)
        assert c["livenessProbe"]["httpGet"] == {"path": live, "port": 8080}
        assert c["readinessProbe"]["httpGet"] == {"path": ready, "port": 8080}
        assert c["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    api, manager = container(docs, "vmpooler-api"), container(docs, "vmpooler-manager")
    assert api["args"][:3] == ["api", "--bind", "0.0.0.0:8080"]
    assert manager["args"][0] == "manager"
    assert env_of(manager)["VMPOOLER_MANAGER_BIND"] == "0.0.0.0:8080"
    assert "VMPOOLER_MANAGER_BIND" not in env_of(api)


def test_exec_probes_get_the_same_endpoints_without_curl(chart: helm_python.Chart) -> None:
    docs = render(chart, {"probeHandler": "exec"})
    probe = container(docs, "vmpooler-api")["readinessProbe"]
    assert "httpGet" not in probe
    command = probe["exec"]["command"]
    assert command[:2] == ["python3", "-c"]
    assert "http://127.0.0.1:4567/api/v3/readiness" in command[2]
    compile(command[2], "probe", "exec")


def test_pods_write_only_to_tmp_and_data(chart: helm_python.Chart) -> None:
    docs = render(chart)
    for deployment in ("vmpooler-api", "vmpooler-manager"):
        spec = one(docs, "Deployment", deployment)["spec"]["template"]["spec"]
        c = spec["containers"][0]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["securityContext"]["runAsUser"] == 1001
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        assert mounts["/tmp"]["name"] == "tmp"
        assert {"name": "tmp", "emptyDir": {}} in spec["volumes"]
        assert all(m.get("readOnly") for path, m in mounts.items() if path != "/tmp")
        assert env_of(c)["PROMETHEUS_MULTIPROC_DIR"].startswith("/tmp/")
        assert env_of(c)["VMPOOLER_CONFIG_FILE"] == "/etc/vmpooler/base/vmpooler.yaml"
        assert env_of(c)["EXTRA_CONFIG"] == "/etc/vmpooler/config/pools.yaml"
    redis = container(docs, "vmpooler-redis-master")
    assert redis["securityContext"]["readOnlyRootFilesystem"] is True
    assert redis["securityContext"]["runAsNonRoot"] is True
    assert redis["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]


def test_manifests_stay_plain_for_podman(chart: helm_python.Chart) -> None:
    """podman kube play 4.3: no init containers, no projected volumes, no $(VAR) expansion,
    numeric probe ports."""
    for values in (None, their_values()):
        for doc in render(chart, values):
            if doc["kind"] != "Deployment":
                continue
            spec = doc["spec"]["template"]["spec"]
            assert "initContainers" not in spec
            assert all("projected" not in v for v in spec.get("volumes", []))
            for c in spec["containers"]:
                assert "$(" not in yaml.safe_dump([c.get("command"), c.get("args")])
                for probe in (c.get("livenessProbe"), c.get("readinessProbe")):
                    if probe and "httpGet" in probe:
                        assert isinstance(probe["httpGet"]["port"], int)


# The checksum rolls the pods when the configuration changes -----------------------------------

def test_the_config_checksum_changes_with_a_pool_and_only_then(chart: helm_python.Chart) -> None:
    base = {"pools": copy.deepcopy(DUMMY_POOLS)}
    first, again = render(chart, base), render(chart, base)
    changed = copy.deepcopy(base)
    changed["pools"][1]["size"] = 3
    other = render(chart, changed)
    for deployment in ("vmpooler-api", "vmpooler-manager"):
        assert checksum(first, deployment) == checksum(again, deployment)
        assert checksum(first, deployment) != checksum(other, deployment)
    assert checksum(first, "vmpooler-api") == checksum(first, "vmpooler-manager")
    text = chart.render(base, name="vmpooler", namespace="pooling")[
        "vmpooler/templates/configmaps.yaml"]
    assert checksum(first, "vmpooler-api") == hashlib.sha256(text.encode()).hexdigest()


def test_the_checksum_follows_the_base_config_too(chart: helm_python.Chart) -> None:
    first = render(chart)
    other = render(chart, {"baseconfig_extras": {":config": {"max_tries": 5}}})
    assert checksum(first, "vmpooler-manager") != checksum(other, "vmpooler-manager")


# Managers ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("replicas", "strategy"), [(1, "Recreate"), (3, "RollingUpdate")])
def test_manager_strategy_follows_replicas(chart: helm_python.Chart, replicas: int,
                                          strategy: str) -> None:
    docs = render(chart, {"manager": {"replicaCount": replicas}})
    spec = one(docs, "Deployment", "vmpooler-manager")["spec"]
    assert spec["replicas"] == replicas
    assert spec["strategy"]["type"] == strategy
    if strategy == "RollingUpdate":
        assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert ("vmpooler-manager" in names(docs, "PodDisruptionBudget")) == (replicas > 1)


def test_disruption_budgets_are_configurable(chart: helm_python.Chart) -> None:
    docs = render(chart, {"manager": {"replicaCount": 2}})
    api = one(docs, "PodDisruptionBudget", "vmpooler-api")["spec"]
    assert api == {"maxUnavailable": 1, "selector": {"matchLabels": {
        "app.kubernetes.io/name": "vmpooler", "app.kubernetes.io/instance": "vmpooler",
        "app.kubernetes.io/component": "api"}}}
    docs = render(chart, {"podDisruptionBudget": {"minAvailable": 1}})
    assert one(docs, "PodDisruptionBudget", "vmpooler-api")["spec"]["minAvailable"] == 1
    assert "maxUnavailable" not in one(docs, "PodDisruptionBudget", "vmpooler-api")["spec"]
    assert names(render(chart, {"podDisruptionBudget": {"enabled": False}}),
                 "PodDisruptionBudget") == set()


# Labels --------------------------------------------------------------------------------------

def test_every_object_carries_the_standard_labels(chart: helm_python.Chart) -> None:
    for doc in render(chart, {**their_values(), "manager": {"replicaCount": 2}}):
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "vmpooler", doc["kind"]
        assert labels["app.kubernetes.io/instance"] == "vmpooler"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/part-of"] == "vmpooler"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        if doc["kind"] in ("Deployment", "Service", "PodDisruptionBudget", "Secret"):
            assert labels["app.kubernetes.io/component"] in ("api", "manager", "redis")


def test_selectors_are_stable_and_match_the_pods(chart: helm_python.Chart) -> None:
    docs = render(chart, {"image": {"tag": "9.9.9"}})
    for component, deployment in (("api", "vmpooler-api"), ("manager", "vmpooler-manager"),
                                  ("redis", "vmpooler-redis-master")):
        spec = one(docs, "Deployment", deployment)["spec"]
        selector = spec["selector"]["matchLabels"]
        assert selector == {"app.kubernetes.io/name": "vmpooler",
                            "app.kubernetes.io/instance": "vmpooler",
                            "app.kubernetes.io/component": component}
        assert selector.items() <= spec["template"]["metadata"]["labels"].items()
        service = one(docs, "Service", deployment)["spec"]
        assert service["selector"] == selector


# Services ------------------------------------------------------------------------------------

def test_services_are_headless_for_cluster_ip_and_annotated_for_prometheus(
        chart: helm_python.Chart) -> None:
    docs = render(chart)
    for name in ("vmpooler-api", "vmpooler-manager"):
        service = one(docs, "Service", name)
        assert service["spec"]["clusterIP"] == "None"
        assert service["metadata"]["annotations"] == {
            "prometheus.io/scrape": "true", "prometheus.io/path": "/prometheus",
            "prometheus.io/port": "4567"}
    docs = render(chart, {"service": {"type": "NodePort", "nodePort": 30567,
                                      "metricsEnabled": False}})
    api = one(docs, "Service", "vmpooler-api")
    assert api["spec"]["type"] == "NodePort"
    assert "clusterIP" not in api["spec"]
    assert api["spec"]["ports"][0]["nodePort"] == 30567
    assert api["metadata"]["annotations"]["prometheus.io/scrape"] == "false"
    assert one(docs, "Service", "vmpooler-manager")["spec"]["clusterIP"] == "None"


def test_the_ingress_keeps_their_host_and_tls_secret(chart: helm_python.Chart) -> None:
    docs = render(chart, {"vmpoolerInstance": "ci", "ingress": {
        "enabled": True, "useTLS": True, "domain": "k8s.example.com", "className": "nginx"}})
    spec = one(docs, "Ingress", "vmpooler")["spec"]
    assert spec["rules"][0]["host"] == "ci.k8s.example.com"
    assert spec["rules"][0]["http"]["paths"][0]["backend"]["service"] == {
        "name": "vmpooler-api", "port": {"number": 4567}}
    assert spec["tls"] == [{"hosts": ["ci.k8s.example.com"],
                            "secretName": "ci.k8s.example.com-tls"}]
    assert spec["ingressClassName"] == "nginx"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_both_commands_log_in_the_chosen_format(chart: helm_python.Chart, fmt: str) -> None:
    docs = render(chart, {"logFormat": fmt, "logLevel": "debug"})
    for deployment in ("vmpooler-api", "vmpooler-manager"):
        args = container(docs, deployment)["args"]
        assert args[args.index("--log-format") + 1] == fmt
        assert args[args.index("--log-level") + 1] == "debug"
