"""The Helm chart in conf/helm/vmpooler keeps secrets out of its ConfigMaps (and refuses values
that would put one there), passes Redis's password and providers' credentials from Secrets, and
runs a standalone Redis of its own unless given an external one.
"""

from __future__ import annotations

import base64
from typing import Any

import helm_python
import pytest
import yaml

from tests.helm.chart import Manifest, container, env_of, names, one, render, their_values

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


@pytest.mark.parametrize("values", [
    {"config": {"require_token_for_vm_changes": True}},
    {"baseconfig_extras": {":providers": {":vc": {"password": "", "token": None}}}},
], ids=["boolean", "empty"])
def test_keys_named_like_secrets_without_one_render(chart: helm_python.Chart,
                                                    values: dict[str, Any]) -> None:
    assert names(render(chart, values), "ConfigMap") == {"vmpooler-baseconfig",
                                                          "vmpooler-pools"}


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
