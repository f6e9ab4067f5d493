"""The Helm chart in conf/helm/vmpooler, rendered and linted by the real Helm engine
(helm-python-sdk), offline: no cluster, so `lookup` finds nothing.

The manifests are checked as parsed YAML; the vmpooler.yaml and pools.yaml they render are
loaded by vmpooler's own config loader with the environment the Deployments set, and a values
file written for vmpooler-deployment's chart 3.10.3 (tests/data) must render with this one.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import subprocess
import sys
import tomllib
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import helm_python
import pytest
import redis
import yaml

from tests.harness import wait_until
from vmpooler.actors.config import load_config
from vmpooler.actors.storage.embedded_redis import find_redis_server, free_port

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "conf" / "helm" / "vmpooler"
THEIR_VALUES = Path(__file__).parent / "data" / "vmpooler-deployment-values-3.10.3.yaml"

Manifest = dict[str, Any]

DUMMY_POOLS = [
    {"name": "debian-12-x86_64", "alias": ["debian-12"], "template": "templates/debian-12",
     "size": 2, "provider": "dummy"},
    {"name": "centos-9-x86_64", "template": "templates/centos-9", "size": 1,
     "provider": "dummy"},
]


@pytest.fixture(scope="module")
def chart() -> helm_python.Chart:
    with helm_python.Chart.load(str(CHART)) as loaded:
        yield loaded


def their_values() -> dict[str, Any]:
    return yaml.safe_load(THEIR_VALUES.read_text())


def render(chart: helm_python.Chart, values: Mapping[str, Any] | None = None) -> list[Manifest]:
    """Every object the chart renders for release "vmpooler" in namespace "pooling"."""
    out = chart.render(dict(values or {}), name="vmpooler", namespace="pooling")
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return docs


def one(docs: list[Manifest], kind: str, name: str) -> Manifest:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {[(d['kind'], d['metadata']['name']) for d in docs]}"
    return found[0]


def names(docs: list[Manifest], kind: str) -> set[str]:
    return {d["metadata"]["name"] for d in docs if d["kind"] == kind}


def container(docs: list[Manifest], deployment: str) -> dict[str, Any]:
    return one(docs, "Deployment", deployment)["spec"]["template"]["spec"]["containers"][0]


def env_of(c: Mapping[str, Any]) -> dict[str, Any]:
    """name → value, or the valueFrom mapping."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def checksum(docs: list[Manifest], deployment: str) -> str:
    return one(docs, "Deployment", deployment)["spec"]["template"]["metadata"]["annotations"][
        "checksum/config"]


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


def test_their_values_render_with_their_names(chart: helm_python.Chart) -> None:
    docs = render(chart, their_values())
    assert names(docs, "ConfigMap") == {"vmpooler-baseconfig", "vmpooler-pools"}
    assert names(docs, "Secret") == {"redis"}  # bitnami's, through redis.fullnameOverride
    assert names(docs, "Service") >= {"vmpooler-api", "vmpooler-manager", "redis-master",
                                      "redis-metrics"}
    assert names(docs, "NetworkPolicy") == {"redis"}
    redis = one(docs, "Deployment", "redis-master")["spec"]["template"]["spec"]
    assert redis["containers"][0]["image"] == (
        "artifactory.delivery.puppetlabs.net/release-engineering/redis:6.2.7-debian-11-r11")
    assert redis["containers"][0]["resources"]["limits"] == {"cpu": "1000m",
                                                           "memory": "2048Mi"}
    assert [c["name"] for c in redis["containers"]] == ["redis", "metrics"]
    for deployment in ("vmpooler-api", "vmpooler-manager"):
        env = env_of(container(docs, deployment))
        assert env["REDIS_SERVER"] == "redis-master"
        assert env["REDIS_PASSWORD"] == {"secretKeyRef": {"name": "redis",
                                                          "key": "redis-password"}}
        assert env["VM_LIFETIME"] == "2"
        assert env["REDIS_RECONNECT_ATTEMPTS"] == "13"  # their list of 13 delays
        assert env["SITE_NAME"] == "<b>test-instance</b>"
        assert "JRUBY_OPTS" not in env
        assert "VMPOOLER_TRACING_ENABLED" not in env  # 'false'
    manager = env_of(container(docs, "vmpooler-manager"))
    assert manager["GOOGLE_APPLICATION_CREDENTIALS"] == "/vault/secrets/gce-keyfile.json"
    assert manager["AWS_KEY_FILE_LOCATION"] == "/vault/secrets/ec2-keyfile.rsa"
    assert "ROOT_KEYS_SCRIPT" not in manager  # ''


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


# Secrets -------------------------------------------------------------------------------------

def test_no_secret_reaches_a_configmap(chart: helm_python.Chart) -> None:
    values = their_values()
    values["redis"]["password"] = "redis-s3cret-value"
    values["providerCredentials"] = [{"provider": "vsphere-ci67", "existingSecret": "vc"}]
    docs = render(chart, values)
    secret = one(docs, "Secret", "redis")
    assert base64.b64decode(secret["data"]["redis-password"]) == b"redis-s3cret-value"
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            text = yaml.safe_dump(doc)
            assert "s3cret" not in text
            assert "password" not in text.lower()
        if doc["kind"] == "Deployment":
            assert "s3cret" not in yaml.safe_dump(doc)


@pytest.mark.parametrize("values", [
    {"baseconfig_extras": {":providers": {":vc": {"provider_class": "vsphere",
                                                  "password": "hunter2"}}}},
    {"auth": {"provider": "ldap", ":ldap": {"service_account_hash": {
        "user_dn": "cn=svc", "password": "hunter2"}}}},
    {"pools": [{"name": "p", "size": 1, "api_token": "hunter2"}]},
], ids=["provider-password", "ldap-service-password", "pool-token"])
def test_the_chart_refuses_a_secret_in_a_configmap(chart: helm_python.Chart,
                                                   values: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmError, match="ConfigMaps are not for secrets"):
        render(chart, values)


def test_redis_password_comes_from_the_secret(chart: helm_python.Chart) -> None:
    docs = render(chart)
    ref = {"secretKeyRef": {"name": "vmpooler-redis", "key": "redis-password"}}
    for deployment in ("vmpooler-api", "vmpooler-manager"):
        assert env_of(container(docs, deployment))["REDIS_PASSWORD"] == ref
    redis = container(docs, "vmpooler-redis-master")
    assert env_of(redis)["REDIS_PASSWORD"] == ref
    assert redis["command"] == ["sh", "-c",
                                'exec redis-server "$@" --requirepass "$REDIS_PASSWORD"',
                                "redis-server"]
    secret = one(docs, "Secret", "vmpooler-redis")
    assert len(base64.b64decode(secret["data"]["redis-password"])) == 32


def test_provider_credentials_and_secret_config_files(chart: helm_python.Chart) -> None:
    docs = render(chart, {
        "providerCredentials": [
            {"provider": "vsphere-east.1", "existingSecret": "vc", "serverKey": "host"},
            {"provider": "other", "existingSecret": "o", "usernameKey": ""}],
        "extraConfigSecrets": [{"name": "vmpooler-ldap"}, {"name": "more", "key": "x.yaml"}],
    })
    for deployment in ("vmpooler-api", "vmpooler-manager"):
        c = container(docs, deployment)
        env = env_of(c)
        assert env["VMPOOLER_PROVIDER_VSPHERE_EAST_1_USERNAME"] == {
            "secretKeyRef": {"name": "vc", "key": "username"}}
        assert env["VMPOOLER_PROVIDER_VSPHERE_EAST_1_PASSWORD"] == {
            "secretKeyRef": {"name": "vc", "key": "password"}}
        assert env["VMPOOLER_PROVIDER_VSPHERE_EAST_1_SERVER"] == {
            "secretKeyRef": {"name": "vc", "key": "host"}}
        assert "VMPOOLER_PROVIDER_OTHER_USERNAME" not in env
        assert "VMPOOLER_PROVIDER_OTHER_SERVER" not in env
        assert env["EXTRA_CONFIG"] == ("/etc/vmpooler/config/pools.yaml,"
                                       "/etc/vmpooler/secrets/vmpooler-ldap/vmpooler.yaml,"
                                       "/etc/vmpooler/secrets/more/x.yaml")
        volumes = one(docs, "Deployment", deployment)["spec"]["template"]["spec"]["volumes"]
        assert {"name": "secret-config-1", "secret": {
            "secretName": "more", "defaultMode": 0o440,
            "items": [{"key": "x.yaml", "path": "x.yaml"}]}} in volumes


def test_extra_env_volumes_and_mounts_pass_through(chart: helm_python.Chart) -> None:
    docs = render(chart, {
        "extraEnv": [{"name": "VM_LIFETIME", "value": "7"}],
        "extraEnvFrom": [{"secretRef": {"name": "vmpooler-env"}}],
        "extraVolumes": [{"name": "vault", "emptyDir": {}}],
        "extraVolumeMounts": [{"name": "vault", "mountPath": "/vault/secrets"}],
    })
    for deployment in ("vmpooler-api", "vmpooler-manager"):
        spec = one(docs, "Deployment", deployment)["spec"]["template"]["spec"]
        c = spec["containers"][0]
        assert c["env"][-1] == {"name": "VM_LIFETIME", "value": "7"}  # last: it wins
        assert c["envFrom"] == [{"secretRef": {"name": "vmpooler-env"}}]
        assert {"name": "vault", "emptyDir": {}} in spec["volumes"]
        assert {"name": "vault", "mountPath": "/vault/secrets"} in c["volumeMounts"]


# Redis ---------------------------------------------------------------------------------------

def test_an_external_redis_replaces_the_built_in_one(chart: helm_python.Chart) -> None:
    docs = render(chart, {"redis": {"host": "redis.example.com", "port": 6380,
                                    "existingSecret": "site-redis"}})
    assert names(docs, "Deployment") == {"vmpooler-api", "vmpooler-manager"}
    assert names(docs, "Secret") == set()
    assert names(docs, "PersistentVolumeClaim") == set()
    assert names(docs, "Service") == {"vmpooler-api", "vmpooler-manager"}
    for deployment in ("vmpooler-api", "vmpooler-manager"):
        env = env_of(container(docs, deployment))
        assert env["REDIS_SERVER"] == "redis.example.com"
        assert env["REDIS_PORT"] == "6380"
        assert env["REDIS_PASSWORD"] == {"secretKeyRef": {"name": "site-redis",
                                                          "key": "redis-password"}}
    docs = render(chart, {"redis": {"host": "redis.example.com"}})
    assert "REDIS_PASSWORD" not in env_of(container(docs, "vmpooler-api"))


def test_redis_storage_is_a_claim_an_existing_claim_or_an_empty_dir(
        chart: helm_python.Chart) -> None:
    def data_volume(docs: list[Manifest]) -> dict[str, Any]:
        spec = one(docs, "Deployment", "vmpooler-redis-master")["spec"]["template"]["spec"]
        return spec["volumes"][0]

    docs = render(chart)
    assert data_volume(docs)["persistentVolumeClaim"] == {"claimName": "vmpooler-redis-data"}
    claim = one(docs, "PersistentVolumeClaim", "vmpooler-redis-data")
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    docs = render(chart, {"redis": {"master": {"persistence": {
        "existingClaim": "redis-data-redis-master-0"}}}})
    assert data_volume(docs)["persistentVolumeClaim"] == {
        "claimName": "redis-data-redis-master-0"}
    assert names(docs, "PersistentVolumeClaim") == set()
    docs = render(chart, {"redis": {"master": {"persistence": {"enabled": False}}}})
    assert data_volume(docs) == {"name": "data", "emptyDir": {}}
    assert names(docs, "PersistentVolumeClaim") == set()


def test_only_a_standalone_redis_is_built_in(chart: helm_python.Chart) -> None:
    with pytest.raises(helm_python.HelmError, match="standalone"):
        render(chart, {"redis": {"architecture": "replication"}})


@pytest.mark.parametrize(("value", "expected"), [
    ("[0,0.25,0.5,1]", "4"), ([0, 1, 2], "3"), ("7", "7"), (12, "12"), ("", None)])
def test_reconnect_attempts_accept_vmpooler_3_lists(chart: helm_python.Chart, value: Any,
                                                    expected: str | None) -> None:
    env = env_of(container(render(chart, {"redis_reconnect_attempts": value}), "vmpooler-api"))
    assert env.get("REDIS_RECONNECT_ATTEMPTS") == expected


# The ConfigMaps' layout ----------------------------------------------------------------------

def test_a_site_can_provide_either_configmap(chart: helm_python.Chart) -> None:
    docs = render(chart, {"configmapName": "site-base", "poolsConfigMapName": "site-pools"})
    assert names(docs, "ConfigMap") == set()
    spec = one(docs, "Deployment", "vmpooler-manager")["spec"]["template"]["spec"]
    by_name = {v["name"]: v for v in spec["volumes"]}
    assert by_name["config"]["configMap"]["name"] == "site-base"
    assert by_name["pools"]["configMap"]["name"] == "site-pools"


def test_extras_merge_over_the_chart_sections(chart: helm_python.Chart) -> None:
    docs = render(chart, {"baseconfig_extras": {
        "config": {"task_limit": 5}, ":tagfilter": {"team": "^x"},
        ":providers": {":dummy": {"provider_class": "dummy"}}}})
    data = yaml.safe_load(one(docs, "ConfigMap", "vmpooler-baseconfig")["data"]["vmpooler.yaml"])
    assert data[":config"]["task_limit"] == 5
    assert data[":config"]["ready_ttl"] == 480  # kept
    assert data[":tagfilter"] == {"project": "^([^/]+)", "team": "^x"}
    assert data[":providers"] == {":dummy": {"provider_class": "dummy"}}
    assert data[":prometheus"] == {"prefix": "vmpooler"}
    assert "config" not in data


# The rendered configuration loads --------------------------------------------------------------

def write_configmaps(docs: list[Manifest], etc: Path) -> None:
    """The ConfigMaps' files where the pods mount them, under ``etc`` for /etc/vmpooler."""
    for folder in ("base", "config"):
        (etc / folder).mkdir(parents=True, exist_ok=True)
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            for name, text in doc["data"].items():
                (etc / ("config" if name == "pools.yaml" else "base") / name).write_text(text)


def environ_of(docs: list[Manifest], c: Mapping[str, Any], etc: Path,
               tmp: Path) -> dict[str, str]:
    """A container's environment, /etc/vmpooler read as ``etc`` and /tmp as ``tmp``; values
    from Secrets decoded when the chart renders the Secret, else made up."""
    secrets = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "Secret"}
    environ = {}
    for entry in c["env"]:
        if "value" in entry:
            value = entry["value"]
            if value.startswith("/tmp/"):
                value = f"{tmp}/{value.removeprefix('/tmp/')}"
            environ[entry["name"]] = value.replace("/etc/vmpooler", str(etc))
            continue
        ref = entry["valueFrom"]["secretKeyRef"]
        data = secrets.get(ref["name"], {})
        environ[entry["name"]] = (base64.b64decode(data[ref["key"]]).decode()
                                  if ref["key"] in data else f"from-{ref['name']}")
    return environ


def loaded_config(docs: list[Manifest], deployment: str, tmp_path: Path) -> Any:
    """vmpooler's config as the Deployment's container would load it."""
    etc = tmp_path / "etc" / "vmpooler"
    write_configmaps(docs, etc)
    environ = environ_of(docs, container(docs, deployment), etc, tmp_path)
    return load_config(environ=environ, cwd=tmp_path)


def test_the_default_configuration_loads(chart: helm_python.Chart, tmp_path: Path) -> None:
    config = loaded_config(render(chart), "vmpooler-manager", tmp_path)
    assert config.pool_names == ("debian-12-x86_64",)
    assert config.redis.server == "vmpooler-redis-master"
    assert config.redis.password and len(config.redis.password) == 32
    assert config.metrics.backend == "prometheus"
    assert config.metrics.prometheus.multiprocess_dir == f"{tmp_path}/prometheus"
    assert config.tagfilter == {"project": "^([^/]+)"}
    assert config.settings.ready_ttl == 480
    assert config.settings.task_limit == 30
    assert config.settings.vm_lifetime == 2


@pytest.mark.parametrize("deployment", ["vmpooler-api", "vmpooler-manager"])
def test_their_values_load_with_our_loader(chart: helm_python.Chart, tmp_path: Path,
                                           deployment: str) -> None:
    """Their values, plus what their chart left to the site: the provider their pools name
    (vmpooler-deployment's values have no :providers:), its credentials from a Secret."""
    values = their_values()
    values["baseconfig_extras"] = {":providers": {":vsphere-ci67": {
        "provider_class": "vsphere", "server": "vcenter.example.com"}}}
    values["providerCredentials"] = [{"provider": "vsphere-ci67", "existingSecret": "vc"}]
    docs = render(chart, values)
    config = loaded_config(docs, deployment, tmp_path)
    assert config.pool_names == ("almalinux-8-x86_64-pixa4", "centos-6-x86_64-pixa4")
    assert config.aliases["centos-6-x86_64"] == ("centos-6-x86_64-pixa4",)
    assert config.providers["vsphere-ci67"].settings["username"] == "from-vc"
    assert config.redis.server == "redis-master"
    assert config.redis.reconnect_attempts == 13
    assert config.redis.connection_pool_size == 200
    assert config.settings.ondemand_request_ttl == 50
    assert config.settings.max_lifetime_upper_limit == 336
    assert config.settings.vm_lifetime_auth == 12
    assert config.metrics.tags == ("vmpooler_instance:test-instance",)
    assert config.dns_configs["example"].domain == "vmpooler.example.com"


def test_their_values_with_a_pools_list_load(chart: helm_python.Chart, tmp_path: Path) -> None:
    values = their_values()
    values["pools"] = copy.deepcopy(DUMMY_POOLS)
    config = loaded_config(render(chart, values), "vmpooler-manager", tmp_path)
    assert config.pool_names == ("debian-12-x86_64", "centos-9-x86_64")
    assert config.pool("centos-9-x86_64").provider == "dummy"


@pytest.mark.parametrize("values", [
    {"config": {"require_token_for_vm_changes": True}},
    {"baseconfig_extras": {":providers": {":vc": {"password": "", "token": None}}}},
], ids=["boolean", "empty"])
def test_keys_named_like_secrets_without_one_render(chart: helm_python.Chart,
                                                    values: dict[str, Any]) -> None:
    assert names(render(chart, values), "ConfigMap") == {"vmpooler-baseconfig",
                                                          "vmpooler-pools"}


def test_without_pools_the_pools_file_names_none(chart: helm_python.Chart,
                                                  tmp_path: Path) -> None:
    """No `pools`: pools.yaml has no :pools: key, so vmpooler.yaml's count (else Redis's)."""
    docs = render(chart, {"pools": [], "baseconfig_extras": {":pools": copy.deepcopy(
        DUMMY_POOLS)}})
    assert yaml.safe_load(one(docs, "ConfigMap", "vmpooler-pools")["data"]["pools.yaml"]) == {}
    config = loaded_config(docs, "vmpooler-api", tmp_path)
    assert config.pool_names == ("debian-12-x86_64", "centos-9-x86_64")

# The rendered pods run ------------------------------------------------------------------------

@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.terminate()
    for process in started:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def probe_passes(c: Mapping[str, Any], kind: str, environ: Mapping[str, str]) -> bool:
    command = c[kind]["exec"]["command"]
    if command[0] == "python3":
        command = [sys.executable, *command[1:]]
    return subprocess.run(command, env=environ, capture_output=True, timeout=10).returncode == 0


@pytest.mark.integration
def test_the_rendered_pods_run(chart: helm_python.Chart, tmp_path: Path,
                               processes: list[subprocess.Popen[bytes]]) -> None:
    """The built-in Redis's command line, and the API's and manager's arguments and
    environment, run here on loopback (Services become 127.0.0.1; each pod its own /tmp), and
    their exec probes pass."""
    redis_port, api_port = free_port(), free_port()
    docs = render(chart, {
        "probeHandler": "exec", "service": {"port": api_port},
        "redis": {"port": redis_port, "master": {"extraFlags": ["--bind", "127.0.0.1"]}},
        "pools": [{"name": "debian-12-x86_64", "size": 1, "provider": "dummy"}],
    })
    etc = tmp_path / "etc" / "vmpooler"
    write_configmaps(docs, etc)
    binaries = str(Path(find_redis_server(prefer_system=True)).parent)

    store = container(docs, "vmpooler-redis-master")
    data = tmp_path / "data"
    data.mkdir()
    store_env = {**environ_of(docs, store, etc, tmp_path),
                 "PATH": f"{binaries}{os.pathsep}{os.environ['PATH']}"}
    args = [str(data) if arg == "/data" else arg for arg in store["args"]]
    processes.append(subprocess.Popen([*store["command"], *args], env=store_env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
    wait_until(lambda: probe_passes(store, "readinessProbe", store_env), 20,
               "the Redis pod's readiness probe")
    assert probe_passes(store, "livenessProbe", store_env)
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=redis_port).ping()
    assert redis.Redis(port=redis_port, password=store_env["REDIS_PASSWORD"]).ping()

    pods = {}
    for deployment in ("vmpooler-manager", "vmpooler-api"):
        c = container(docs, deployment)
        pod_tmp = tmp_path / deployment
        pod_tmp.mkdir()
        environ = {**os.environ, **environ_of(docs, c, etc, pod_tmp),
                   "REDIS_SERVER": "127.0.0.1", "HOME": str(pod_tmp)}
        environ["VMPOOLER_MANAGER_BIND"] = f"127.0.0.1:{free_port()}"
        args = [arg.replace("0.0.0.0:", "127.0.0.1:") for arg in c["args"]]
        with open(tmp_path / f"{deployment}.log", "wb") as log:
            processes.append(subprocess.Popen([sys.executable, "-m", "vmpooler.web.cli", *args],
                                              env=environ, cwd=pod_tmp, stdout=log,
                                              stderr=subprocess.STDOUT))
        pods[deployment] = (c, environ)
    api, api_env = pods["vmpooler-api"]
    wait_until(lambda: probe_passes(api, "readinessProbe", api_env), 40,
               "the API's readiness probe (a manager's heartbeat)")
    assert probe_passes(api, "livenessProbe", api_env)
    with urllib.request.urlopen(f"http://127.0.0.1:{api_port}/api/v3/vm", timeout=10) as answer:
        assert json.load(answer) == ["debian-12-x86_64"]
