"""The configuration the Helm chart in conf/helm/vmpooler renders: a values file written for
vmpooler-deployment's chart 3.10.3 (tests/data) must render with this one, and the vmpooler.yaml
and pools.yaml in the ConfigMaps (or in a site's own) are loaded by vmpooler's own config loader
with the environment the Deployments set.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.helm.chart import (
    DUMMY_POOLS,
    container,
    env_of,
    loaded_config,
    names,
    one,
    render,
    their_values,
)


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


def test_without_pools_the_pools_file_names_none(chart: helm_python.Chart,
                                                  tmp_path: Path) -> None:
    """No `pools`: pools.yaml has no :pools: key, so vmpooler.yaml's count (else Redis's)."""
    docs = render(chart, {"pools": [], "baseconfig_extras": {":pools": copy.deepcopy(
        DUMMY_POOLS)}})
    assert yaml.safe_load(one(docs, "ConfigMap", "vmpooler-pools")["data"]["pools.yaml"]) == {}
    config = loaded_config(docs, "vmpooler-api", tmp_path)
    assert config.pool_names == ("debian-12-x86_64", "centos-9-x86_64")


def test_the_tracing_values_render_to_the_same_tracing_configuration(
        chart: helm_python.Chart, tmp_path: Path) -> None:
    values: dict[str, Any] = {}
    values["tracing"] = {"enabled": "true",
                         "jaegerHost": "http://jaeger.tracing.svc:14268/api/traces",
                         "sampleRatio": 0.25}
    docs = render(chart, values)
    for deployment in ("vmpooler-api", "vmpooler-manager"):
        tracing = loaded_config(docs, deployment, tmp_path / deployment).tracing
        assert (tracing.enabled, tracing.endpoint, tracing.sample_ratio) == (
            True, "http://jaeger.tracing.svc:4318/v1/traces", 0.25)
    values["tracing"]["otlpEndpoint"] = "http://collector.svc:4318/v1/traces"
    docs = render(chart, values)
    tracing = loaded_config(docs, "vmpooler-api", tmp_path / "otlp").tracing
    assert tracing.endpoint == "http://collector.svc:4318/v1/traces"
