"""Per-user quotas (``:quotas:``, docs/fairness.md) through the API over a real
redis-server: each limit's refusal and its body, what counts as held, the resolution of a
user's limits (own entry, groups, default), and the path without quotas."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from tests.openapi_check import body_errors
from tests.quota_harness import (
    ALICE,
    BOB,
    P,
    checkout,
    hostnames,
    ondemand,
    quota_api,
)
from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.request_store import Entry, RequestStore
from vmpooler.web.quota_guard import ADDRESS_LABEL
from vmpooler.web.resources import status_users


def refusal(quota: str, limit: int, in_use: int) -> dict[str, Any]:
    return {"ok": False, "reason": "quota", "quota": quota, "limit": limit, "in_use": in_use}


def without_message(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "message"}


# -- vms_held ----------------------------------------------------------------------------------
def test_checkouts_stop_at_vms_held_and_a_returned_vm_frees_its_place(
        redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"default": {"vms_held": 3}}, vms=5)
    first = checkout(a, {"pool1": 2})
    assert first.status_code == 200, first.text
    assert checkout(a, {"pool2": 1}).status_code == 200
    r = checkout(a, {"pool1": 1})
    assert r.status_code == 429
    assert without_message(r.json) == refusal("vms_held", 3, 3)
    assert r.json["message"] == ("user 'alice' holds 3 VMs; the limit is 3 (1 more asked for) "
                                 "(:quotas: vms_held)")
    assert len(a.redis.smembers(schema.ready("pool1"))) == 3  # nothing taken
    assert checkout(a, {"pool1": 1}, BOB).status_code == 200  # per user
    vm = hostnames(first)[0]
    assert a.client.simulate_delete(f"{P}/vm/{vm}",
                                    headers={"X-AUTH-TOKEN": ALICE}).status_code == 200
    assert checkout(a, {"pool1": 1}).status_code == 200
    assert checkout(a, {"pool1": 1}).status_code == 429
    assert a.metrics.counts("quota.refused", quota="vms_held", requester="token") == 2


def test_a_checkout_that_would_pass_the_limit_takes_nothing(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"default": {"vms_held": 4}}, vms=5)
    assert checkout(a, {"pool1": 3}).status_code == 200
    r = checkout(a, {"pool1": 1, "pool2": 1})
    assert (r.status_code, r.json["in_use"]) == (429, 3)
    assert a.redis.scard(schema.ready("pool2")) == 5
    assert checkout(a, {"pool2": 1}).status_code == 200


def test_on_demand_requests_count_while_in_flight_and_their_vms_once_ready(
        redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"default": {"vms_held": 4}}, vms=5)
    r = ondemand(a, {"pool1": 3})
    assert r.status_code == 201, r.text
    request_id = r.json["request_id"]
    assert without_message(checkout(a, {"pool1": 2}).json) == refusal("vms_held", 4, 3)
    assert without_message(ondemand(a, {"pool2": 2}).json) == refusal("vms_held", 4, 3)
    # ready with two of its three VMs still running: it holds two
    entries = [Entry("pool1", "pool1", 3)]
    store = RequestStore(a.redis)
    for i in range(3):
        vm = f"od-{i}"
        a.add_vm("pool1", vm, queue="pending", request_id=request_id)
        store.attach(request_id, entries[0], vm, now="now", lifetime=None)
    assert store.fulfil(request_id, entries) == (True, "ready")
    a.redis.smove(schema.running("pool1"), schema.completed("pool1"), "od-0")
    assert checkout(a, {"pool1": 2}).status_code == 200
    assert without_message(checkout(a, {"pool1": 1}).json) == refusal("vms_held", 4, 4)
    assert a.client.simulate_delete(f"{P}/ondemandvm/{request_id}",
                                    headers={"X-AUTH-TOKEN": ALICE}).status_code == 200
    assert checkout(a, {"pool1": 2}).status_code == 200  # the deleted request holds nothing
    assert a.redis.smembers(schema.quota_held("alice")) == {
        f"vm:pool1:{vm}" for vm in a.redis.smembers(schema.running("pool1"))
        if not vm.startswith("od-")}


def test_a_failed_or_vanished_request_holds_nothing(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"default": {"vms_held": 2}})
    failed = ondemand(a, {"pool1": 2}).json["request_id"]
    assert ondemand(a, {"pool1": 1}).status_code == 429
    RequestStore(a.redis).fail(failed, [Entry("pool1", "pool1", 2)], reason="t", ttl=60)
    gone = ondemand(a, {"pool1": 2}).json["request_id"]
    assert ondemand(a, {"pool1": 1}).status_code == 429
    a.redis.delete(schema.odrequest(gone))
    assert ondemand(a, {"pool1": 2}).status_code == 201


# -- ondemand_in_flight and vms_per_request -----------------------------------------------------
def test_on_demand_requests_in_flight_stop_at_the_limit(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"users": {"alice": {"ondemand_in_flight": 2}}})
    first = ondemand(a, {"pool1": 1}).json["request_id"]
    assert ondemand(a, {"pool1": 1}).status_code == 201
    r = ondemand(a, {"pool1": 1})
    assert r.status_code == 429
    assert r.json == {**refusal("ondemand_in_flight", 2, 2), "message": (
        "user 'alice' has 2 on-demand requests in flight; the limit is 2 "
        "(:quotas: ondemand_in_flight)")}
    assert ondemand(a, {"pool1": 1}, BOB).status_code == 201  # bob: no limit
    a.redis.hset(schema.odrequest(first), "status", "ready")  # ready: no longer in flight
    assert ondemand(a, {"pool1": 1}).status_code == 201
    assert a.metrics.counts("quota.refused", quota="ondemand_in_flight", requester="token") == 1


@pytest.mark.parametrize("form", ["body", "path", "ondemand", "ondemand-path"])
def test_more_vms_in_one_request_than_vms_per_request_is_refused(
        redis_client: redis.Redis, form: str) -> None:
    a = quota_api(redis_client, {"default": {"vms_per_request": 2}}, vms=3)
    headers = {"X-AUTH-TOKEN": ALICE}
    send = {
        "body": lambda n: checkout(a, {"pool1": n - 1, "pool2": 1}),
        "path": lambda n: a.client.simulate_post(f"{P}/vm/" + "+".join(["pool1"] * n),
                                                 headers=headers),
        "ondemand": lambda n: ondemand(a, {"pool1": n - 1, "poolone": 1}),
        "ondemand-path": lambda n: a.client.simulate_post(
            f"{P}/ondemandvm/" + "+".join(["pool2"] * n), headers=headers),
    }[form]
    r = send(3)
    assert r.status_code == 429, r.text
    assert r.json == {**refusal("vms_per_request", 2, 3), "message": (
        "user 'alice' asked for 3 VMs in one request; the limit is 2 "
        "(:quotas: vms_per_request)")}
    assert a.redis.scard(schema.ready("pool1")) == 3
    assert not a.redis.keys(schema.odrequest("*"))
    assert send(2).status_code in (200, 201)


# -- lifetime_hours ----------------------------------------------------------------------------
def test_a_lifetime_above_lifetime_hours_is_refused(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"default": {"lifetime_hours": 12},
                                 "users": {"bob": {"lifetime_hours": "unlimited"}}}, vms=1)
    vm = hostnames(checkout(a, {"pool1": 1}))[0]
    put = lambda hours, token=ALICE: a.client.simulate_put(  # noqa: E731
        f"{P}/vm/{vm}", json={"lifetime": hours}, headers={"X-AUTH-TOKEN": token})
    r = put(13)
    assert r.status_code == 429
    assert r.json == {**refusal("lifetime_hours", 12, 13), "message": (
        "user 'alice' asked for a lifetime of 13 hours; the limit is 12 "
        "(:quotas: lifetime_hours)")}
    assert a.redis.hget(schema.vm(vm), "lifetime") == "12"  # the checkout's (capped) only
    assert put(11).status_code == 200
    assert a.redis.hget(schema.vm(vm), "lifetime") == "11"
    assert put(12).status_code == 200
    assert put(100, BOB).status_code == 200  # bob: unlimited


# -- who is limited how ------------------------------------------------------------------------
SECTION = {
    "default": {"vms_held": 1},
    "users": {"alice": {"vms_held": 5}},
    "groups": {"qa": {"vms_held": 2}, "release": {"vms_held": 3}, "infra": {"share": 4}},
    "members": {"qa": ["bob", "carol"], "release": ["carol"], "infra": ["dave"]},
}


@pytest.mark.parametrize(("user", "groups", "limit"), [
    ("alice", "release", 5),  # own entry first, even against a group
    ("bob", "", 2),  # a static group
    ("carol", "", 3),  # the most generous of two groups
    ("dave", "", 1),  # a group that only sets a share: the default
    ("erin", "", 1),  # no group: the default
    ("frank", "qa,release", 3),  # groups recorded on the token (LDAP)
])
def test_limits_resolve_from_user_groups_and_default(
        redis_client: redis.Redis, user: str, groups: str, limit: int) -> None:
    a = quota_api(redis_client, SECTION, vms=6)
    token = "t" * 32
    a.add_token(token, user)
    if groups:
        a.redis.hset(schema.token(token), "groups", groups)
    statuses = [checkout(a, {"pool1": 1}, token).status_code for _ in range(limit + 1)]
    assert statuses == [200] * limit + [429]


def test_a_client_without_a_token_is_limited_by_its_address(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"default": {"vms_held": 1}}, auth=False, vms=2)
    assert checkout(a, {"pool1": 1}, None).status_code == 200
    r = checkout(a, {"pool1": 1}, None)
    assert r.status_code == 429
    assert "user '127.0.0.1'" in r.json["message"]
    # the address never becomes a metric label
    assert a.metrics.counts("quota.refused", quota="vms_held", requester=ADDRESS_LABEL) == 1
    assert a.redis.exists(schema.quota_held("127.0.0.1"))


def test_anonymous_users_share_one_quota(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"anonymous": True, "users": {"anonymous": {"vms_held": 1}}},
                  auth=False, vms=2)
    assert checkout(a, {"pool1": 1}, None).status_code == 200
    r = a.client.simulate_post(f"{P}/vm", json={"pool1": 1},
                               headers={"X-Forwarded-For": "10.1.1.1"})
    assert r.status_code == 429
    assert a.metrics.counts("quota.refused", quota="vms_held", requester="anonymous") == 1


def test_an_unknown_token_is_401_before_any_quota(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"default": {"vms_per_request": 1}}, vms=2)
    r = checkout(a, {"pool1": 2}, "u" * 32)
    assert r.status_code == 401
    assert a.redis.scard(schema.ready("pool1")) == 2


def test_max_ondemand_requests_per_user_is_the_default_of_ondemand_in_flight(
        redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"default": {"vms_held": 50},
                                 "users": {"bob": {"ondemand_in_flight": "unlimited"}}},
                  max_ondemand_requests_per_user=1)
    assert ondemand(a, {"pool1": 1}).status_code == 201
    r = ondemand(a, {"pool1": 1})
    assert without_message(r.json) == refusal("ondemand_in_flight", 1, 1)
    assert [ondemand(a, {"pool1": 1}, BOB).status_code for _ in range(2)] == [201, 201]


# -- without quotas ----------------------------------------------------------------------------
def test_without_a_limit_nothing_is_tracked_or_refused(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"groups": {"infra": {"share": 2}},
                                 "members": {"infra": ["alice"]}}, vms=12)
    assert not a.ctx.config.quotas.configured
    assert [checkout(a, {"pool1": 5}).status_code for _ in range(2)] == [200, 200]
    assert [ondemand(a, {"pool1": 10}).status_code for _ in range(3)] == [201] * 3
    assert not a.redis.keys(schema.quota_held("*"))
    assert not a.redis.exists(schema.quota_users())


# -- the usage view ----------------------------------------------------------------------------
USAGE_SECTION = {"default": {"vms_held": 3}, "users": {"bob": {"ondemand_in_flight": 2}}}


def test_status_shows_each_user_and_hides_names_without_a_token(
        redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, USAGE_SECTION, vms=3)
    assert checkout(a, {"pool1": 2}).status_code == 200
    assert ondemand(a, {"pool2": 1}, BOB).status_code == 201
    limits = {"vms_held": 3, "ondemand_in_flight": None, "vms_per_request": None,
              "lifetime_hours": None}
    named = {"alice": {"vms_held": 2, "ondemand_in_flight": 0, "limits": limits},
             "bob": {"vms_held": 1, "ondemand_in_flight": 1,
                     "limits": {**limits, "ondemand_in_flight": 2}}}
    r = a.client.simulate_get(f"{P}/status", headers={"X-AUTH-TOKEN": BOB})
    assert r.json["users"] == named
    assert list(r.json)[-2:] == ["users", "status"]
    hidden = a.client.simulate_get(f"{P}/status").json["users"]
    assert hidden == {"user-1": named["alice"], "user-2": named["bob"]}
    bad = a.client.simulate_get(f"{P}/status", headers={"X-AUTH-TOKEN": "x" * 32})
    assert set(bad.json["users"]) == {"user-1", "user-2"}
    assert r.json["users_summary"] == {"users": 2, "vms_held": 3, "ondemand_in_flight": 1,
                                       "listed": 2, "as_of": timefmt.rfc3339(
                                           datetime.fromtimestamp(a.clock.now(), UTC))}
    assert list(r.json)[-3:] == ["users_summary", "users", "status"]
    # only when a view names it; a user holding nothing leaves, the others keep their label
    assert "users" not in a.client.simulate_get(f"{P}/status?view=pools").json
    assert "users" in a.client.simulate_get(f"{P}/status?view=pools,users").json
    for vm in a.redis.smembers(schema.running("pool1")):
        a.redis.smove(schema.running("pool1"), schema.completed("pool1"), vm)
    # the counts are a snapshot at most MAX_AGE old
    a.clock.advance(status_users.MAX_AGE - 0.1)
    assert set(a.client.simulate_get(f"{P}/status").json["users"]) == {"user-1", "user-2"}
    a.clock.advance(0.1)
    assert a.client.simulate_get(f"{P}/status").json["users"] == {"user-2": named["bob"]}
    assert not a.redis.exists(schema.quota_held("alice"))
    assert checkout(a, {"pool1": 1}).status_code == 200
    a.clock.advance(status_users.MAX_AGE)
    assert set(a.client.simulate_get(f"{P}/status").json["users"]) == {"user-2", "user-3"}


def test_status_names_users_when_auth_is_not_configured(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, USAGE_SECTION, auth=False, vms=1)
    assert checkout(a, {"pool1": 1}, None).status_code == 200
    assert list(a.client.simulate_get(f"{P}/status").json["users"]) == ["127.0.0.1"]


def test_status_has_no_users_section_without_quotas(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {}, vms=1)
    assert checkout(a, {"pool1": 1}).status_code == 200
    assert "users" not in a.client.simulate_get(f"{P}/status?view=users").json
    assert "users" not in a.client.simulate_get(f"{P}/status").json


def test_the_refusals_and_the_users_section_follow_the_api_description(
        redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"default": {"vms_held": 1, "vms_per_request": 1,
                                             "lifetime_hours": 1}}, vms=2)
    vm = hostnames(checkout(a, {"pool1": 1}))[0]
    answers = [
        ("post", "/vm", checkout(a, {"pool1": 1})),
        ("post", "/vm/{hostname}", a.client.simulate_post(
            f"{P}/vm/pool1+pool1", headers={"X-AUTH-TOKEN": ALICE})),
        ("put", "/vm/{hostname}", a.client.simulate_put(
            f"{P}/vm/{vm}", json={"lifetime": 2}, headers={"X-AUTH-TOKEN": ALICE})),
        ("post", "/ondemandvm", ondemand(a, {"pool1": 1})),
        ("post", "/ondemandvm/{requestid}", a.client.simulate_post(
            f"{P}/ondemandvm/pool1", headers={"X-AUTH-TOKEN": ALICE})),
    ]
    for method, template, r in answers:
        assert r.status_code == 429, (template, r.text)
        assert body_errors(method, f"/api/v3{template}", 429, r.text) == [], template
    status = a.client.simulate_get(f"{P}/status")
    assert status.json["users"]
    assert body_errors("get", "/api/v3/status", 200, status.text) == []
