"""What the chart lets reach or change its pods, rendered by the real Helm engine: pool changes
off by default, no service-account token, the runtime's seccomp profile, and the optional
NetworkPolicies of the API and the managers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.helm.chart import container, env_of, loaded_config, names, one, render, their_values

RELEASE = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "vmpooler",
                                           "app.kubernetes.io/instance": "vmpooler"}}}


def pod_spec(docs: list[dict[str, Any]], deployment: str) -> dict[str, Any]:
    return one(docs, "Deployment", deployment)["spec"]["template"]["spec"]


def test_pool_changes_are_off_by_default(chart: helm_python.Chart, tmp_path: Path) -> None:
    docs = render(chart)
    for deployment in ("vmpooler-api", "vmpooler-manager"):
        config = loaded_config(docs, deployment, tmp_path / deployment)
        assert config.settings.experimental_features is False
        assert config.settings.experimental_features_without_auth is False
    theirs = render(chart, their_values())  # their chart set EXPERIMENTAL_FEATURES=true
    base = yaml.safe_load(one(theirs, "ConfigMap", "vmpooler-baseconfig")["data"][
        "vmpooler.yaml"])
    assert base[":config"]["experimental_features"] is False
    for deployment in ("vmpooler-api", "vmpooler-manager"):
        assert "EXPERIMENTAL_FEATURES" not in env_of(container(theirs, deployment))


@pytest.mark.parametrize("values", [None, "theirs"], ids=["defaults", "vmpooler-deployment"])
def test_pods_mount_no_token_and_run_under_the_runtime_seccomp_profile(
    chart: helm_python.Chart, values: str | None,
) -> None:
    docs = render(chart, their_values() if values else None)
    deployments = names(docs, "Deployment")
    assert len(deployments) == 3  # the API, the managers, the built-in Redis
    for deployment in deployments:
        spec = pod_spec(docs, deployment)
        assert spec["automountServiceAccountToken"] is False, deployment
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, deployment
    account = one(docs, "ServiceAccount", "vmpooler")
    assert account["automountServiceAccountToken"] is False


def test_network_policies_are_off_by_default(chart: helm_python.Chart) -> None:
    assert names(render(chart), "NetworkPolicy") == set()
    assert names(render(chart, their_values()), "NetworkPolicy") == {"redis"}  # redis's own


def test_network_policies_let_in_only_the_chosen_sources(chart: helm_python.Chart) -> None:
    ingress_ns = {"namespaceSelector": {"matchLabels": {"name": "ingress"}}}
    monitoring = {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}
    docs = render(chart, {"networkPolicy": {"enabled": True, "api": {"from": [ingress_ns]},
                                            "manager": {"from": [monitoring]}}})
    assert names(docs, "NetworkPolicy") == {"vmpooler-api", "vmpooler-manager"}
    for component, sources in (("api", [ingress_ns]), ("manager", [RELEASE, monitoring])):
        spec = one(docs, "NetworkPolicy", f"vmpooler-{component}")["spec"]
        pod_labels = one(docs, "Deployment", f"vmpooler-{component}")["spec"]["template"][
            "metadata"]["labels"]
        assert spec["podSelector"]["matchLabels"].items() <= pod_labels.items()  # its pods
        assert spec["policyTypes"] == ["Ingress"]  # egress is not restricted unless asked
        assert spec["ingress"] == [{"ports": [{"port": 4567, "protocol": "TCP"}],
                                    "from": sources}]
        assert "egress" not in spec
    open_api = render(chart, {"networkPolicy": {"enabled": True}})
    assert one(open_api, "NetworkPolicy", "vmpooler-api")["spec"]["ingress"] == [
        {"ports": [{"port": 4567, "protocol": "TCP"}]}]  # from anywhere, that port only
    assert one(open_api, "NetworkPolicy", "vmpooler-manager")["spec"]["ingress"][0][
        "from"] == [RELEASE]


def test_restricted_egress_reaches_dns_redis_and_the_listed_providers(
    chart: helm_python.Chart,
) -> None:
    vcenter = {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}],
               "ports": [{"port": 443, "protocol": "TCP"}]}
    dns = {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}
    builtin = render(chart, {"networkPolicy": {"enabled": True, "restrictEgress": True,
                                               "egressTo": [vcenter]}})
    external = render(chart, {"redis": {"host": "redis.example", "port": 6380},
                              "networkPolicy": {"enabled": True, "restrictEgress": True}})
    for component in ("api", "manager"):
        spec = one(builtin, "NetworkPolicy", f"vmpooler-{component}")["spec"]
        assert spec["policyTypes"] == ["Ingress", "Egress"]
        redis_pod = one(builtin, "Deployment", "vmpooler-redis-master")["spec"]["template"][
            "metadata"]["labels"]
        to_redis = spec["egress"][1]
        assert to_redis["ports"] == [{"port": 6379, "protocol": "TCP"}]
        assert to_redis["to"][0]["podSelector"]["matchLabels"].items() <= redis_pod.items()
        assert spec["egress"] == [dns, to_redis, vcenter]
        spec = one(external, "NetworkPolicy", f"vmpooler-{component}")["spec"]
        assert spec["egress"] == [dns, {"ports": [{"port": 6380, "protocol": "TCP"}]}]
