"""API v3 ``/ondemandvm`` endpoints over real Redis: vmpooler's ondemandvm_spec (reference
§8), every status code, the Redis records, the commands sent, and our divergences."""

from __future__ import annotations

import json
import uuid
from typing import Any

import falcon.testing
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api_harness import TOKEN, USER, Api, api, api_config, api_pool
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import Entry, RequestStore

OD = "/api/v3/ondemandvm"
AUTH = {"X-AUTH-TOKEN": TOKEN}
OTHER_TOKEN = "other0000000000000000000000000000"
NOW = 1_700_000_000  # the harness's FakeClock start


def spec_api(redis_client: redis.Redis, **settings: Any) -> Api:
    """ondemandvm_spec's setup: pool1..3 (size 0), clone targets compute1/2, backend_weight
    compute1:5 compute2:0, aliases poolone → pool1 and pool2 → pool1, at most 50 per name."""
    auth = settings.pop("auth", False)
    settings.setdefault("max_ondemand_instances_per_request", 50)
    settings.setdefault("backend_weight", {"compute1": 5, "compute2": 0})
    return api(redis_client, api_config([
        api_pool("pool1", 0, domain="one.example.com", alias=("poolone", "pool2"),
                 clone_target="compute1"),
        api_pool("pool2", 0, domain="two.example.com", clone_target="compute2"),
        api_pool("pool3", 0, domain="three.example.com", clone_target="compute1"),
    ], auth=auth, **settings))


def post(a: Api, body: Any, headers: dict[str, str] | None = None,
         path: str = OD) -> falcon.testing.Result:
    text = body if isinstance(body, str) else json.dumps(body)
    return a.client.simulate_post(path, body=text, headers=headers)


OUR_FIELDS = ("user", "priority", "share")  # who asked (docs/fairness.md), not vmpooler's


def request_hash(a: Api, request_id: str) -> dict[str, str]:
    """The request's hash as vmpooler writes it (without our fields of who asked)."""
    fields = a.redis.hgetall(schema.odrequest(request_id))
    return {k: v for k, v in fields.items() if k not in OUR_FIELDS}


def test_a_request_records_who_asked(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    request_id = created_id(post(a, {"poolone": 1}))
    fields = a.redis.hgetall(schema.odrequest(request_id))
    assert {k: fields[k] for k in OUR_FIELDS} == {
        "user": "127.0.0.1", "priority": "normal", "share": "1.0"}


def waiting(a: Api) -> list[tuple[str, float]]:
    return a.redis.zrange(schema.provisioning_request(), 0, -1, withscores=True)


def nothing_created(a: Api) -> None:
    assert a.redis.keys(schema.odrequest("*")) == []
    assert waiting(a) == []
    assert a.commands.sent == []


def created_id(result: falcon.testing.Result) -> str:
    assert result.status_code == 201, result.text
    body = result.json
    assert list(body) == ["ok", "request_id"] and body["ok"] is True
    return str(body["request_id"])


# -- POST /ondemandvm (ondemandvm_spec) --------------------------------------------------------
def test_create_without_request_id(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    request_id = created_id(post(a, {"poolone": 1}))
    assert uuid.UUID(request_id).version == 4
    assert waiting(a) == [(request_id, NOW)]
    assert request_hash(a, request_id) == {"requested": "poolone:pool1:1"}
    assert a.commands.sent == [("request_changed", request_id, "created")]
    assert a.metrics.counts("ondemandrequest_generate.success") == 1
    assert a.metrics.counts("http_requests_vm_total", method="post", subpath="ondemand",
                            operation="requestid") == 1


def test_score_is_the_integer_creation_time(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    a.clock.advance(12.75)
    request_id = created_id(post(a, {"pool1": 1}))
    assert waiting(a) == [(request_id, NOW + 12)]
    assert a.redis.zscore(schema.provisioning_request(), request_id) == NOW + 12
    assert request_hash(a, request_id) == {"requested": "pool1:pool1:1"}


def test_weight_zero_is_never_chosen(redis_client: redis.Redis) -> None:
    """pool2 is a pool (compute2, weight 0) and an alias of pool1 (compute1, weight 5)."""
    a = spec_api(redis_client)
    request_id = created_id(post(a, {"pool2": 50}))
    assert request_hash(a, request_id)["requested"] == "pool2:pool1:50"


def test_weights_apply_to_an_alias_that_is_not_a_pool(redis_client: redis.Redis) -> None:
    """An alias-only name is no candidate itself (vmpooler's evaluate_template_aliases), so
    its pools' weights decide: pool2's weight 0 never wins."""
    a = api(redis_client, api_config([
        api_pool("pool1", 0, alias=("both",), clone_target="compute1"),
        api_pool("pool2", 0, alias=("both",), clone_target="compute2"),
    ], backend_weight={"compute1": 5, "compute2": 0}, max_ondemand_instances_per_request=50))
    request_id = created_id(post(a, {"both": 50}))
    assert request_hash(a, request_id)["requested"] == "both:pool1:50"


def test_unweighted_alias_draws_every_instance(redis_client: redis.Redis) -> None:
    """Without weights each instance is drawn uniformly; counts per pool, first draw first."""
    a = api(redis_client, api_config([
        api_pool("pool1", 0, alias=("both",)), api_pool("pool2", 0, alias=("both",)),
    ], max_ondemand_instances_per_request=50))
    request_id = created_id(post(a, {"both": 40, "pool1": 2}))
    entries = RequestStore(a.redis).read(request_id).entries  # type: ignore[union-attr]
    both = {e.pool: e.count for e in entries if e.alias == "both"}
    assert set(both) == {"pool1", "pool2"} and sum(both.values()) == 40
    assert min(both.values()) >= 5  # 40 fair draws: P(fewer than 5 of one) < 1e-6
    assert [e for e in entries if e.alias == "pool1"] == [Entry("pool1", "pool1", 2)]


def test_mixed_weights_fall_back_to_uniform(redis_client: redis.Redis) -> None:
    """A candidate without a weight (pool3's target has none) means a uniform draw."""
    a = api(redis_client, api_config([
        api_pool("pool1", 0, alias=("both",), clone_target="compute1"),
        api_pool("pool3", 0, alias=("both",), clone_target="compute3"),
    ], backend_weight={"compute1": 5}, max_ondemand_instances_per_request=50))
    request_id = created_id(post(a, {"both": 40}))
    requested = request_hash(a, request_id)["requested"]
    assert {part.split(":")[1] for part in requested.split(",")} == {"pool1", "pool3"}


def test_too_many_is_403(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    r = post(a, {"pool1": 1, "poolone": 51})
    assert (r.status_code, r.json) == (403, {
        "ok": False, "message": "requested amount of instances exceeds the maximum 50"})
    assert a.metrics.counts("ondemandrequest_fail.toomanyrequests", pool="poolone") == 1
    nothing_created(a)
    assert created_id(post(a, {"poolone": 50}))


def test_default_maximum_is_10(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool("pool1")]))
    r = post(a, {"pool1": "11"})
    assert r.json == {"ok": False,
                      "message": "requested amount of instances exceeds the maximum 10"}
    assert r.status_code == 403


def test_supplied_request_id_and_reuse_is_409(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    r = post(a, {"pool1": 1, "request_id": "1234"})
    assert (r.status_code, r.json) == (201, {"ok": True, "request_id": "1234"})
    r = post(a, {"pool2": 3, "request_id": "1234"})
    assert (r.status_code, r.json) == (409, {
        "ok": False, "request_id": "1234", "message": "request_id '1234' has already been created"})
    assert request_hash(a, "1234") == {"requested": "pool1:pool1:1"}
    assert waiting(a) == [("1234", NOW)]
    assert a.commands.sent == [("request_changed", "1234", "created")]
    assert a.metrics.counts("ondemandrequest_generate.duplicaterequests") == 1


def test_null_request_id_means_none(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    request_id = created_id(post(a, {"pool1": 1, "request_id": None}))
    assert uuid.UUID(request_id).version == 4


def test_token_is_recorded_with_auth(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client, auth=True)
    a.add_token()
    request_id = created_id(post(a, {"pool1": 1}, AUTH))
    assert request_hash(a, request_id) == {
        "requested": "pool1:pool1:1", "token:token": TOKEN, "token:user": USER}
    assert a.redis.hget(schema.token(TOKEN), "last")  # need_token records the use


@pytest.mark.parametrize("headers", [None, {"X-AUTH-TOKEN": ""},
                                     {"X-AUTH-TOKEN": "nosuchtoken"}])
def test_auth_needs_a_valid_token(redis_client: redis.Redis,
                                  headers: dict[str, str] | None) -> None:
    a = spec_api(redis_client, auth=True)
    a.add_token()
    for path in (OD, OD + "/pool1"):
        r = post(a, {"pool1": 1}, headers, path=path)
        assert (r.status_code, r.json) == (401, {"ok": False})
        assert r.headers["www-authenticate"] == 'Basic realm="Authentication required"'
    # need_token comes before the body is read
    assert post(a, "{", headers).status_code == 401
    nothing_created(a)


def test_token_is_ignored_without_auth(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    a.add_token()
    request_id = created_id(post(a, {"pool1": 1}, AUTH))
    assert request_hash(a, request_id) == {"requested": "pool1:pool1:1"}


def test_unknown_pool_is_404(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    r = post(a, {"pool1": 1, "pool4": 1, "": 2})
    assert (r.status_code, r.json) == (404, {"ok": False, "bad_templates": ["pool4", ""]})
    assert a.metrics.counts("ondemandrequest_fail.invalid", pool="unknown") == 2  # pool4, ""
    nothing_created(a)


@pytest.mark.parametrize("body", ["{", "", "   ", "{'pool1': 1}", "\xff"])
def test_unparsable_body_is_400(redis_client: redis.Redis, body: str) -> None:
    a = spec_api(redis_client)
    r = a.client.simulate_post(OD, body=body.encode("latin-1"))
    assert (r.status_code, r.json) == (400, {"ok": False,
                                             "message": "JSON payload could not be parsed"})
    nothing_created(a)


@pytest.mark.parametrize("body", ["null", "[1]", "3", '"pool1"', "true"])
def test_body_that_is_not_an_object_is_400(redis_client: redis.Redis, body: str) -> None:
    a = spec_api(redis_client)
    r = post(a, body)
    assert r.status_code == 400 and r.json["ok"] is False
    assert r.json["message"] == 'JSON payload must be an object of {"<pool or alias>": <count>}'
    nothing_created(a)


def test_body_too_large_is_400(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    r = post(a, {"pool1": 1, "request_id": "x" * 10300})
    assert (r.status_code, r.json) == (400, {"ok": False, "message": "Request body too large"})


@pytest.mark.parametrize("count", [-1, "-1", "abc", "", True, None, 1.5, [1], {"a": 1},
                                   float("inf")])
def test_bad_count_is_400_naming_the_key(redis_client: redis.Redis, count: Any) -> None:
    a = spec_api(redis_client)
    r = post(a, json.dumps({"pool1": 1, "poolone": count}))
    assert (r.status_code, r.json) == (400, {
        "ok": False, "message": "the count of 'poolone' must be a whole number of at least 0"})
    nothing_created(a)


@pytest.mark.parametrize(("count", "requested"), [
    (3, "pool3:pool3:3"), ("3", "pool3:pool3:3"), (" 2abc", "pool3:pool3:2"),
    ("+4", "pool3:pool3:4"), (2.0, "pool3:pool3:2"), ("1_0", "pool3:pool3:10"),
])
def test_counts_read_like_vmpooler(redis_client: redis.Redis, count: Any,
                                   requested: str) -> None:
    a = spec_api(redis_client)
    request_id = created_id(post(a, {"pool3": count}))
    assert request_hash(a, request_id) == {"requested": requested}


@pytest.mark.parametrize("request_id", ["", "a b", "a\tb", "id:1", "a/b", "x" * 65, 5,
                                        ["x"], "bell\u0007", "zero\u200bwidth", "ünïcode",
                                        "a%3Ab", "vm__inj", "a__b", "vm_", "_x", "vm", "token",
                                        "dlq", "odrequest", "x" * 256])
def test_bad_request_id_is_400(redis_client: redis.Redis, request_id: Any) -> None:
    a = spec_api(redis_client)
    r = post(a, {"pool1": 1, "request_id": request_id})
    assert r.status_code == 400 and r.json["ok"] is False
    assert r.json["message"].startswith("request_id must ")
    nothing_created(a)


@pytest.mark.parametrize("request_id", ["x" * 64, "job-42_build.7", "VM", "vm.1", "vm-1",
                                        "a_b", "1f0e2d3c-4b5a-4697-8887-969594939291"])
def test_good_request_ids(redis_client: redis.Redis, request_id: str) -> None:
    a = spec_api(redis_client)
    assert created_id(post(a, {"pool1": 1, "request_id": request_id})) == request_id
    assert request_hash(a, request_id) == {"requested": "pool1:pool1:1"}


def test_order_of_checks(redis_client: redis.Redis) -> None:
    """Unknown names (404) before counts (400, 403) before the request id (400, 409)."""
    a = spec_api(redis_client)
    created_id(post(a, {"pool1": 1, "request_id": "taken"}))
    assert post(a, {"nope": "x", "pool1": 99, "request_id": ""}).status_code == 404
    assert post(a, {"pool1": "x", "pool2": 99, "request_id": ""}).status_code == 400
    assert post(a, {"pool1": 99, "request_id": ""}).status_code == 403
    r = post(a, {"pool1": 1, "request_id": ""})
    assert r.status_code == 400 and r.json["message"].startswith("request_id")
    assert post(a, {"pool1": 1, "request_id": "taken"}).status_code == 409


@pytest.mark.parametrize("body", [{}, {"pool3": 0}, {"pool3": "0"}, {"pool1": 0, "pool3": 0},
                                  {"request_id": "nothing"}, {"priority": "low"}])
def test_a_request_for_no_vm_is_400(redis_client: redis.Redis, body: dict[str, Any]) -> None:
    """Ours: vmpooler made it, ready at once with no hostname, kept 30 days."""
    a = spec_api(redis_client)
    r = post(a, body)
    assert r.status_code == 400, r.text
    assert r.json == {"ok": False, "message": (
        "the request asks for no VM: name at least one pool or alias with a count of at "
        'least 1, as {"<pool or alias>": <count>}')}
    nothing_created(a)


def test_a_zero_count_beside_a_real_one_is_left_out(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    request_id = created_id(post(a, {"pool1": 0, "pool3": 2}))
    assert request_hash(a, request_id) == {"requested": "pool3:pool3:2"}


def test_vmfloaty_form_content_type(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    r = a.client.simulate_post(OD + "/", body='{"pool1":"2","request_id":"vf"}', headers={
        "Content-Type": "application/x-www-form-urlencoded"})
    assert created_id(r) == "vf"
    assert request_hash(a, "vf") == {"requested": "pool1:pool1:2"}


# -- POST /ondemandvm/:template ----------------------------------------------------------------
def test_template_counts_by_repetition(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client, auth=True)
    a.add_token()
    r = a.client.simulate_post(OD + "/pool3+pool3+poolone/", headers=AUTH)
    request_id = created_id(r)
    assert request_hash(a, request_id) == {"requested": "pool3:pool3:2,poolone:pool1:1",
                                           "token:token": TOKEN, "token:user": USER}
    assert a.commands.sent == [("request_changed", request_id, "created")]
    assert a.metrics.counts("http_requests_vm_total", method="delete", subpath="ondemand",
                            operation="template") == 1


def test_template_errors(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client, max_ondemand_instances_per_request=2)
    r = a.client.simulate_post(OD + "/pool1+pool4+pool5")
    assert (r.status_code, r.json) == (404, {"ok": False, "bad_templates": ["pool4", "pool5"]})
    r = a.client.simulate_post(OD + "/pool1+pool1+pool1")
    assert (r.status_code, r.json) == (403, {
        "ok": False, "message": "requested amount of instances exceeds the maximum 2"})
    # no request id can be given this way: "request_id" is just an unknown name
    r = a.client.simulate_post(OD + "/request_id")
    assert (r.status_code, r.json) == (404, {"ok": False, "bad_templates": ["request_id"]})
    nothing_created(a)


# -- GET /ondemandvm/:requestid ----------------------------------------------------------------
def seed_delivered(a: Api, request_id: str, alias: str, pool: str, *vms: str) -> None:
    """VMs the manager handed to the request: running, and in the entry's delivered set."""
    for vm in vms:
        a.add_vm(pool, vm, queue="running", request_id=request_id, pool_alias=alias)
        a.redis.hset(schema.vm(vm), "pool", pool)
        a.redis.sadd(schema.request_vms(request_id, alias, pool), vm)


def two_pool_request(a: Api) -> str:
    """``both`` → pool1 ×2 and pool2 ×1, ``pool3`` ×1 (written as the API would)."""
    store = RequestStore(a.redis)
    assert store.create("r1", [Entry("both", "pool1", 2), Entry("both", "pool2", 1),
                               Entry("pool3", "pool3", 1)], created=NOW)
    return "r1"


def test_get_unknown_is_404(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    r = a.client.simulate_get(f"{OD}/nope")
    assert (r.status_code, r.json) == (404, {"ok": False,
                                             "message": "no request found for request_id 'nope'"})
    assert a.metrics.counts("http_requests_vm_total", method="get", subpath="ondemand",
                            operation="request") == 1


@pytest.mark.parametrize("request_id", ["vm__inj", "vm_", "token", "x" * 65, "a%3Ab",
                                        "%C3%BC", "a%20b"])
def test_get_and_delete_of_an_id_that_breaks_the_rule_are_400(
        redis_client: redis.Redis, request_id: str) -> None:
    """No such request can exist, and no key is read or written for it."""
    a = spec_api(redis_client, auth=True)
    a.add_token()
    before = sorted(a.redis.keys("*"))
    for r in (a.client.simulate_get(f"{OD}/{request_id}"),
              a.client.simulate_delete(f"{OD}/{request_id}", headers=AUTH)):
        assert r.status_code == 400, r.text
        assert r.json["ok"] is False and r.json["message"].startswith("request_id must ")
    assert sorted(a.redis.keys("*")) == before
    assert a.commands.sent == []


def test_get_and_delete_of_a_key_of_the_wrong_type_are_404(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    a.redis.sadd(schema.odrequest("planted"), "x")
    for r in (a.client.simulate_get(f"{OD}/planted"), a.client.simulate_delete(f"{OD}/planted")):
        assert (r.status_code, r.json) == (404, {
            "ok": False, "message": "no request found for request_id 'planted'"})
    assert a.redis.type(schema.odrequest("planted")) == "set"


def test_get_waiting_is_202_with_string_counts(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client, auth=True)
    a.add_token()
    request_id = created_id(post(a, {"pool1": 1}, AUTH))
    r = a.client.simulate_get(f"{OD}/{request_id}")  # no token needed
    assert (r.status_code, r.json) == (202, {
        "ok": True, "request_id": request_id, "ready": False,
        "pool1": {"ready": "0", "pending": "1"}})


def test_get_sums_the_pools_of_a_name(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    request_id = two_pool_request(a)
    seed_delivered(a, request_id, "both", "pool1", "vm1")
    seed_delivered(a, request_id, "both", "pool2", "vm2")
    r = a.client.simulate_get(f"{OD}/{request_id}/")
    assert r.status_code == 202
    assert r.json == {"ok": True, "request_id": "r1", "ready": False,
                      "both": {"ready": "2", "pending": "1"},
                      "pool3": {"ready": "0", "pending": "1"}}
    assert list(r.json) == ["ok", "request_id", "ready", "both", "pool3"]


def test_get_ready_lists_fqdns(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    request_id = two_pool_request(a)
    seed_delivered(a, request_id, "both", "pool1", "vm1b", "vm1a")
    seed_delivered(a, request_id, "both", "pool2", "vm2")
    seed_delivered(a, request_id, "pool3", "pool3", "vm3")
    store = RequestStore(a.redis)
    assert store.claim(request_id, now=NOW).found
    entries = store.read(request_id).entries  # type: ignore[union-attr]
    assert store.fulfil(request_id, entries) == (True, "ready")
    r = a.client.simulate_get(f"{OD}/{request_id}")
    assert (r.status_code, r.json) == (200, {
        "ok": True, "request_id": "r1", "ready": True,
        "both": {"hostname": ["vm1a.one.example.com", "vm1b.one.example.com",
                              "vm2.two.example.com"]},
        "pool3": {"hostname": ["vm3.three.example.com"]}})


def test_get_ready_single_hostname_is_a_list(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    request_id = created_id(post(a, {"poolone": 1}))
    seed_delivered(a, request_id, "poolone", "pool1", "vm1")
    a.redis.hset(schema.odrequest(request_id), "status", "ready")  # as the spec seeds it
    r = a.client.simulate_get(f"{OD}/{request_id}")
    assert r.status_code == 200
    assert r.json["poolone"] == {"hostname": ["vm1.one.example.com"]}


def test_get_failed_and_deleted(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client, ondemand_request_ttl=7)
    failed = created_id(post(a, {"pool1": 1}))
    store = RequestStore(a.redis)
    assert store.fail(failed, [Entry("pool1", "pool1", 1)], ttl=60, reason=(
        "The request exceeded ondemand_request_ttl of 7 minutes")) == (True, "failed")
    r = a.client.simulate_get(f"{OD}/{failed}")
    assert (r.status_code, r.json) == (200, {
        "ok": True, "request_id": failed, "ready": False,
        "message": "The request failed to provision instances within the configured "
                   "ondemand_request_ttl '7'"})
    deleted = created_id(post(a, {"pool1": 1}))
    assert a.client.simulate_delete(f"{OD}/{deleted}").status_code == 200
    r = a.client.simulate_get(f"{OD}/{deleted}")
    assert (r.status_code, r.json) == (200, {"ok": True, "request_id": deleted, "ready": False,
                                             "message": "The request has been deleted"})


# -- DELETE /ondemandvm/:requestid -------------------------------------------------------------
def test_delete_unknown_is_404(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    r = a.client.simulate_delete(f"{OD}/nope")
    assert (r.status_code, r.json) == (404, {"ok": False,
                                             "message": "no request found for request_id 'nope'"})
    assert a.commands.sent == []


def test_delete_returns_the_delivered_vms(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    request_id = two_pool_request(a)
    seed_delivered(a, request_id, "both", "pool1", "vm1")
    seed_delivered(a, request_id, "both", "pool2", "vm2")
    a.add_vm("pool1", "other", queue="running")
    r = a.client.simulate_delete(f"{OD}/{request_id}")
    assert (r.status_code, r.json) == (200, {"ok": True})
    assert a.redis.smembers(schema.running("pool1")) == {"other"}
    assert a.redis.smembers(schema.running("pool2")) == set()
    assert a.redis.smembers(schema.completed("pool1")) == {"vm1"}
    assert a.redis.smembers(schema.completed("pool2")) == {"vm2"}
    for alias, pool in (("both", "pool1"), ("both", "pool2"), ("pool3", "pool3")):
        assert not a.redis.exists(schema.request_vms(request_id, alias, pool))
    assert a.redis.hget(schema.odrequest(request_id), "status") == "deleted"
    assert a.redis.ttl(schema.odrequest(request_id)) == 1_296_000
    assert waiting(a) == []
    assert a.commands.sent == [("request_changed", request_id, "deleted")]
    assert a.metrics.counts("http_requests_vm_total", method="delete", subpath="ondemand",
                            operation="request") == 1
    r = a.client.simulate_delete(f"{OD}/{request_id}/")
    assert (r.status_code, r.json) == (200, {"ok": True,
                                             "message": "the request has already been deleted"})
    assert a.commands.sent == [("request_changed", request_id, "deleted")]


def test_delete_keeps_a_failure(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    request_id = created_id(post(a, {"pool1": 1}))
    a.commands.sent.clear()
    RequestStore(a.redis).fail(request_id, [Entry("pool1", "pool1", 1)], reason="x", ttl=60)
    r = a.client.simulate_delete(f"{OD}/{request_id}")
    assert (r.status_code, r.json) == (200, {"ok": True,
                                             "message": "the request has already failed"})
    assert a.redis.hget(schema.odrequest(request_id), "status") == "failed"
    assert a.commands.sent == []


def test_delete_needs_a_token_with_auth(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client, auth=True)
    a.add_token()
    a.add_token(OTHER_TOKEN, "mallory")
    request_id = created_id(post(a, {"pool1": 1}, AUTH))
    for headers in (None, {"X-AUTH-TOKEN": "nosuchtoken"}):
        r = a.client.simulate_delete(f"{OD}/{request_id}", headers=headers)
        assert (r.status_code, r.json) == (401, {"ok": False})
    assert "status" not in request_hash(a, request_id)
    # without the ownership rule any valid token will do, as in vmpooler
    r = a.client.simulate_delete(f"{OD}/{request_id}", headers={"X-AUTH-TOKEN": OTHER_TOKEN})
    assert (r.status_code, r.json) == (200, {"ok": True})


def test_ownership_rule(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client, auth=True, enforce_vm_ownership=True)
    a.add_token()
    a.add_token(OTHER_TOKEN, "mallory")
    other = {"X-AUTH-TOKEN": OTHER_TOKEN}
    mine = created_id(post(a, {"pool1": 1}, AUTH))
    r = a.client.simulate_delete(f"{OD}/{mine}", headers=other)
    assert (r.status_code, r.json) == (403, {
        "ok": False, "message": "This request was created with another token"})
    assert "status" not in request_hash(a, mine)
    assert a.client.simulate_delete(f"{OD}/{mine}", headers=AUTH).status_code == 200
    RequestStore(a.redis).create("tokenless", [Entry("pool1", "pool1", 1)], created=NOW)
    assert a.client.simulate_delete(f"{OD}/tokenless", headers=other).status_code == 200
    assert a.client.simulate_delete(f"{OD}/nope", headers=other).status_code == 404


def test_routes_and_methods(redis_client: redis.Redis) -> None:
    a = spec_api(redis_client)
    for method, path in (("GET", OD), ("DELETE", OD), ("PUT", f"{OD}/x")):
        r = a.client.simulate_request(method, path)
        assert (r.status_code, r.json) == (405, {"ok": False})
    r = a.client.simulate_get(f"{OD}/a/b")
    assert (r.status_code, r.json) == (404, {"ok": False})


# -- garbage in, JSON out --------------------------------------------------------------------
_scalars = st.one_of(st.none(), st.booleans(), st.text(max_size=30),
                     st.integers(-(10**30), 10**30), st.floats(),
                     st.sampled_from(["1", " 2x", "-0", "0x10", "٣", "1e3", "+7", "\ud800"]))
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["pool1", "poolone", "pool2", "request_id", "", "a:b"])
                    | st.text(max_size=10), inner, max_size=4)), max_leaves=10)
_bodies = st.one_of(_json.map(lambda v: json.dumps(v).encode()), st.binary(max_size=100),
                    st.just(b"[" * 3000 + b"]" * 3000))
_segments = st.one_of(st.text(min_size=1, max_size=40).filter(
    lambda s: not {"/", "?", "#"} & set(s)), st.sampled_from(
    ["pool1+pool1", "poolone+", "+", "%2B", "%ff", "%ed%a0%80", "%00", "x" * 300]))


@settings(max_examples=200, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_garbage_never_fails(redis_client: redis.Redis, data: st.DataObject) -> None:
    a = spec_api(redis_client, auth=data.draw(st.booleans()))
    a.add_token()
    headers = data.draw(st.sampled_from([{}, AUTH, {"X-AUTH-TOKEN": "\u00ff"}]))
    if data.draw(st.booleans()):
        method, path = "POST", OD
    else:
        method = data.draw(st.sampled_from(["POST", "GET", "DELETE"]))
        path = f"{OD}/{data.draw(_segments)}"
    r = a.client.simulate_request(method, path, body=data.draw(_bodies), headers={
        "Content-Type": data.draw(st.sampled_from(["application/json", "text/plain",
                                                   "application/x-www-form-urlencoded"])),
        **headers})
    assert r.status_code < 500, r.text
    assert r.headers["content-type"] == "application/json"
    assert isinstance(r.json["ok"], bool)
    if r.status_code >= 400 and r.status_code not in (401, 405):
        assert set(r.json) - {"ok", "request_id"} in ({"message"}, {"bad_templates"}), r.json
