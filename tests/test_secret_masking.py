"""Secrets in the configuration are masked by pattern wherever it is shown: ``/config``,
``/full_config``, what ``vmpooler check-config`` prints and the values its errors repeat."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import redis

from tests.api_harness import api, api_config, api_pool
from vmpooler.actors.config import load_config
from vmpooler.actors.config._data import freeze, is_secret_key, mask_secrets
from vmpooler.actors.config.problems import ConfigError
from vmpooler.actors.config.render import render_config


# -- secrets in the configuration ----------------------------------------------------------------
@pytest.mark.parametrize("key", [
    "password", "secret_key", "credentials", "private_key", "access_key", "passphrase",
    "api_key", "apiKey", "token", "bind_password", "sentinel_password", ":password",
    "Secret", "client_secret", "service_account_credentials_json", "passwd", "ssh_key"])
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", [
    "name", "template", "size", "alias", "clone_target", "domain", "provider", "ready_ttl",
    "timeout", "dns_plugin", "folder", "datastore", "datacenter", "server", "username",
    "user_dn", "host", "port", "keepalive", "snapshot_mainMem_ioblockPages", "max_tags_per_vm",
    "enforce_vm_ownership", "tags", 3])
def test_harmless_keys(key: object) -> None:
    assert not is_secret_key(key)


def test_mask_secrets_hides_whole_values_but_not_switches() -> None:
    masked = mask_secrets({"credentials": {"user": "u", "pass": "p"}, "private_key": ["a"],
                           "pin_key": 1234, "require_token_for_vm_changes": True,
                           "token": None, "nested": [{"secret_key": "s"}]})
    assert masked == {"credentials": "********", "private_key": "********",
                      "pin_key": "********", "require_token_for_vm_changes": True,
                      "token": None, "nested": [{"secret_key": "********"}]}


DNS_SECRETS = {"dns_class": "gcp-clouddns", "domain": "example.com", "project": "p1",
               "secret_key": "S3CR3T", "credentials": "CRED", "private_key": "PRIV",
               "access_key": "ACCESS", "passphrase": "PHRASE"}


def test_full_config_and_config_mask_by_pattern(redis_client: redis.Redis) -> None:
    pool = api_pool("pool1", domain="example.com", clone_target="c1")
    pool = dataclasses.replace(pool, raw={**pool.raw, "clone_target": "c1",
                                          "provider": "dummy", "api_key": "POOLKEY"})
    config = dataclasses.replace(api_config([pool], require_token_for_vm_changes=True), raw=freeze({
        "config": {"site_name": "lab", "require_token_for_vm_changes": True},
        "dns_configs": {"gcp": DNS_SECRETS},
        "pools": [dict(pool.raw)],
    }))
    a = api(redis_client, config)
    full = a.client.simulate_get("/api/v3/full_config")
    assert full.status_code == 200
    dns = full.json["full_config"]["dns_configs"]["gcp"]
    assert dns == {"dns_class": "gcp-clouddns", "domain": "example.com", "project": "p1",
                   **{k: "********" for k in ("secret_key", "credentials", "private_key",
                                              "access_key", "passphrase")}}
    assert full.json["full_config"]["config"]["require_token_for_vm_changes"] is True
    pools = a.client.simulate_get("/api/v3/config").json["pool_configuration"]
    assert pools == [{"name": "pool1", "size": 1, "template": "templates/pool1",
                      "alias": [], "clone_target": "c1", "provider": "dummy",
                      "api_key": "********", "ready_ttl": 60, "template_ready": False}]
    for text in (full.text, a.client.simulate_get("/api/v3/config").text):
        for secret in ("S3CR3T", "CRED", "PRIV", "ACCESS", "PHRASE", "POOLKEY"):
            assert secret not in text


def test_check_config_never_repeats_a_secret(tmp_path: Path) -> None:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(":redis:\n  password: 98765\n  data_ttl: 'x'\n"
                    ":dns_configs:\n  :gcp:\n    dns_class: 'dynamic-dns'\n    domain: 'e.com'\n"
                    "    secret_key: 'S3CR3T'\n    passphrase: 'PHRASE'\n:pools: []\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={}, cwd=tmp_path)
    text = str(caught.value)
    assert "redis.password: expected a string, got ******** (quote it)" in text
    assert "98765" not in text and "got 'x'" in text
    path.write_text(path.read_text().replace("98765", "'98765'").replace("'x'", "1"))
    rendered = render_config(load_config(path, environ={}, cwd=tmp_path))
    for secret in ("98765", "S3CR3T", "PHRASE"):
        assert secret not in rendered
    assert "secret_key: '********'" in rendered
