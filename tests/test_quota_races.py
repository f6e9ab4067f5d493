"""Quota races over a real redis-server: many threads of one user checking out and asking
for VMs at once never exceed its ``vms_held`` or ``ondemand_in_flight`` (each check and its
write are one script)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import falcon.testing
import redis

from tests.quota_harness import checkout, ondemand, quota_api
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.user_quota import UserQuotaStore

THREADS = 40


def race(calls: list[Callable[[], falcon.testing.Result]]) -> list[int]:
    """Run ``calls`` on one thread each, released together; their status codes."""
    barrier = threading.Barrier(len(calls))
    statuses: list[int] = []
    lock = threading.Lock()

    def run(call: Callable[[], falcon.testing.Result]) -> None:
        barrier.wait(timeout=10)
        status = call().status_code
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(statuses) == len(calls)
    return sorted(statuses)


def test_concurrent_checkouts_never_exceed_vms_held(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"default": {"vms_held": 5}}, vms=THREADS)
    statuses = race([lambda: checkout(a, {"pool1": 1})] * THREADS)
    assert statuses == [200] * 5 + [429] * (THREADS - 5)
    assert a.redis.scard(schema.running("pool1")) == 5
    assert a.redis.scard(schema.quota_held("alice")) == 5


def test_concurrent_on_demand_requests_never_exceed_ondemand_in_flight(
        redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"default": {"ondemand_in_flight": 3}})
    statuses = race([lambda: ondemand(a, {"pool1": 1})] * THREADS)
    assert statuses == [201] * 3 + [429] * (THREADS - 3)
    assert len(a.redis.keys(schema.odrequest("*"))) == 3


def test_concurrent_checkouts_and_requests_never_exceed_vms_held_together(
        redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {"default": {"vms_held": 10}}, vms=THREADS)
    calls = [lambda: checkout(a, {"pool1": 1}), lambda: ondemand(a, {"pool2": 1})]
    statuses = race(calls * (THREADS // 2))
    assert statuses.count(429) == THREADS - 10
    held = a.redis.scard(schema.running("pool1")) + len(a.redis.keys(schema.odrequest("*")))
    assert held == 10
    [usage] = UserQuotaStore(a.redis).usage()
    assert (usage.user, usage.vms_held) == ("alice", 10)
