"""API v3 ``/vm`` endpoints over real Redis: vmpooler's vm_spec, vm_template_spec and
vm_hostname_spec (reference §8), every status code, and our divergences."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import falcon.testing
import pytest
import redis

from tests.api_harness import TOKEN, USER, Api, api, api_config, api_pool
from vmpooler.actors.storage import schema, timefmt

V = "/api/v3/vm"
AUTH = {"X-AUTH-TOKEN": TOKEN}


def three_pools(redis_client: redis.Redis, **settings: Any) -> Api:
    """vm_spec's setup: pool1/2/3 with domains one/two/three.example.com, poolone → pool1."""
    auth = settings.pop("auth", False)
    settings.setdefault("vm_lifetime", 0)
    return api(redis_client, api_config([
        api_pool("pool1", domain="one.example.com", alias=("poolone",)),
        api_pool("pool2", domain="two.example.com"),
        api_pool("pool3", domain="three.example.com"),
    ], auth=auth, **settings))


def post(a: Api, body: Any, headers: dict[str, str] | None = None) -> falcon.testing.Result:
    text = body if isinstance(body, str) else json.dumps(body)
    return a.client.simulate_post(V, body=text, headers=headers)


def ready(a: Api, pool: str) -> set[str]:
    return a.redis.smembers(schema.ready(pool))


# -- GET /vm -------------------------------------------------------------------------------------
def test_list_pools(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    for path in (V, V + "/"):
        r = a.client.simulate_get(path)
        assert r.status_code == 200 and r.json == ["pool1", "pool2", "pool3"]
        assert r.headers["content-type"] == "application/json"


# -- POST /vm (vm_spec) ----------------------------------------------------------------------
def test_single_vm(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    a.add_vm("pool1", "abcdefghijklmnop")
    r = post(a, {"pool1": "1"})
    assert r.status_code == 200
    assert r.json == {"ok": True, "pool1": {"hostname": "abcdefghijklmnop.one.example.com"}}
    assert a.redis.smembers(schema.running("pool1")) == {"abcdefghijklmnop"}
    assert a.metrics.counts("checkout.success", pool="pool1") == 1
    assert a.commands.sent == [("pool_changed", "pool1", "checkout")]
    assert a.metrics.counts("http_requests_vm_total", operation="checkout") == 1


def test_alias_keeps_the_requested_name(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    a.add_vm("pool1", "vm1")
    r = post(a, {"poolone": 1})
    assert r.json == {"ok": True, "poolone": {"hostname": "vm1.one.example.com"}}


def test_unknown_pool_is_404(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    a.add_vm("pool1", "vm1")
    r = post(a, {"pool1": 1, "pool4": 1})
    assert (r.status_code, r.json) == (404, {"ok": False})
    assert ready(a, "pool1") == {"vm1"}
    # a name no configuration knows is counted as unknown (vmpooler: under the name itself)
    assert a.metrics.counts("checkout.invalid", pool="unknown") == 1
    assert a.metrics.counts("checkout.invalid", pool="pool4") == 0


def test_empty_pool_is_503(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    a.add_vm("pool1", "vm1")
    assert post(a, {"pool1": 1}).status_code == 200
    r = post(a, {"pool1": 1})
    assert (r.status_code, r.json) == (503, {"ok": False})
    assert a.metrics.counts("checkout.empty", pool="pool1") == 1
    r = post(a, {"poolone": 1})
    assert (r.status_code, r.json) == (503, {"ok": False})
    # checkout.empty names what was asked for, as vmpooler; checkout.miss the pool it maps to
    assert a.metrics.counts("checkout.empty", pool="pool1") == 1
    assert a.metrics.counts("checkout.empty", pool="poolone") == 1
    assert a.metrics.counts("checkout.miss", pool="pool1") == 2
    assert a.metrics.counts("checkout.miss", pool="poolone") == 0


def test_several_pools_and_arrays(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    a.add_vm("pool1", "a1")
    a.add_vm("pool2", "b1")
    assert post(a, {"pool1": 1, "pool2": 1}).json == {
        "ok": True, "pool1": {"hostname": "a1.one.example.com"},
        "pool2": {"hostname": "b1.two.example.com"}}
    for vm in ("a2", "a3"):
        a.add_vm("pool1", vm)
    r = post(a, {"pool1": 2})
    assert sorted(r.json["pool1"]["hostname"]) == ["a2.one.example.com", "a3.one.example.com"]
    for vm in ("a4", "a5", "b2", "b3", "b4"):
        a.add_vm("pool1" if vm[0] == "a" else "pool2", vm)
    r = post(a, {"pool1": 2, "pool2": 3})
    assert list(r.json) == ["ok", "pool1", "pool2"]
    assert len(r.json["pool1"]["hostname"]) == 2 and len(r.json["pool2"]["hostname"]) == 3


def test_alias_to_three_pools_with_three_domains(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([
        api_pool("pool1", domain="one.example.com", alias=("all",)),
        api_pool("pool2", domain="two.example.com", alias=("all",)),
        api_pool("pool3", alias=("all",)),
    ]))
    for pool, vm in (("pool1", "a1"), ("pool2", "b1"), ("pool3", "c1")):
        a.add_vm(pool, vm)
    r = post(a, {"all": 3})
    assert r.status_code == 200
    assert sorted(r.json["all"]["hostname"]) == ["a1.one.example.com", "b1.two.example.com",
                                                 "c1"]
    assert {c[1] for c in a.commands.sent} == {"pool1", "pool2", "pool3"}


@pytest.mark.parametrize("body,have", [
    ({"pool1": 1, "pool2": 1}, {"pool1": 1}),
    ({"pool1": 2, "pool2": 1}, {"pool1": 2}),
    ({"pool1": 2, "pool2": 3}, {"pool1": 2, "pool2": 2}),
])
def test_partial_availability_rolls_back(redis_client: redis.Redis, body: dict[str, int],
                                         have: dict[str, int]) -> None:
    a = three_pools(redis_client, auth=True, vm_lifetime_auth=2)
    a.add_token()
    for pool, n in have.items():
        for i in range(n):
            a.add_vm(pool, f"{pool}-vm{i}")
    r = post(a, body, AUTH)
    assert (r.status_code, r.json) == (503, {"ok": False})
    for pool, n in have.items():
        assert ready(a, pool) == {f"{pool}-vm{i}" for i in range(n)}
        assert a.redis.smembers(schema.running(pool)) == set()
        assert a.redis.smembers(schema.migrating(pool)) == set()
        assert a.redis.hgetall(schema.active(pool)) == {}
        for i in range(n):
            assert a.redis.hgetall(schema.vm(f"{pool}-vm{i}")) == {"template": pool}
    assert a.commands.sent == [] and a.metrics.counts("checkout.success") == 0


def test_running_vm_is_never_handed_out(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    a.add_vm("pool1", "busy", queue="running")
    a.add_vm("pool1", "free")
    assert post(a, {"pool1": 1}).json["pool1"]["hostname"] == "free.one.example.com"
    assert "busy" not in ready(a, "pool1")
    assert post(a, {"pool1": 1}).status_code == 503


def test_lifetime_and_owner_at_checkout(redis_client: redis.Redis) -> None:
    off = three_pools(redis_client, vm_lifetime_auth=2)
    off.add_token()
    off.add_vm("pool1", "vm1")
    assert post(off, {"pool1": 1}, {"X-AUTH-TOKEN": "not-even-valid"}).status_code == 200
    assert set(off.redis.hgetall(schema.vm("vm1"))) == {"template", "checkout"}

    on = three_pools(redis_client, auth=True, vm_lifetime_auth=2)
    on.add_vm("pool1", "vm2")
    on.add_vm("pool2", "vm3")
    on.clock.advance(60)
    assert post(on, {"pool1": 1}, AUTH).status_code == 200
    fields = on.redis.hgetall(schema.vm("vm2"))
    assert fields["lifetime"] == "2" and fields["checkout"] == timefmt.format_epoch(
        on.clock.now())
    assert fields["token:token"] == TOKEN and fields["token:user"] == USER
    assert on.redis.hget(schema.token(TOKEN), "last") == timefmt.format_epoch(on.clock.now())
    assert post(on, {"pool2": 1}).status_code == 200
    assert set(on.redis.hgetall(schema.vm("vm3"))) == {"template", "checkout"}


def test_invalid_token_with_auth_is_401_and_takes_nothing(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client, auth=True)
    a.add_vm("pool1", "vm1")
    r = post(a, {"pool1": 1}, {"X-AUTH-TOKEN": "bogus"})
    assert (r.status_code, r.json) == (401, {"ok": False})
    assert r.headers["www-authenticate"] == 'Basic realm="Authentication required"'
    assert ready(a, "pool1") == {"vm1"}
    assert post(a, {"pool4": 1}, {"X-AUTH-TOKEN": "bogus"}).status_code == 404  # 404 first


@pytest.mark.parametrize("body,error", [
    ("{", None),
    ("[1]", "Request body must be a JSON object"),
    ('{"a": {"b": {"c": {"d": {"e": {}}}}}}', "Request body too complex"),
    ({"pool_1!": 1}, "Invalid pool name format"),
    ({"p" * 101: 1}, "Pool name too long"),
    ({"": 1}, "Pool name is required"),
    ({"pool1": 0}, "VM count must be at least 1"),
    ({"pool1": 101}, "VM count must be at most 100"),
    ({"pool1": "abc"}, "VM count must be a valid integer"),
    ({"pool1": -1}, "VM count must be a valid integer"),
    ({"pool1": 1.5}, "VM count must be a valid integer"),
    ({"pool1": True}, "VM count must be a valid integer"),
    ({"pool1": None}, "VM count is required"),
])
def test_body_validation_is_400(redis_client: redis.Redis, body: Any, error: str | None) -> None:
    a = three_pools(redis_client)
    r = post(a, body)
    assert r.status_code == 400 and r.json["ok"] is False
    assert r.json["error"] == error if error else r.json["error"].startswith("Invalid JSON")


def test_empty_body_is_404_and_dotted_names_are_accepted(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool("ubuntu-22.04-x86_64")]))
    assert (post(a, "").status_code, post(a, {}).status_code) == (404, 404)
    a.add_vm("ubuntu-22.04-x86_64", "vm1")
    r = post(a, {"ubuntu-22.04-x86_64": "1"})
    assert r.json == {"ok": True, "ubuntu-22.04-x86_64": {"hostname": "vm1"}}


def test_weighted_alias_selection(redis_client: redis.Redis) -> None:
    """pool2 (alias of pool1) with compute1:5 and compute2:0: pool1 always goes first."""
    a = api(redis_client, api_config([
        api_pool("pool1", alias=("pool2",), clone_target="compute1"),
        api_pool("pool2", clone_target="compute2"),
    ], backend_weight={"compute1": 5, "compute2": 0}))
    for i in range(5):
        a.add_vm("pool1", f"a{i}")
        a.add_vm("pool2", f"b{i}")
    r = post(a, {"pool2": 5})
    assert sorted(r.json["pool2"]["hostname"]) == [f"a{i}" for i in range(5)]


# -- POST /vm/:template (vm_template_spec) ------------------------------------------------------
def template_pools(redis_client: redis.Redis, **settings: Any) -> Api:
    auth = settings.pop("auth", False)
    return api(redis_client, api_config([
        api_pool("pool1", domain="example.com", alias=("poolone",)),
        api_pool("pool2", domain="example.com"),
    ], auth=auth, **settings))


def test_template_checkout(redis_client: redis.Redis) -> None:
    a = template_pools(redis_client)
    a.add_vm("pool1", "a1")
    assert a.client.simulate_post(V + "/pool1").json == {
        "ok": True, "pool1": {"hostname": "a1.example.com"}}
    a.add_vm("pool1", "a2")
    assert a.client.simulate_post(V + "/poolone/").json == {
        "ok": True, "poolone": {"hostname": "a2.example.com"}}
    assert a.client.simulate_post(V + "/pool3").status_code == 404
    assert a.client.simulate_post(V + "/pool1").status_code == 503
    assert a.client.simulate_post(V + "/poolone").status_code == 503
    assert a.client.simulate_post(V + "/+").status_code == 404


def test_template_repeats_and_encoded_plus(redis_client: redis.Redis) -> None:
    a = template_pools(redis_client)
    for vm in ("a1", "a2", "b1", "b2", "b3"):
        a.add_vm("pool1" if vm[0] == "a" else "pool2", vm)
    r = a.client.simulate_post(V + "/pool1+pool1%2Bpool2+pool2+pool2")
    assert r.status_code == 200
    assert len(r.json["pool1"]["hostname"]) == 2 and len(r.json["pool2"]["hostname"]) == 3
    assert a.metrics.counts("http_requests_vm_total", operation="template") == 1


def test_template_partial_availability_rolls_back(redis_client: redis.Redis) -> None:
    a = template_pools(redis_client)
    a.add_vm("pool1", "a1")
    a.add_vm("pool2", "b1")
    r = a.client.simulate_post(V + "/pool1+pool2+pool2")
    assert (r.status_code, r.json) == (503, {"ok": False})
    assert ready(a, "pool1") == {"a1"} and ready(a, "pool2") == {"b1"}


def test_template_lifetime_rules(redis_client: redis.Redis) -> None:
    a = template_pools(redis_client, auth=True, vm_lifetime_auth=2)
    a.add_token()
    a.add_vm("pool1", "a1")
    a.add_vm("pool2", "b1")
    assert a.client.simulate_post(V + "/pool1", headers=AUTH).status_code == 200
    assert a.redis.hget(schema.vm("a1"), "lifetime") == "2"
    assert a.client.simulate_post(V + "/pool2").status_code == 200
    assert a.redis.hget(schema.vm("b1"), "lifetime") is None


# -- GET /vm/:hostname -------------------------------------------------------------------
def test_get_running_vm(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    checkout = timefmt.format_epoch(a.clock.now())
    a.add_vm("pool1", "vm1", queue="running", checkout=checkout, host="host1")
    a.clock.advance(1800)
    r = a.client.simulate_get(V + "/vm1.one.example.com")
    assert r.status_code == 200 and list(r.json) == ["ok", "vm1"]
    info = r.json["vm1"]
    start = timefmt.rfc3339(timefmt.parse_time(checkout))
    assert info == {"template": "pool1", "lifetime": 0, "running": 0.5, "remaining": -0.5,
                    "start_time": start, "end_time": start, "state": "running", "ip": "",
                    "host": "host1"}


def test_get_vm_fields_in_order(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client, vm_lifetime=24)
    checkout = timefmt.format_epoch(a.clock.now())
    a.add_vm("pool1", "vm1", queue="running", checkout=checkout, lifetime="2",
             **{"tag:url": "x", "snapshot:snap1": "2024", "tag:jira": "Y-1"},
             disk="+8gb:+10gb", ip="10.0.0.9", host="h", migrated="true")
    a.redis.hset(schema.vm("vm1"), "pool", "pool1")
    a.clock.advance(3600)
    info = a.client.simulate_get(V + "/vm1").json["vm1"]
    assert list(info) == ["template", "lifetime", "running", "remaining", "start_time",
                          "end_time", "state", "tags", "snapshots", "disk", "ip", "fqdn",
                          "host", "migrated"]
    assert (info["lifetime"], info["running"], info["remaining"]) == (2, 1.0, 1.0)
    start = timefmt.parse_time(checkout)
    assert start is not None
    assert info["end_time"] == timefmt.rfc3339(start + timedelta(hours=2))
    assert info["tags"] == {"url": "x", "jira": "Y-1"} and info["snapshots"] == ["snap1"]
    assert info["disk"] == ["+8gb", "+10gb"] and info["ip"] == "10.0.0.9"
    assert info["fqdn"] == "vm1.one.example.com"


@pytest.mark.parametrize("fields,state", [
    ({}, "pending"), ({"check": "t"}, "ready"), ({"destroy": "2024-01-01 00:00:00 +0000"},
                                                 "destroyed"),
    ({"standby": "suspended", "check": "t"}, "standby")])
def test_get_vm_states(redis_client: redis.Redis, fields: dict[str, str], state: str) -> None:
    a = three_pools(redis_client, vm_lifetime=24)
    a.add_vm("pool1", "vm1", **fields)
    info = a.client.simulate_get(V + "/vm1").json["vm1"]
    assert info["state"] == state and info["lifetime"] == 24
    assert "running" not in info


def test_get_destroyed_vm_running_hours(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    a.add_vm("pool1", "vm1", checkout="2024-01-01 00:00:00 +0000",
             destroy="2024-01-01 03:15:00 +0000")
    info = a.client.simulate_get(V + "/vm1").json["vm1"]
    assert (info["running"], info["state"]) == (3.25, "destroyed")


def test_get_vm_of_a_pool_no_longer_configured(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    a.add_vm("gone", "vm1")
    a.redis.hset(schema.vm("vm1"), "pool", "gone")
    r = a.client.simulate_get(V + "/vm1")
    assert r.status_code == 200 and "fqdn" not in r.json["vm1"]


def test_get_vm_errors(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    assert (a.client.simulate_get(V + "/nope").status_code,
            a.client.simulate_get(V + "/nope").json) == (404, {"ok": False})
    for host, error in (("bad_name", "Invalid hostname format"), ("-x", "Invalid hostname "
                        "format"), ("a" * 64, "Invalid hostname format"),
                        (".".join(["abcdefgh"] * 29), "Hostname too long")):
        r = a.client.simulate_get(f"{V}/{host}")
        assert (r.status_code, r.json) == (400, {"ok": False, "error": error})


# -- PUT /vm/:hostname ----------------------------------------------------------------------
def put(a: Api, host: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    text = body if isinstance(body, str) else json.dumps(body)
    return a.client.simulate_put(f"{V}/{host}", body=text, headers=headers)


def test_put_tags(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    a.add_vm("pool1", "vm1", queue="running")
    r = put(a, "vm1.one.example.com", {"tags": {"tested_by": "jenkins", "empty": "",
                                                "url": "https://ci/job/x/a=b,c=d"}})
    assert (r.status_code, r.json) == (200, {"ok": True})
    fields = a.redis.hgetall(schema.vm("vm1"))
    assert fields["tag:tested_by"] == "jenkins" and "tag:empty" not in fields
    assert fields["tag:url"] == "https://ci/job/x/a=b,c=d"
    day = schema.tag_stats(timefmt.date_bucket(a.clock.now()))
    assert a.redis.hget(day, "vm1:tested_by") == "jenkins"
    assert put(a, "vm1", "{").status_code == 400
    assert put(a, "vm1", "").json == {"ok": True}


def test_put_tag_rules(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    a.add_vm("pool1", "vm1")
    ok = put(a, "vm1", {"tags": {"jenkins_build_url": "https://ci.example.com/job/a_b/1/X=1,Y=2"}})
    assert ok.status_code == 200
    for tags, failure in (
            ({"bad key": "x"}, "Invalid tag key format"),
            ({"k": "x" * 256}, "Tag value too long"),
            ({"k": "<script>"}, "Tag value contains invalid characters"),
            ({"k": 5}, "Tag value must be a string"),
            ({"k": {"a": "b"}}, "Tag value must be a string")):
        r = put(a, "vm1", {"tags": tags})
        assert (r.status_code, r.json) == (400, {"ok": False, "failure": [failure]})
    r = put(a, "vm1", {"tags": "a string"})
    assert r.json["failure"] == ["You provided tags (a string) as something other than a hash."]
    assert not any(k.startswith("tag:k") for k in a.redis.hgetall(schema.vm("vm1")))


def test_put_allowed_tags_and_tagfilter(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client, allowed_tags=("url", "project"))
    a.ctx.config = dataclasses.replace(a.ctx.config, tagfilter={"url": r"(.*)\/"})
    a.add_vm("pool1", "vm1")
    r = put(a, "vm1", {"tags": {"created_by": "x"}})
    assert r.status_code == 400
    assert r.json["failure"] == ['You provided unsuppored tags ({"created_by"=>"x"}).']
    assert put(a, "vm1", {"tags": {"url": "foo.com/something.html"}}).status_code == 200
    assert a.redis.hget(schema.vm("vm1"), "tag:url") == "foo.com"
    assert put(a, "vm1", {"tags": {"url": "foo.com"}}).status_code == 200
    assert a.redis.hget(schema.vm("vm1"), "tag:url") == "foo.com"
    put(a, "vm1", {"tags": {"project": "a.b"}})
    assert a.redis.hget(schema.vm("vm1"), "tag:project") == "a.b"


def test_put_lifetime_without_auth(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    a.add_vm("pool1", "vm1", queue="running")
    assert put(a, "vm1", {"lifetime": "1"}).status_code == 200
    assert a.redis.hget(schema.vm("vm1"), "lifetime") == "1"
    r = put(a, "vm1", {"lifetime": "0"})
    assert (r.status_code, r.json) == (400, {"ok": False, "failure": [
        "Lifetime must be a positive integer (got 0)"]})
    assert a.redis.hget(schema.vm("vm1"), "lifetime") == "1"
    assert put(a, "vm1", {"lifetime": "20000"}).status_code == 200
    assert put(a, "vm1", {"lifetime": "2abc"}).status_code == 200
    assert a.redis.hget(schema.vm("vm1"), "lifetime") == "2"
    r = put(a, "vm1", {"lifetime": "x", "colour": ["red"], "tags": {"ok": "1"}})
    assert r.json["failure"] == ["Lifetime must be a positive integer (got x)",
                                 'Unknown argument ["red"].']
    assert a.redis.hget(schema.vm("vm1"), "tag:ok") is None


def test_put_lifetime_upper_limit(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client, max_lifetime_upper_limit=168)
    a.add_vm("pool1", "vm1", queue="running")
    r = put(a, "vm1", {"lifetime": "200"})
    assert (r.status_code, r.json["failure"]) == (400, [
        "You provided a lifetime (200) that exceeds the configured maximum of 168."])
    assert put(a, "vm1", {"lifetime": 168}).status_code == 200  # divergence: equal is fine
    assert a.redis.hget(schema.vm("vm1"), "lifetime") == "168"


def test_put_lifetime_with_auth(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client, auth=True)
    a.add_token()
    a.add_vm("pool1", "vm1", queue="running")
    r = put(a, "vm1", {"lifetime": "0", "tags": {"x": "<"}})
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic")
    assert put(a, "vm1", {"lifetime": "2"}, AUTH).status_code == 200
    assert a.redis.hget(schema.vm("vm1"), "lifetime") == "2"
    assert put(a, "vm1", {"tags": {"a": "b"}}).status_code == 200  # tags need no token


def test_put_unknown_or_invalid_host(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    assert put(a, "vm1", "{").status_code == 404  # 404 before the body is read
    assert put(a, "vm_1", {}).json == {"ok": False, "error": "Invalid hostname format"}


# -- DELETE /vm/:hostname -------------------------------------------------------------------
def test_delete(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    assert (a.client.simulate_delete(V + "/vm1").status_code) == 404
    a.add_vm("pool1", "vm1", queue="running")
    a.redis.hset(schema.active("pool1"), "vm1", "t")
    r = a.client.simulate_delete(V + "/vm1.one.example.com")
    assert (r.status_code, r.json) == (200, {"ok": True})
    assert a.redis.smembers(schema.completed("pool1")) == {"vm1"}
    assert a.redis.smembers(schema.running("pool1")) == set()
    assert a.redis.hgetall(schema.active("pool1")) == {}
    assert a.commands.sent == [("pool_changed", "pool1", "vm returned")]
    assert a.client.simulate_delete(V + "/vm1").status_code == 200  # idempotent
    assert a.metrics.counts("delete.success") == 2
    a.add_vm("pool2", "vm2")
    assert a.client.simulate_delete(V + "/vm2").status_code == 200
    assert a.redis.smembers(schema.completed("pool2")) == {"vm2"} and not ready(a, "pool2")
    a.add_vm("pool3", "vm3", queue="pending")
    r = a.client.simulate_delete(V + "/vm3")
    assert (r.status_code, r.json) == (404, {"ok": False})
    assert a.redis.smembers(schema.pending("pool3")) == {"vm3"}
    assert a.redis.smembers(schema.completed("pool3")) == set()
    assert a.metrics.counts("delete.failed") == 1
    assert a.client.simulate_delete(V + "/bad_name").status_code == 400


def test_delete_with_tokens(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client, auth=True)
    a.add_token()
    a.add_vm("pool1", "free", queue="running")
    assert a.client.simulate_delete(V + "/free").status_code == 200
    a.add_vm("pool1", "owned", queue="running", **{"token:token": TOKEN})
    r = a.client.simulate_delete(V + "/owned")
    assert (r.status_code, r.json) == (401, {"ok": False})
    assert a.redis.sismember(schema.running("pool1"), "owned")
    assert a.client.simulate_delete(V + "/owned", headers=AUTH).status_code == 200


def test_delete_checks_the_token_even_without_auth(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    a.add_vm("pool1", "owned", queue="running", **{"token:token": TOKEN})
    assert a.client.simulate_delete(V + "/owned").status_code == 401


# -- disk and snapshots -----------------------------------------------------------------------
def test_disk(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    a.add_vm("pool1", "vm1", queue="running")
    r = a.client.simulate_post(V + "/vm1.one.example.com/disk/8")
    assert (r.status_code, r.json) == (202, {"ok": True, "vm1": {"disk": "+8gb"}})
    assert a.redis.smembers(schema.tasks_disk()) == {"vm1:8"}
    assert a.commands.sent == [("tasks_queued",)]
    for size, error in (("0", "at least 1"), ("2049", "at most 2048"), ("x", "a valid integer")):
        r = a.client.simulate_post(f"{V}/vm1/disk/{size}")
        assert r.status_code == 400
        assert r.json == {"ok": False, "error": f"Disk size must be {error}"}
    assert a.client.simulate_post(V + "/vm_1/disk/8").status_code == 400
    assert a.client.simulate_post(V + "/nope/disk/8").status_code == 404


def test_disk_and_snapshots_need_a_token_with_auth(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client, auth=True)
    a.add_token()
    a.add_vm("pool1", "vm1", queue="running", **{"snapshot:s1": "2024-05-01 10:00:00 +0000"})
    for path in ("/vm1/disk/8", "/vm_1/disk/0", "/vm1/snapshot", "/vm1/snapshot/s1",
                 "/nope/snapshot/zz"):
        r = a.client.simulate_post(V + path)
        assert (r.status_code, r.json) == (401, {"ok": False}), path
    assert a.client.simulate_post(V + "/vm1/disk/8", headers=AUTH).status_code == 202
    assert a.client.simulate_post(V + "/vm1/snapshot", headers=AUTH).status_code == 202
    assert a.client.simulate_post(V + "/vm1/snapshot/s1", headers=AUTH).status_code == 202
    assert a.redis.smembers(schema.tasks_snapshot_revert()) == {"vm1:s1"}
    assert a.client.simulate_post(V + "/vm1/snapshot/s2", headers=AUTH).status_code == 404


def test_snapshots_without_auth(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client)
    a.add_vm("pool1", "vm1", queue="running", **{"snapshot:s1": "2024-05-01 10:00:00 +0000"})
    r = a.client.simulate_post(V + "/vm1.one.example.com/snapshot")
    assert r.status_code == 202 and list(r.json) == ["ok", "vm1"]
    name = r.json["vm1"]["snapshot"]
    assert len(name) == 32 and name[0] in "abcdefghijklmnopqrstuvwxy" and name.isalnum()
    assert a.redis.smembers(schema.tasks_snapshot()) == {f"vm1:{name}"}
    r = a.client.simulate_post(V + "/vm1/snapshot/s1")
    assert (r.status_code, r.json) == (202, {"ok": True})
    assert a.client.simulate_post(V + "/vm1/snapshot/nope").status_code == 404
    assert a.client.simulate_post(V + "/nope/snapshot").status_code == 404
    assert a.commands.sent == [("tasks_queued",), ("tasks_queued",)]


# -- ownership (enforce_vm_ownership) -------------------------------------------------------------
@pytest.mark.parametrize("enforced", [False, True])
def test_ownership_rule(redis_client: redis.Redis, enforced: bool) -> None:
    flags = {"enforce_vm_ownership": True} if enforced else {}
    a = three_pools(redis_client, auth=True, **flags)
    a.add_token()
    a.add_token("other0000000000000000000000000000", "mallory")
    other = {"X-AUTH-TOKEN": "other0000000000000000000000000000"}
    a.add_vm("pool1", "mine", queue="running", **{"token:token": TOKEN})
    a.add_vm("pool1", "anyones", queue="running")
    expected = 403 if enforced else None
    for method, path, body in (("PUT", "/mine", {"lifetime": 3}), ("POST", "/mine/disk/8", None),
                               ("POST", "/mine/snapshot", None), ("DELETE", "/mine", None)):
        r = a.client.simulate_request(method, V + path, headers=other,
                                      body=json.dumps(body) if body else None)
        assert r.status_code == (expected or r.status_code) and r.status_code < 500
        if enforced:
            assert r.json["ok"] is False and r.json["error"]
    assert bool(a.redis.sismember(schema.running("pool1"), "mine")) is enforced
    assert put(a, "anyones", {"lifetime": 3}, other).status_code == 200
    assert a.client.simulate_delete(V + "/anyones", headers=other).status_code == 200
    if enforced:
        assert a.client.simulate_delete(V + "/mine", headers=AUTH).status_code == 200


# -- usage statistics ---------------------------------------------------------------------------
def test_usage_stats(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client, usage_stats=True, auth=True)
    a.add_token(user="j.doe")
    a.add_vm("pool1", "vm1", **{"tag:jenkins_build_url":
                                "https://jenkins.example.com/job/platform_puppet_agent_ci_main/"
                                "RMM_COMPONENT_TO_TEST_NAME=agent,X=1/12/"})
    assert post(a, {"pool1": 1}, AUTH).status_code == 200
    assert a.metrics.counts("user", user="j_doe", operation="allocate", pool="pool1") == 1
    assert a.metrics.counts("usage_jenkins_instance", instance="jenkins_example_com",
                            value_stream="platform", operation="allocate") == 1
    assert a.metrics.counts("usage_branch_project", branch="main", project="puppet") == 1
    assert a.metrics.counts("usage_job_component", job="agent_ci", component="agent") == 1
    assert a.client.simulate_delete(V + "/vm1", headers=AUTH).status_code == 200
    assert a.metrics.counts("user", user="j_doe", operation="destroy", pool="pool1") == 1


class CountingConnection(redis.Connection):
    """A real connection that counts round trips (each packed send is one)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


@pytest.mark.parametrize("auth", [False, True])
def test_checkout_is_one_round_trip(redis_client: redis.Redis, auth: bool) -> None:
    kwargs = redis_client.connection_pool.connection_kwargs
    client = redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=CountingConnection, host=kwargs["host"], port=kwargs["port"],
        decode_responses=True))
    a = api(client, three_pools(redis_client, auth=auth, vm_lifetime_auth=2).ctx.config)
    a.add_token()
    for i in range(4):
        a.add_vm("pool1", f"a{i}")
        a.add_vm("pool2", f"b{i}")
    assert post(a, {"pool1": 1}, AUTH).status_code == 200  # loads the script
    CountingConnection.sent = 0
    assert post(a, {"pool1": 2, "pool2": 2, "poolone": 1}, AUTH).status_code == 200
    assert CountingConnection.sent == 1
    CountingConnection.sent = 0
    assert post(a, {"pool2": 3}, AUTH).status_code == 503
    assert CountingConnection.sent == 1
    client.close()


def test_empty_token_header_with_auth_is_401(redis_client: redis.Redis) -> None:
    a = three_pools(redis_client, auth=True)
    a.add_vm("pool1", "vm1")
    assert post(a, {"pool1": 1}, {"X-AUTH-TOKEN": ""}).status_code == 401
    assert ready(a, "pool1") == {"vm1"}


@pytest.mark.parametrize(("lifetime", "end_time"), [
    ("100000000", "9999-12-31T23:59:59+00:00"),
    (str(10**30), "9999-12-31T23:59:59+00:00"),
    ("-" + str(10**30), "0001-01-01T00:00:00+00:00"),
    ("1e300", "2024-01-01T01:00:00+00:00"),  # Ruby's to_i: the integer prefix
])
def test_any_lifetime_a_client_sets_is_described(redis_client: redis.Redis, lifetime: str,
                                                 end_time: str) -> None:
    """A lifetime past year 9999 (any client may set one without max_lifetime_upper_limit)
    is still described: end_time stops at the last second a datetime has (it was a 500)."""
    a = three_pools(redis_client)
    a.add_vm("pool1", "vm1", queue="running", checkout="2024-01-01 00:00:00 +0000")
    a.redis.hset(schema.vm("vm1"), "lifetime", lifetime)
    r = a.client.simulate_get(f"{V}/vm1")
    assert r.status_code == 200, r.text
    assert r.json["vm1"]["end_time"] == end_time
    assert isinstance(r.json["vm1"]["remaining"], float)
