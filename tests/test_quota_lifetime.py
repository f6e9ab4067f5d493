"""``:quotas: lifetime_hours`` caps the lifetime a VM gets when it is handed to a user: at
checkout, delivered to the user's on-demand request, or taken from ready for it
(``ondemand_from_ready``); through the API over a real redis-server."""

from __future__ import annotations

import pytest
import redis

from tests.api_harness import Api
from tests.quota_harness import ALICE, BOB, checkout, hostnames, ondemand, quota_api
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import Entry, RequestStore

CAPPED = {"default": {"lifetime_hours": 12}, "users": {"bob": {"lifetime_hours": "unlimited"}}}


def lifetime(r: redis.Redis, vm: str) -> str | None:
    return r.hget(schema.vm(vm), "lifetime")


@pytest.mark.parametrize(("auth_hours", "alice", "bob"), [
    (48, "12", "48"),  # vm_lifetime_auth above the limit: capped; bob is unlimited
    (6, "6", "6"),  # already within the limit: unchanged
])
def test_a_checkout_gets_at_most_the_users_lifetime_hours(
        redis_client: redis.Redis, auth_hours: int, alice: str, bob: str) -> None:
    a = quota_api(redis_client, CAPPED, vms=2, vm_lifetime_auth=auth_hours)
    assert lifetime(a.redis, hostnames(checkout(a, {"pool1": 1}))[0]) == alice
    assert lifetime(a.redis, hostnames(checkout(a, {"pool1": 1}, BOB))[0]) == bob


@pytest.mark.parametrize(("vm_lifetime", "limit", "written"), [
    (24, 12, "12"),  # the manager's default lifetime is longer: the VM carries the cap
    (0, 12, "12"),  # a default of 0 never expires: longer than any cap
    (6, 12, None),  # the default is within the limit: nothing written, as without quotas
    (24, 0, "1"),  # 0 would mean "never expires": the shortest lifetime there is instead
])
def test_a_checkout_without_a_token_gets_the_cap_when_its_default_is_longer(
        redis_client: redis.Redis, vm_lifetime: int, limit: int, written: str | None) -> None:
    a = quota_api(redis_client, {"default": {"lifetime_hours": limit}}, auth=False, vms=1,
                  vm_lifetime=vm_lifetime)
    r = checkout(a, {"pool1": 1}, None)
    assert r.status_code == 200, r.text
    assert lifetime(a.redis, hostnames(r)[0]) == written


def test_without_a_lifetime_limit_the_checkout_writes_what_it_always_did(
        redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"default": {"vms_held": 5}}, vms=1, vm_lifetime_auth=48)
    assert lifetime(a.redis, hostnames(checkout(a, {"pool1": 1}))[0]) == "48"
    b = quota_api(redis_client, {"default": {"vms_held": 5}}, auth=False, vm_lifetime=24)
    b.add_vm("pool2", "anon-1")
    assert lifetime(b.redis, hostnames(checkout(b, {"pool2": 1}, None))[0]) is None


def _request(a: Api, body: dict[str, int], token: str | None = ALICE) -> str:
    r = ondemand(a, body, token)
    assert r.status_code == 201, r.text
    return str(r.json["request_id"])


def test_vms_delivered_to_an_on_demand_request_get_at_most_the_limit(
        redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, CAPPED, vm_lifetime_auth=48)
    store = RequestStore(a.redis)
    capped, free = _request(a, {"pool1": 1}), _request(a, {"pool1": 1}, BOB)
    assert a.redis.hget(schema.odrequest(capped), "quota_lifetime") == "12"
    assert not a.redis.hexists(schema.odrequest(free), "quota_lifetime")
    for request_id, vm in ((capped, "od-a"), (free, "od-b")):
        a.add_vm("pool1", vm, queue="pending", request_id=request_id)
        # the request's actor passes vm_lifetime_auth for a request with a token
        store.attach(request_id, Entry("pool1", "pool1", 1), vm, now="now", lifetime=48)
    assert (lifetime(a.redis, "od-a"), lifetime(a.redis, "od-b")) == ("12", "48")


def test_a_request_without_a_token_gets_the_cap_over_the_default_lifetime(
        redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"default": {"lifetime_hours": 12}}, auth=False,
                  vm_lifetime=24)
    request_id = _request(a, {"pool1": 1}, None)
    a.add_vm("pool1", "od-a", queue="pending", request_id=request_id)
    RequestStore(a.redis).attach(request_id, Entry("pool1", "pool1", 1), "od-a", now="now",
                                 lifetime=None)
    assert lifetime(a.redis, "od-a") == "12"


def test_vms_taken_from_ready_for_a_request_get_at_most_the_limit(
        redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, CAPPED, vms=2, vm_lifetime_auth=48)
    store = RequestStore(a.redis)
    capped, free = _request(a, {"pool1": 1}), _request(a, {"pool1": 1}, BOB)
    [vm_a] = store.take_ready(capped, Entry("pool1", "pool1", 1), 1, now="now", lifetime=48)
    [vm_b] = store.take_ready(free, Entry("pool1", "pool1", 1), 1, now="now", lifetime=48)
    assert (lifetime(a.redis, vm_a), lifetime(a.redis, vm_b)) == ("12", "48")
