"""Who may change a VM, and how much: the tag cap of PUT ``/vm/:hostname``, the expiry of the
day's tag statistics, and the token rules ``enforce_vm_ownership`` and
``require_token_for_vm_changes`` (web/tokens.py) against vmpooler's defaults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
import redis

from tests.api_harness import TOKEN, Api, api, api_config, api_pool
from tests.openapi_check import body_errors
from vmpooler.actors.config import load_config
from vmpooler.actors.config.unacted import unacted_warnings
from vmpooler.actors.storage import schema, timefmt

V = "/api/v3/vm"
OTHER = "other000000000000000000000000000"
MINE = {"X-AUTH-TOKEN": TOKEN}
THEIRS = {"X-AUTH-TOKEN": OTHER}
BOGUS = {"X-AUTH-TOKEN": "not-a-token"}


def pools(redis_client: redis.Redis, **settings: Any) -> Api:
    auth = settings.pop("auth", True)
    a = api(redis_client, api_config([api_pool("pool1", domain="one.example.com")], auth=auth,
                                      **settings))
    a.add_token()
    a.add_token(OTHER, "mallory")
    a.add_vm("pool1", "ready1")
    a.add_vm("pool1", "ready2")
    a.add_vm("pool1", "mine", queue="running", checkout="2024-05-01 10:00:00 +0000",
             **{"token:token": TOKEN, "token:user": "jdoe"})
    a.add_vm("pool1", "anyones", queue="running", checkout="2024-05-01 10:00:00 +0000")
    return a


def checked(result: falcon.testing.Result, method: str, path: str) -> falcon.testing.Result:
    errors = body_errors(method, path, result.status_code, result.text)
    assert not errors, errors
    return result


def put(a: Api, vm: str, body: Any, headers: dict[str, str] | None = None
        ) -> falcon.testing.Result:
    return checked(a.client.simulate_put(f"{V}/{vm}", body=json.dumps(body), headers=headers),
                   "put", "/api/v3/vm/{hostname}")


def delete(a: Api, vm: str, headers: dict[str, str] | None = None) -> falcon.testing.Result:
    return checked(a.client.simulate_delete(f"{V}/{vm}", headers=headers),
                   "delete", "/api/v3/vm/{hostname}")


def tags(n: int, start: int = 0) -> dict[str, str]:
    return {f"k{i}": f"v{i}" for i in range(start, start + n)}


def vm_tags(a: Api, vm: str) -> dict[str, str]:
    return {k: v for k, v in a.redis.hgetall(schema.vm(vm)).items() if k.startswith("tag:")}


def today(a: Api) -> str:
    return schema.tag_stats(timefmt.date_bucket(a.clock.now()))


# -- the tag cap ---------------------------------------------------------------------------------
def test_a_vm_carries_at_most_max_tags_per_vm_tags(redis_client: redis.Redis) -> None:
    a = pools(redis_client, auth=False, max_tags_per_vm=5)
    refused = put(a, "ready1", {"tags": tags(6)})
    assert refused.status_code == 400
    assert refused.json == {"ok": False, "failure": [
        "A VM may carry at most 5 tags (the request adds 6)."]}
    assert vm_tags(a, "ready1") == {} and not a.redis.exists(today(a))
    assert put(a, "ready1", {"tags": tags(3)}).status_code == 200
    over = put(a, "ready1", {"lifetime": 4, "tags": tags(4, start=2)})  # k2 is there: adds 3
    assert over.status_code == 400
    assert over.json["failure"] == ["A VM may carry at most 5 tags (this one has 3; the "
                                    "request adds 3)."]
    assert not a.redis.hexists(schema.vm("ready1"), "lifetime"), "nothing written"
    assert a.redis.hlen(today(a)) == 3
    assert put(a, "ready1", {"tags": {"k0": "new", "k3": "x", "k4": "y"}}).status_code == 200
    assert put(a, "ready1", {"tags": {"k9": "z"}}).status_code == 400
    assert put(a, "ready1", {"tags": {"k9": ""}}).status_code == 200, "empty values: not written"
    assert len(vm_tags(a, "ready1")) == 5 and vm_tags(a, "ready1")["tag:k0"] == "new"


def test_a_flood_of_full_puts_stays_bounded(redis_client: redis.Redis) -> None:
    """Each PUT as large as the body limit allows (30 tags of 50 + 255 characters): the VM
    keeps the first PUT's 30 tags, the day's hash 30 fields, and /summary stays small (2,000
    PUTs over TCP: tests/hostile/test_vm_changes.py)."""
    a = pools(redis_client, auth=False)
    width = 0
    for n in range(200):
        body = {f"{n:05d}{i:02d}".ljust(50, "k"): "v" * 255 for i in range(30)}
        width = len(json.dumps({"tags": body}))
        a.client.simulate_put(f"{V}/ready1", body=json.dumps({"tags": body}))
    assert width > 9000
    assert len(vm_tags(a, "ready1")) == 30, "the first PUT fit, every later one was refused"
    assert a.redis.hlen(today(a)) == 30
    assert a.redis.memory_usage(schema.vm("ready1")) < 32 * 1024
    summary = a.client.simulate_get("/api/v3/summary")
    assert summary.status_code == 200 and len(summary.content) < 32 * 1024


def test_the_days_tag_statistics_expire_after_data_ttl(redis_client: redis.Redis) -> None:
    a = pools(redis_client, auth=False)
    assert put(a, "ready1", {"tags": {"project": "x"}}).status_code == 200
    ttl = a.ctx.config.redis.data_ttl * 3600
    assert ttl - 5 < a.redis.ttl(today(a)) <= ttl
    a.redis.expire(today(a), 10)
    assert put(a, "ready2", {"tags": {"project": "y"}}).status_code == 200
    assert ttl - 5 < a.redis.ttl(today(a)) <= ttl, "renewed by each write"
    assert put(a, "ready1", {"lifetime": 3}).status_code == 200


# -- who may change or return a VM -----------------------------------------------------------------
def test_by_default_as_vmpooler_anyone_tags_and_returns_a_ready_vm(
        redis_client: redis.Redis) -> None:
    a = pools(redis_client)
    assert put(a, "mine", {"tags": {"owner": "mallory"}}).status_code == 200
    assert delete(a, "ready1").status_code == 200
    assert a.redis.sismember(schema.completed("pool1"), "ready1")
    assert delete(a, "anyones").status_code == 200
    assert delete(a, "mine", THEIRS).status_code == 200, "any valid token"


def test_require_token_for_vm_changes(redis_client: redis.Redis) -> None:
    a = pools(redis_client, require_token_for_vm_changes=True)
    for vm in ("ready1", "anyones", "mine"):
        for headers in (None, BOGUS):
            assert put(a, vm, {"tags": {"a": "b"}}, headers).status_code == 401
            assert delete(a, vm, headers).status_code == 401
        assert vm_tags(a, vm) == {}
    assert put(a, "ready1", {}).status_code == 401
    assert a.redis.smembers(schema.ready("pool1")) == {"ready1", "ready2"}
    assert a.redis.smembers(schema.running("pool1")) == {"mine", "anyones"}
    assert put(a, "anyones", {"tags": {"a": "b"}}, THEIRS).status_code == 200
    assert delete(a, "ready1", THEIRS).status_code == 200, "any valid token"
    assert delete(a, "mine", THEIRS).status_code == 200, "ownership is the other setting"


def test_enforce_vm_ownership(redis_client: redis.Redis) -> None:
    a = pools(redis_client, enforce_vm_ownership=True)
    assert put(a, "mine", {"tags": {"a": "b"}}).status_code == 401
    assert put(a, "mine", {"tags": {"a": "b"}}, THEIRS).status_code == 403
    assert delete(a, "mine").status_code == 401
    assert delete(a, "mine", THEIRS).status_code == 403
    assert delete(a, "ready1").status_code == 401, "a ready VM: a valid token"
    assert delete(a, "ready1", BOGUS).status_code == 401
    assert put(a, "ready2", {"tags": {"a": "b"}}).status_code == 401
    assert vm_tags(a, "mine") == {} and vm_tags(a, "ready2") == {}
    assert a.redis.smembers(schema.ready("pool1")) == {"ready1", "ready2"}
    assert put(a, "anyones", {"tags": {"a": "b"}}).status_code == 200, "checked out anonymously"
    assert put(a, "mine", {"tags": {"a": "b"}}, MINE).status_code == 200
    assert delete(a, "ready1", THEIRS).status_code == 200
    assert delete(a, "mine", MINE).status_code == 200
    assert a.redis.smembers(schema.completed("pool1")) == {"ready1", "mine"}


@pytest.mark.parametrize("setting", ["enforce_vm_ownership", "require_token_for_vm_changes"])
def test_the_token_rules_need_auth(redis_client: redis.Redis, setting: str,
                                   tmp_path: Path) -> None:
    a = pools(redis_client, auth=False, **{setting: True})
    assert put(a, "ready1", {"tags": {"a": "b"}}).status_code == 200
    assert delete(a, "ready1").status_code == 200
    path = tmp_path / "vmpooler.yaml"
    path.write_text(f":config:\n  {setting}: true\n:pools:\n  - name: 'a'\n    size: 1\n"
                    "    provider: 'dummy'\n:providers:\n  :dummy:\n    provider_class: dummy\n")
    warnings = unacted_warnings(load_config(path, environ={}, cwd=tmp_path), environ={})
    assert [(w.key, w.line) for w in warnings] == [(f"config.{setting}", 2)]
    assert "without :auth:" in warnings[0].message
    path.write_text(path.read_text() + ":auth:\n  provider: 'ldap'\n  :ldap:\n"
                    "    host: 'ldap.example.com'\n    base: 'dc=example'\n"
                    "    user_object: 'uid'\n")
    config = load_config(path, environ={}, cwd=tmp_path)
    assert getattr(config.settings, setting) is True
    assert unacted_warnings(config, environ={}) == []
