"""Honest waits (docs/fairness.md): the queue's order played forward without changing it,
each request's position and estimated ready time, their publication in Redis and
``GET /ondemandvm/<id>`` showing them (real redis-server, fake clock)."""

from __future__ import annotations

import json
import random
import time

import redis

from tests.api_harness import api, api_config, api_pool
from tests.harness import context_for, make_config, pool, started, wait_until
from tests.test_ondemand import HeldClones
from vmpooler.actors.cluster.remote import LocalOnly
from vmpooler.actors.fairness.fair_queue import FairQueue
from vmpooler.actors.messages import RequestCloneAnswered
from vmpooler.actors.metrics.backends import NullMetrics
from vmpooler.actors.ondemand.clone_grants import CloneGrants, Grant, Want
from vmpooler.actors.ondemand.waits import WaitBoard, estimate
from vmpooler.actors.pool.wait_times import PoolWaitTimes
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.runtime.supervisor import ActorDirectory
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import RequestStore
from vmpooler.actors.storage.wait_store import PoolTimes, Wait, WaitStore

A = PoolTimes(clone=60.0, ready=80.0)


def test_order_is_the_order_of_pop_and_leaves_the_queue_alone() -> None:
    q: FairQueue[str, int] = FairQueue()
    q.extend("big", [1, 2, 3])
    q.extend("small", [9])
    q.push_front("late", 7)
    seen = list(q.order())
    assert len(q) == 5 and q.count("big") == 3  # untouched
    popped = []
    while (item := q.pop()) is not None:
        popped.append(item)
    assert seen == popped


def test_ahead_of_counts_what_is_handed_out_before_a_keys_next() -> None:
    q: FairQueue[str, int] = FairQueue()
    q.extend("r1", [1, 2, 3])
    q.extend("r2", [4])
    q.extend("r3", [5])
    assert [q.ahead_of(k) for k in ("r1", "r2", "r3", "none")] == [0, 1, 2, 0]
    q.pop()  # r1's first goes: r2 is next, then r3, then r1
    assert [q.ahead_of(k) for k in ("r2", "r3", "r1")] == [0, 1, 2]


def slots(client: redis.Redis, clock: FakeClock, limit: int) -> CloneGrants:
    """Clone slots whose grants go nowhere (no pool actor: every grant is left queued)."""
    return CloneGrants(store=RequestStore(client), directory=ActorDirectory(), clone_limit=limit,
                      clock=clock, metrics=NullMetrics(), remote=LocalOnly())


def test_a_queue_of_requests_gets_positions_and_estimates(redis_client: redis.Redis) -> None:
    clock = FakeClock()
    s = slots(redis_client, clock, limit=2)
    s.wants.extend("r1", [_want("a")] * 3)
    s.wants.extend("r2", [_want("a")])
    s.wants.extend("r3", [_want("a")])
    now = clock.monotonic()
    found = estimate(s, ["r1", "r2", "r3"], {"a": A}, in_use=0, now=now)
    # order r1 r2 r3 r1 r1 over two slots of 60 s: starts 0 0 60 60 120, ready 80 s after
    assert found == {"r1": (0, now + 200), "r2": (1, now + 80), "r3": (2, now + 140)}
    assert [s.ahead_of(r) for r in ("r1", "r2", "r3")] == [0, 1, 2]
    assert len(s.wants) == 5  # played forward, not changed


def test_busy_slots_and_clones_on_their_way_count(redis_client: redis.Redis) -> None:
    clock = FakeClock()
    s = slots(redis_client, clock, limit=1)
    now = clock.monotonic()
    s.cloning["r0"] = [("a", now - 40)]  # its clone ends in 20 s, its VM is ready in 40 s
    s.wants.extend("r1", [_want("a")])
    found = estimate(s, ["r0", "r1"], {"a": A}, in_use=1, now=now)
    assert found == {"r0": (0, now + 40), "r1": (0, now + 20 + 80)}
    # slots taken by clones this manager does not know of: spread over one clone time
    s.cloning.clear()
    found = estimate(s, ["r1"], {"a": A}, in_use=1, now=now)
    assert found == {"r1": (0, now + 30 + 80)}
    # a pool that published nothing: two minutes each
    found = estimate(s, ["r1"], {}, in_use=0, now=now)
    assert found == {"r1": (0, now + 120)}


def test_an_answered_grant_is_recorded_as_cloning(redis_client: redis.Redis) -> None:
    clock = FakeClock()
    s = slots(redis_client, clock, limit=1)
    s.answered(RequestCloneAnswered("r1", "a", "a", "vm1", grant=7))  # not ours: ignored
    assert s.cloning == {}
    s.known["r1"] = ""  # it asked (s.want would grant at once)
    s.granted[1] = _grant("r1")
    s.answered(RequestCloneAnswered("r1", "a", "a", "vm1", grant=1))
    assert s.cloning == {"r1": [("a", clock.monotonic())]}
    s.drop("r1")
    assert s.cloning == {}


def test_the_board_publishes_what_changed_and_deletes_what_finished(
    redis_client: redis.Redis,
) -> None:
    clock = FakeClock()
    s = slots(redis_client, clock, limit=1)
    store = WaitStore(redis_client)
    store.publish_times("a", A)
    board = WaitBoard(slots=s, store=store, clock=clock)
    s.wants.extend("r1", [_want("a")])
    s.wants.extend("r2", [_want("a")])
    board.publish(["r1", "r2"], in_use=0)
    r1, r2 = store.wait("r1"), store.wait("r2")
    assert r1 is not None and r2 is not None
    assert (r1.position, r2.position) == (0, 1)
    assert r1.ready_at == clock.now() + 80 and r2.ready_at == clock.now() + 140
    # unchanged entries are not written again
    redis_client.hset(schema.waits(), "r1", Wait(99, 0, 0).encode())
    assert board.due_in() == 1.0
    clock.advance(0.5)
    board.publish(["r1", "r2"], in_use=0)
    assert store.wait("r1") == Wait(99, 0, 0)
    s.drop("r1")  # r1 finished: its entry goes; r2 moves up
    board.publish(["r2"], in_use=0)
    assert store.wait("r1") is None
    r2 = store.wait("r2")
    assert r2 is not None and r2.position == 0
    assert 0 < redis_client.ttl(schema.waits()) <= 3600


def test_a_long_play_spaces_the_publications_out(redis_client: redis.Redis) -> None:
    """With thousands of requests queued the play takes a while: publications then wait ten
    times its duration, so the manager spends at most a tenth of its time on estimates."""
    clock = FakeClock()
    s = slots(redis_client, clock, limit=1)
    store = WaitStore(redis_client)
    store.publish_times("a", A)
    board = WaitBoard(slots=s, store=store, clock=clock)
    board.publish([], in_use=0)
    assert board.due_in() == 1.0  # a short play: once a second
    running = [f"r{n}" for n in range(6000)]  # a play of well over 0.1 s on a fast machine
    for request_id in running:
        s.wants.extend(request_id, [_want("a"), _want("a")])
    started = time.perf_counter()
    board.publish(running, in_use=0)
    took = time.perf_counter() - started
    assert board.due_in() > 1.0 and board.due_in() <= 10 * took, (board.due_in(), took)


def test_a_pool_publishes_the_medians_of_its_times(redis_client: redis.Redis) -> None:
    store = WaitStore(redis_client)
    times = PoolWaitTimes("a", store)
    times.ready("vm0", 30.0)  # no clone time yet: nothing published
    assert store.times() == {}
    for seconds in (10.0, 50.0, 20.0):
        times.cloned(seconds)
    times.ready("vm1", 40.0)
    times.ready("vm1", 400.0)  # reported again while its request takes it: counted once
    assert store.times() == {"a": PoolTimes(20.0, 35.0)}


def test_get_shows_the_published_wait_while_in_flight(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool("pool1", 0)]))
    result = a.client.simulate_post("/api/v3/ondemandvm", body=json.dumps({"pool1": 2}))
    rid = result.json["request_id"]
    body = a.client.simulate_get(f"/api/v3/ondemandvm/{rid}").json
    assert "queue_position" not in body  # not placed yet
    now = a.ctx.clock.now()
    WaitStore(redis_client).publish_waits({rid: Wait(3, now + 95.4, now)}, [])
    result = a.client.simulate_get(f"/api/v3/ondemandvm/{rid}")
    assert result.status_code == 202
    assert result.json["queue_position"] == 3
    assert result.json["estimated_ready_in"] == 95
    assert result.json["estimated_ready_at"] == "2023-11-14T22:14:55+00:00"
    assert result.json["pool1"] == {"ready": "0", "pending": "2"}
    redis_client.hset(schema.odrequest(rid), "status", "failed")
    assert "queue_position" not in a.client.simulate_get(f"/api/v3/ondemandvm/{rid}").json


def test_requests_queued_in_a_running_system_show_their_waits(
    redis_client: redis.Redis,
) -> None:
    """One clone slot held by a clone that does not end: the first request clones, the VM
    of the second or third (whichever actor asked first: their wants queue in the order they
    come) goes next, and the other waits for one VM."""
    config = make_config([pool("a", 0)], ondemand_clone_limit=1)
    provider = HeldClones(context_for(config), rng=random.Random(1), sleep=lambda _s: None)
    provider.all_ready = True
    store = WaitStore(redis_client)
    with started(redis_client, config, provider=provider) as h:
        first = h.system.request_ondemand({"a": 1})
        wait_until(lambda: redis_client.get(schema.tasks_ondemandclone()) == "1")
        second = h.system.request_ondemand({"a": 1})
        third = h.system.request_ondemand({"a": 1})

        def waits() -> dict[str, Wait | None]:
            return {r: store.wait(r) for r in (first, second, third)}

        def placed() -> bool:  # a clone in flight: the clock moves without quiescing
            h.clock.advance(0.1)  # slowly: 14 s of polls (28 s) stay under GRANT_LOST_AFTER
            found = waits()
            head = found[first]
            return all(found.values()) and head is not None and head.position == 0 and sorted(
                w.position for r, w in found.items() if w and r != first) == [0, 1]

        wait_until(placed, 14, "the three waits placed", every=0.05,
                   explain=lambda: f"waits {waits()}, fake time {h.clock.now():.1f}")
        found = waits()
        ready = sorted((w.position, w.ready_at) for r, w in found.items() if w and r != first)
        first_wait = found[first]
        assert first_wait is not None
        assert first_wait.ready_at < ready[0][1] < ready[1][1], found
        provider.go.set()
        wait_until(lambda: all(redis_client.hget(schema.odrequest(r), "status") == "ready"
                               for r in (first, second, third)), timeout=30)

        def unpublished() -> bool:  # the next publication (a second or more apart) drops them
            h.advance(1, step=1)
            return redis_client.hlen(schema.waits()) == 0

        wait_until(unpublished, 30, "the finished requests' waits removed")


def _want(pool_name: str) -> Want:
    return Want(pool_name, pool_name, 0.0)


def _grant(request_id: str) -> Grant:
    return Grant(request_id, _want("a"), 0.0)
