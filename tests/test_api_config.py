"""API v3 configuration endpoints (reference §1.3, vmpooler's config_spec.rb) over a real
redis-server: experimental override endpoints, pool reset, ``/config`` and ``/full_config``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import redis

from tests.api_harness import TOKEN, Api, api, api_config, api_pool
from vmpooler.actors.config._data import freeze
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.config_store import ruby_integer
from vmpooler.web.pool_changes import listens_beyond_loopback, startup_warning

P = "/api/v3"


def _pools() -> list[Any]:
    return [
        api_pool("pool1", 5, alias=("poolone",), clone_target="default_cluster"),
        api_pool("pool2", 2),
    ]


@pytest.fixture
def a(redis_client: redis.Redis) -> Api:
    return api(redis_client, api_config(_pools(), experimental_features=True))


def post(a: Api, path: str, body: Any, **kw: Any) -> Any:
    text = body if isinstance(body, str) else json.dumps(body)
    return a.client.simulate_post(P + path, body=text, **kw)


def sent(a: Api) -> list[str]:
    """Pools the manager was told about, in order."""
    return [c[1] for c in a.commands.sent if c[0] == "pool_changed"]


WRITES = [
    ("POST", "/config/poolsize", {"pool1": 3}),
    ("DELETE", "/config/poolsize/pool1", None),
    ("POST", "/config/pooltemplate", {"pool1": "templates/new"}),
    ("DELETE", "/config/pooltemplate/pool1", None),
    ("POST", "/config/clonetarget", {"pool1": "cluster2"}),
    ("POST", "/poolreset", {"pool1": "1"}),
]


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_writes_answer_405_without_experimental_features(
    redis_client: redis.Redis, method: str, path: str, body: Any
) -> None:
    a = api(redis_client, api_config(_pools()))
    r = a.client.simulate_request(method, P + path, body=json.dumps(body) if body else None)
    assert r.status_code == 405
    assert r.json == {"ok": False}
    assert redis_client.keys("*") == []
    assert a.commands.sent == []


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_writes_need_a_valid_token_when_auth_is_configured(
    redis_client: redis.Redis, method: str, path: str, body: Any
) -> None:
    a = api(redis_client, api_config(_pools(), auth=True, experimental_features=True))
    a.add_token()
    text = json.dumps(body) if body else None
    for headers in ({}, {"X-AUTH-TOKEN": "nope"}):
        r = a.client.simulate_request(method, P + path, body=text, headers=headers)
        assert r.status_code == 401
        assert r.json == {"ok": False}
        assert r.headers["WWW-Authenticate"] == 'Basic realm="Authentication required"'
    r = a.client.simulate_request(method, P + path, body=text, headers={"X-AUTH-TOKEN": TOKEN})
    assert r.status_code in (200, 201)
    assert redis_client.hget(schema.token(TOKEN), "last")


@pytest.mark.parametrize("path", ["/config/poolsize", "/config/pooltemplate",
                                  "/config/clonetarget", "/poolreset"])
@pytest.mark.parametrize("body", ["", "   ", "{not json", "null", "[1, 2]", '"pool1"'])
def test_bad_bodies_are_400_not_500(a: Api, path: str, body: str) -> None:
    r = post(a, path, body)
    assert r.status_code == 400
    assert r.json["ok"] is False
    assert r.json["error"]
    assert a.commands.sent == []


# -- pool size -------------------------------------------------------------------------------
def test_poolsize_change_is_201_and_written(a: Api) -> None:
    r = post(a, "/config/poolsize", {"pool1": 3})
    assert (r.status_code, r.json) == (201, {"ok": True})
    assert a.redis.hgetall(schema.config_poolsize()) == {"pool1": "3"}
    assert sent(a) == ["pool1"]


def test_poolsize_same_size_is_200_and_nothing_written(a: Api) -> None:
    r = post(a, "/config/poolsize", {"pool1": 5, "pool2": "2"})
    assert (r.status_code, r.json) == (200, {"ok": True})
    assert a.redis.hgetall(schema.config_poolsize()) == {}
    assert a.commands.sent == []
    post(a, "/config/poolsize", {"pool1": 3})
    assert post(a, "/config/poolsize", {"pool1": 3}).status_code == 200


def test_poolsize_multiple_and_mixed(a: Api) -> None:
    assert post(a, "/config/poolsize", {"pool1": 1, "pool2": 4}).status_code == 201
    assert a.redis.hgetall(schema.config_poolsize()) == {"pool1": "1", "pool2": "4"}
    assert post(a, "/config/poolsize", {"pool1": 1, "pool2": 6}).status_code == 201
    assert a.redis.hgetall(schema.config_poolsize()) == {"pool1": "1", "pool2": "6"}
    assert sent(a) == ["pool1", "pool2", "pool2"]


@pytest.mark.parametrize(("body", "bad"), [
    ({"pool9": 3}, ["pool9"]),
    ({"poolone": 3}, ["poolone"]),  # an alias is not a pool (vmpooler: 500)
    ({"pool1": "four"}, ["pool1"]),
    ({"pool1": "-1"}, ["pool1"]),
    ({"pool1": 2.5}, ["pool1"]),
    ({"pool1": True}, ["pool1"]),
    ({"pool1": None}, ["pool1"]),
    ({"pool1": "09"}, ["pool1"]),
    ({"pool1": 3, "pool9": "x"}, ["pool9", "pool9"]),  # vmpooler lists it twice
])
def test_poolsize_invalid_is_400_not_configured(a: Api, body: Any, bad: list[str]) -> None:
    r = post(a, "/config/poolsize", body)
    assert (r.status_code, r.json) == (400, {"ok": False, "not_configured": bad})
    assert a.redis.hgetall(schema.config_poolsize()) == {}
    assert a.commands.sent == []
    counted = "unknown" if bad[0] == "pool9" else bad[0]  # a known name stays, others not
    assert a.metrics.counts("config.invalid", pool=counted) == len(bad)


@pytest.mark.parametrize(("raw", "size"), [
    (" 7 ", 7), ("0x10", 16), ("0b11", 3), ("017", 15), ("0o17", 15), ("1_0", 10),
    ("+4", 4), ("0d12", 12), (3.0, 3), (0, 0),
])
def test_poolsize_reads_sizes_like_ruby_integer_and_stores_decimal(
    a: Api, raw: Any, size: int
) -> None:
    assert post(a, "/config/poolsize", {"pool1": raw}).status_code == 201
    assert a.redis.hget(schema.config_poolsize(), "pool1") == str(size)


def test_ruby_integer_refusals() -> None:
    for value in ("", "1__0", "_1", "1_", "0x", "08", "1.0", "1e3", "- 1", [], {}, False):
        assert ruby_integer(value) is None, value
    assert ruby_integer("-0x1f") == -31


def test_delete_poolsize_after_override_restores_it(a: Api) -> None:
    post(a, "/config/poolsize", {"pool1": 2})
    a.commands.sent.clear()
    r = a.client.simulate_delete(P + "/config/poolsize/pool1/")
    assert r.status_code == 201
    assert r.json == {"ok": True, "pool_size_before_reset": 2,
                      "pool_size_before_overrides": 5}
    assert a.redis.hgetall(schema.config_poolsize()) == {}
    assert a.redis.smembers(schema.undo_size_override()) == {"pool1"}
    assert sent(a) == ["pool1"]


def test_delete_poolsize_untouched_is_200(a: Api) -> None:
    r = a.client.simulate_delete(P + "/config/poolsize/pool1")
    assert r.status_code == 200
    assert r.json == {"ok": True, "pool_size_before_reset": 5,
                      "pool_size_before_overrides": 5}
    assert a.redis.smembers(schema.undo_size_override()) == set()
    a.redis.hset(schema.config_poolsize(), "pool1", "5")  # an override equal to the config
    assert a.client.simulate_delete(P + "/config/poolsize/pool1").status_code == 200
    assert a.redis.hgetall(schema.config_poolsize()) == {}
    assert a.commands.sent == []


@pytest.mark.parametrize("name", ["pool9", "poolone"])
def test_delete_override_of_unknown_pool_or_alias_is_404(a: Api, name: str) -> None:
    for kind in ("poolsize", "pooltemplate"):
        r = a.client.simulate_delete(f"{P}/config/{kind}/{name}")
        assert (r.status_code, r.json) == (404, {"ok": False})


# -- template ----------------------------------------------------------------------------------
def test_pooltemplate_change_unchanged_and_multiple(a: Api) -> None:
    r = post(a, "/config/pooltemplate", {"pool1": "templates/new1"})
    assert (r.status_code, r.json) == (201, {"ok": True})
    assert a.redis.hgetall(schema.config_template()) == {"pool1": "templates/new1"}
    assert post(a, "/config/pooltemplate", {"pool1": "templates/new1"}).status_code == 200
    assert post(a, "/config/pooltemplate", {"pool2": "templates/pool2"}).status_code == 200
    r = post(a, "/config/pooltemplate", {"pool1": "templates/new1", "pool2": "a/b"})
    assert r.status_code == 201
    assert a.redis.hgetall(schema.config_template()) == {"pool1": "templates/new1",
                                                         "pool2": "a/b"}
    assert sent(a) == ["pool1", "pool2"]


@pytest.mark.parametrize(("body", "bad"), [
    ({"pool9": "templates/x"}, ["pool9"]),
    ({"poolone": "templates/x"}, ["poolone"]),
    ({"pool1": "notemplate"}, ["pool1"]),
    ({"pool1": "/templates/x"}, ["pool1"]),
    ({"pool1": "templates/x/"}, ["pool1"]),
    ({"pool1": 12}, ["pool1"]),
    ({"pool1": "templates/ok", "pool9": "bad"}, ["pool9", "pool9"]),
])
def test_pooltemplate_invalid_is_400_bad_templates(a: Api, body: Any, bad: list[str]) -> None:
    r = post(a, "/config/pooltemplate", body)
    assert (r.status_code, r.json) == (400, {"ok": False, "bad_templates": bad})
    assert a.redis.hgetall(schema.config_template()) == {}
    assert a.commands.sent == []


def test_delete_pooltemplate(a: Api) -> None:
    r = a.client.simulate_delete(P + "/config/pooltemplate/pool1")
    assert r.status_code == 200
    assert r.json == {"ok": True, "template_before_reset": "templates/pool1",
                      "template_before_overrides": "templates/pool1"}
    post(a, "/config/pooltemplate", {"pool1": "templates/new1"})
    r = a.client.simulate_delete(P + "/config/pooltemplate/pool1")
    assert r.status_code == 201
    assert r.json == {"ok": True, "template_before_reset": "templates/new1",
                      "template_before_overrides": "templates/pool1"}
    assert a.redis.hgetall(schema.config_template()) == {}
    assert a.redis.smembers(schema.undo_template_override()) == {"pool1"}
    assert sent(a) == ["pool1", "pool1"]


# -- clone target ------------------------------------------------------------------------------
def test_clonetarget(a: Api) -> None:
    assert post(a, "/config/clonetarget", {"pool1": "default_cluster"}).status_code == 200
    r = post(a, "/config/clonetarget", {"pool1": "cluster2"})
    assert (r.status_code, r.json) == (201, {"ok": True})
    r = post(a, "/config/clonetarget", {"pool1": "cluster2", "pool2": "cluster3"})
    assert r.status_code == 201
    assert a.redis.hgetall(schema.config_clone_target()) == {"pool1": "cluster2",
                                                             "pool2": "cluster3"}
    assert sent(a) == ["pool1", "pool2"]


@pytest.mark.parametrize("body", [{"pool9": "c"}, {"poolone": "c"}, {"pool1": ""},
                                  {"pool1": None}, {"pool1": "c", "pool9": "c"}])
def test_clonetarget_invalid_is_400_bad_templates(a: Api, body: Any) -> None:
    r = post(a, "/config/clonetarget", body)
    bad = [k for k, v in body.items() if k not in ("pool1", "pool2") or not v]
    assert (r.status_code, r.json) == (400, {"ok": False, "bad_templates": bad})
    assert a.redis.hgetall(schema.config_clone_target()) == {}


# -- pool reset --------------------------------------------------------------------------------
def test_poolreset(a: Api) -> None:
    r = post(a, "/poolreset", {"pool1": "1"})
    assert (r.status_code, r.json) == (201, {"ok": True})
    assert post(a, "/poolreset", {"pool1": 1, "pool2": None}).status_code == 201
    assert a.redis.smembers(schema.poolreset()) == {"pool1", "pool2"}
    assert sent(a) == ["pool1", "pool1", "pool2"]
    assert post(a, "/poolreset", {}).status_code == 201


@pytest.mark.parametrize("body", [{"pool9": 1}, {"poolone": 1}, {"pool1": 1, "pool9": 1}])
def test_poolreset_unknown_is_400_bad_pools(a: Api, body: Any) -> None:
    r = post(a, "/poolreset", body)
    assert (r.status_code, r.json) == (400, {"ok": False, "bad_pools": [
        k for k in body if k != "pool1"]})
    assert a.redis.smembers(schema.poolreset()) == set()
    assert a.commands.sent == []
    assert a.metrics.counts("poolreset.invalid") == 1


# -- reads -------------------------------------------------------------------------------------
def test_config_lists_pools_with_effective_values(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config(_pools()))  # no experimental features needed
    r = a.client.simulate_get(P + "/config/")
    assert r.status_code == 200
    assert r.json["status"] == {"ok": True}
    pools = {p["name"]: p for p in r.json["pool_configuration"]}
    assert list(pools) == ["pool1", "pool2"]
    assert pools["pool1"] == {"name": "pool1", "size": 5, "template": "templates/pool1",
                              "alias": ["poolone"], "ready_ttl": 60,
                              "template_ready": False}
    redis_client.hset(schema.config_poolsize(), "pool1", "3")
    redis_client.hset(schema.config_clone_target(), "pool2", "cluster9")
    redis_client.hset(schema.config_template(), "pool2", "templates/other")
    redis_client.hset(schema.template_prepared(), mapping={"pool1": "templates/pool1",
                                                           "pool2": "templates/pool2"})
    pools = {p["name"]: p for p in a.client.simulate_get(P + "/config").json[
        "pool_configuration"]}
    assert (pools["pool1"]["size"], pools["pool1"]["template_ready"]) == (3, True)
    assert pools["pool2"]["template"] == "templates/other"
    assert pools["pool2"]["template_ready"] is False
    assert pools["pool2"]["clone_target"] == "cluster9"
    assert "clone_target" not in pools["pool1"]


def test_full_config_masks_secrets(redis_client: redis.Redis) -> None:
    config = api_config(_pools())
    config = dataclasses.replace(config, raw=freeze({
        "config": {"site_name": "lab", "experimental_features": False},
        "redis": {"server": "redis.example", "password": "hunter2"},
        "providers": {"vsphere": {"server": "vc", "username": "u", "password": "s3cret"}},
        "auth": {"provider": "ldap", "ldap": {"service_account_hash": {
            "user_dn": "cn=svc", "password": "ldap-pw"}}},
        "pools": [{"name": "pool1", "size": 5}],
    }))
    a = api(redis_client, config)
    r = a.client.simulate_get(P + "/full_config")
    assert r.status_code == 200
    assert r.json["status"] == {"ok": True}
    full = r.json["full_config"]
    assert full["redis"] == {"server": "redis.example", "password": "********"}
    assert full["providers"]["vsphere"]["password"] == "********"
    assert full["providers"]["vsphere"]["username"] == "u"
    assert full["pools"] == [{"name": "pool1", "size": 5}]
    for secret in ("hunter2", "s3cret", "ldap-pw"):
        assert secret not in r.text


# -- pool changes without auth on a listener other hosts can reach ----------------------------
def reachable(redis_client: redis.Redis, **settings: Any) -> Api:
    """The API of a server listening beyond loopback, experimental features on, no auth."""
    a = api(redis_client, api_config(_pools(), experimental_features=True, **settings))
    a.ctx.public_listener = True
    return a


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_writes_without_auth_are_refused_on_a_reachable_listener(
    redis_client: redis.Redis, method: str, path: str, body: Any
) -> None:
    a = reachable(redis_client)
    r = a.client.simulate_request(method, P + path, body=json.dumps(body) if body else None)
    assert r.status_code == 403
    assert r.json["ok"] is False
    assert "experimental_features_without_auth" in r.json["error"]
    assert ":auth:" in r.json["error"]
    assert redis_client.keys("*") == []
    assert a.commands.sent == []


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_the_opt_in_lets_anyone_change_the_pools_on_a_reachable_listener(
    redis_client: redis.Redis, method: str, path: str, body: Any
) -> None:
    a = reachable(redis_client, experimental_features_without_auth=True)
    r = a.client.simulate_request(method, P + path, body=json.dumps(body) if body else None)
    assert r.status_code in (200, 201)


def test_with_auth_a_reachable_listener_takes_a_token_as_before(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config(_pools(), auth=True, experimental_features=True))
    a.ctx.public_listener = True
    a.add_token()
    assert post(a, "/config/poolsize", {"pool1": 3}).status_code == 401
    r = post(a, "/config/poolsize", {"pool1": 3}, headers={"X-AUTH-TOKEN": TOKEN})
    assert r.status_code == 201


def test_reads_stay_open_on_a_reachable_listener(redis_client: redis.Redis) -> None:
    a = reachable(redis_client)
    assert a.client.simulate_get(P + "/config").status_code == 200


@pytest.mark.parametrize(("bind", "public"), [
    ("127.0.0.1:4567", False), ("127.9.9.9:1", False), ("[::1]:4567", False),
    ("localhost:4567", False), ("unix:/run/vmpooler.sock", False),
    ("0.0.0.0:4567", True), ("[::]:4567", True), ("10.1.2.3:80", True),
    ("pooler.example:4567", True), ("fd://3", True), ("[fe80::1%eth0]:4567", True),
])
def test_which_listeners_other_hosts_can_reach(bind: str, public: bool) -> None:
    assert listens_beyond_loopback(bind) is public


def test_the_start_says_whether_pool_changes_are_open_or_refused() -> None:
    on = api_config(_pools(), experimental_features=True)
    opted = api_config(_pools(), experimental_features=True,
                       experimental_features_without_auth=True)
    assert "refused with 403 on 0.0.0.0:4567" in (startup_warning(on, "0.0.0.0:4567") or "")
    assert "anyone who reaches 0.0.0.0:4567 may change the pools" in (
        startup_warning(opted, "0.0.0.0:4567") or "")
    assert startup_warning(on, "127.0.0.1:4567") is None
    assert startup_warning(api_config(_pools()), "0.0.0.0:4567") is None
    assert startup_warning(api_config(_pools(), auth=True, experimental_features=True),
                           "0.0.0.0:4567") is None
