"""Pool ownership (actors/cluster/ownership.py): rendezvous over the live managers, the lease
taken, renewed, handed over and lost, and a pool actor that leaves a pool it does not own
alone. Real Redis; time from a FakeClock (heartbeats) and an injected monotonic (the lease)."""

from __future__ import annotations

import collections
import logging

import pytest
import redis

from tests.harness import dummy_for, make_config, pool, started, wait_until
from vmpooler.actors.cluster.lease_policy import LeasePolicy
from vmpooler.actors.cluster.ownership import (
    Ownership,
    balanced_owners,
    dead_here,
    rendezvous_owner,
)
from vmpooler.actors.messages import RunPoolCycle
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.heartbeat_store import HeartbeatStore, manager_id
from vmpooler.actors.storage.lease_store import Fenced, LeaseStore
from vmpooler.actors.storage.store import Store
from vmpooler.actors.system import PoolerSystem

POOLS = [f"pool{n}" for n in range(9)]


def test_rendezvous_spreads_pools_and_a_newcomer_moves_only_its_share() -> None:
    three = ["a:1:1", "b:2:2", "c:3:3"]
    before = {p: rendezvous_owner(three, p) for p in POOLS * 1}
    assert set(before.values()) == set(three)
    after = {p: rendezvous_owner([*three, "d:4:4"], p) for p in POOLS}
    assert all(after[p] in (before[p], "d:4:4") for p in POOLS)
    gone = {p: rendezvous_owner(["a:1:1", "b:2:2"], p) for p in POOLS}
    assert all(gone[p] == before[p] for p in POOLS if before[p] != "c:3:3")


def test_dead_here_only_for_a_missing_process_of_this_host() -> None:
    import os
    import socket
    host = socket.gethostname()
    assert not dead_here(f"{host}:{os.getpid()}:1")
    assert dead_here(f"{host}:{2**22 + 12345}:1")  # beyond pid_max
    assert not dead_here(f"elsewhere.example:{2**22 + 12345}:1")


class _Mono:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _ownership(client: redis.Redis, manager: str, pool_name: str, clock: FakeClock,
               mono: _Mono, *, busy: list[bool] | None = None) -> Ownership:
    flag = busy if busy is not None else [False]
    return Ownership(pool=pool_name, manager=manager, leases=LeaseStore(client),
                     heartbeats=HeartbeatStore(client), clock=clock, ttl=15.0, stale_after=15.0,
                     busy=lambda: flag[0], monotonic=mono)


def _two_managers_and_pool(pools: list[str]) -> tuple[str, str, str]:
    """Members a, b and a pool that a owns while b is not live but b owns once it is."""
    a, b = "host-a.example:1:1", "host-b.example:2:2"
    for name in pools:
        if rendezvous_owner([a, b], name) == b:
            return a, b, name
    raise AssertionError("no pool moves to b")


def test_take_wait_hand_over_and_fence(redis_client: redis.Redis,
                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="vmpooler.actors.cluster.ownership")
    clock, mono = FakeClock(), _Mono()
    beats = HeartbeatStore(redis_client)
    a, b, name = _two_managers_and_pool(POOLS)
    own_a = _ownership(redis_client, a, name, clock, mono)
    own_b = _ownership(redis_client, b, name, clock, mono)
    beats.beat(a, clock.now(), prune_after=60)
    assert own_a.refresh() and own_a.acting
    first = own_a.lease
    assert first is not None and own_a.held() == first.value
    store_a = Store(redis_client).with_fence(own_a)
    assert store_a.discover(name, ["vm1"]) == ["vm1"]  # the holder writes
    assert own_a.refresh()  # a renewal: same token, logged once
    assert own_a.lease == first
    assert caplog.text.count("pool owned by this manager") == 1

    beats.beat(b, clock.now(), prune_after=60)  # b joins and owns the pool
    assert not own_b.refresh()  # not released yet? a still holds it
    assert not own_a.refresh()  # a hands over: nothing in flight, released at once
    assert own_a.lease is None and redis_client.get(schema.lease("pool", name)) is None
    assert own_b.refresh()
    assert own_b.lease is not None and own_b.lease.token > first.token
    with pytest.raises(Fenced):
        store_a.discover(name, ["vm2"])  # a no longer holds: refused, nothing written
    assert not redis_client.sismember(schema.discovered(name), "vm2")
    assert "handing over" in caplog.text and "lease released" in caplog.text


def test_a_late_writer_is_refused_by_the_script(redis_client: redis.Redis) -> None:
    """The lease expires while its holder is stopped; another takes it; the holder's late
    write carries its old token and the script refuses it."""
    clock, mono = FakeClock(), _Mono()
    a, b, name = _two_managers_and_pool(POOLS)
    own_a = _ownership(redis_client, a, name, clock, mono)
    assert own_a.refresh()
    old = own_a.lease
    assert old is not None
    redis_client.delete(old.key)  # what the TTL does while a is stopped
    own_b = _ownership(redis_client, b, name, clock, mono)
    assert own_b.refresh()  # a is not live (no heartbeat): b owns it now
    store_a = Store(redis_client).with_fence(own_a)
    mono.now += 5  # young enough that a believes it still holds
    with pytest.raises(Fenced) as refused:
        store_a.set_empty_flag(name, True)
    assert refused.value.value == old.value  # the script saw the stale token
    assert not redis_client.exists(schema.empty(name))
    own_a.fenced(refused.value)
    assert own_a.lease is None


def test_a_lease_past_its_ttl_is_not_used(redis_client: redis.Redis) -> None:
    clock, mono = FakeClock(), _Mono()
    own = _ownership(redis_client, "host-a.example:1:1", "p", clock, mono)
    assert own.refresh()
    mono.now += 8  # past half the TTL: renewed before the write
    assert own.held() is not None and redis_client.pttl(schema.lease("pool", "p")) > 14_000
    redis_client.delete(schema.lease("pool", "p"))  # expired while the holder stalled
    mono.now += 16  # past the TTL without a renewal
    stale = own.held()  # the old value, so that the script refuses it
    assert stale is not None and not own.acting
    with pytest.raises(Fenced):
        Store(redis_client).with_fence(own).set_empty_flag("p", True)


def test_a_busy_holder_renews_until_its_calls_answer(redis_client: redis.Redis) -> None:
    clock, mono = FakeClock(), _Mono()
    beats = HeartbeatStore(redis_client)
    a, b, name = _two_managers_and_pool(POOLS)
    busy = [False]
    own_a = _ownership(redis_client, a, name, clock, mono, busy=busy)
    assert own_a.refresh()
    busy[0] = True  # a clone in flight
    beats.beat(b, clock.now(), prune_after=60)
    assert not own_a.refresh() and own_a.lease is not None and not own_a.acting
    mono.now += 8  # past half the TTL of handing over: released, calls or not
    assert not own_a.refresh() and own_a.lease is None


def test_a_lost_lease_is_taken_again_only_once_its_calls_answered(
        redis_client: redis.Redis) -> None:
    clock, mono = FakeClock(), _Mono()
    busy = [False]
    own = _ownership(redis_client, "host-a.example:1:1", "p", clock, mono, busy=busy)
    assert own.refresh()
    first = own.lease
    busy[0] = True  # a clone sent under the first holding
    redis_client.delete(schema.lease("pool", "p"))  # expired while the manager was stopped
    mono.now += 16
    assert not own.refresh() and own.lease is None  # its answer must meet the fence first
    busy[0] = False
    assert own.refresh() and own.lease is not None and first is not None
    assert own.lease.token > first.token


def test_a_pool_owned_by_another_manager_is_left_alone(redis_client: redis.Redis) -> None:
    config = make_config([pool(n, 1) for n in ("pa", "pb")], manager_heartbeat_interval=5)
    with started(redis_client, config) as h:
        mine = h.system.manager_id
        h.wait_full("pa", 1)
        h.wait_full("pb", 1)
        other = next(f"other-{n}.example:1:1" for n in range(1000)
                     if rendezvous_owner([mine, f"other-{n}.example:1:1"], "pa")
                     == f"other-{n}.example:1:1"
                     and rendezvous_owner([mine, f"other-{n}.example:1:1"], "pb") == mine)
        beats = HeartbeatStore(redis_client)
        beats.beat(other, h.clock.now(), prune_after=600)
        h.advance(5)  # the renewal timer: pa is handed over
        wait_until(lambda: redis_client.get(schema.lease("pool", "pa")) is None, 10,
                   "pa's lease to be released")
        stray = "stray-vm"
        h.provider._inventory.add(  # type: ignore[attr-defined]
            "pa", {"name": stray, "poolname": "pa", "hostname": stray, "dummy_state": "RUNNING"})
        h.system.notify("pa", "test")
        for _ in range(2):
            beats.beat(other, h.clock.now(), prune_after=600)  # the other manager lives on
            h.advance(5)
        assert not redis_client.sismember(schema.discovered("pa"), stray)
        assert not redis_client.sismember(schema.completed("pa"), stray)
        assert redis_client.get(schema.lease("pool", "pb")) is not None
        redis_client.zrem(schema.manager_heartbeat(), other)  # the other manager is gone
        def destroyed() -> bool:
            h.advance(5)
            return stray not in h.provider.inventory_snapshot().get("pa", [])
        wait_until(destroyed, 20, "the stray to be destroyed by pa's new owner")


def take_slot(store: Store, pool_name: str, vm: str, *, request: str = "") -> None:
    assert store.reserve_clone(pool_name, vm, limit=100, clone_time="t", domain=None,
                               request=(request, "a") if request else None) == 1


def test_clone_slots_are_kept_per_manager_and_folded_once_when_it_is_gone(
        redis_client: redis.Redis) -> None:
    """Each slot is the VM's member of its manager's slot set; folding a manager that is
    gone gives its slots back once (a late answer of its releases nothing), and the
    counters become the sum of the remaining managers' slots (a stale value is repaired,
    never zeroed under a live manager's clones)."""
    alive, dead = Store(redis_client).owned_by("alive"), Store(redis_client).owned_by("dead")
    take_slot(alive, "pa", "a1")
    take_slot(dead, "pa", "d1")
    take_slot(dead, "pb", "d2")
    take_slot(dead, "pb", "d3", request="r1")
    assert redis_client.get(schema.tasks_clone()) == "3"
    assert redis_client.get(schema.tasks_ondemandclone()) == "1"
    assert alive.slot_owners() == {"alive", "dead"}
    redis_client.set(schema.tasks_clone(), 9)  # drifted (an older build, a crash)
    assert alive.fold_slots({"dead"}) == (1, 0, 3)
    assert redis_client.get(schema.tasks_clone()) == "1"
    assert redis_client.get(schema.tasks_ondemandclone()) == "0"
    assert alive.slot_owners() == {"alive"}
    # the dead manager's clone answers after all (it was only paused): nothing released
    dead.clone_succeeded("pa", "d1", seconds=1.0, ip="", date="2026-01-01")
    dead.clone_failed("pb", "d3", error="x", error_class="E", ttl=60, release_slot=True,
                      ondemand=True)
    assert redis_client.get(schema.tasks_clone()) == "1"
    assert redis_client.get(schema.tasks_ondemandclone()) == "0"
    # the live one's answer releases its slot, once
    alive.clone_succeeded("pa", "a1", seconds=1.0, ip="", date="2026-01-01")
    assert alive.release_clone_slot("a1") == 0
    assert redis_client.get(schema.tasks_clone()) == "0"


def test_the_heartbeat_gives_back_the_slots_of_a_manager_gone(
        redis_client: redis.Redis) -> None:
    """A manager whose beat went stale while its clones were in flight (killed): a live
    manager's heartbeat folds its slots, so they are not held for good."""
    config = make_config([pool("pa", 0)], manager_heartbeat_interval=5)
    clock = FakeClock()
    HeartbeatStore(redis_client).beat("other.example:1:1", clock.now(), prune_after=600)
    theirs = Store(redis_client).owned_by("other.example:1:1")
    take_slot(theirs, "pa", "theirs")
    with started(redis_client, config) as h:
        h.quiesce()
        assert redis_client.get(schema.tasks_clone()) == "1", "a live manager's slot kept"
        h.advance(20)  # its beat is older than 3 x 5 s: gone
        wait_until(lambda: redis_client.get(schema.tasks_clone()) == "0", 10,
                   "the dead manager's slot given back")
        assert "other.example:1:1" not in theirs.slot_owners()


def test_a_starting_manager_keeps_another_managers_clone_slots(
        redis_client: redis.Redis) -> None:
    """Another live manager has a clone in flight (its slot counted, its migration
    recorded); a manager starting beside it neither zeroes the counter nor forgets the
    migration (vmpooler zeroes both at start)."""
    config = make_config([pool("pa", 0)])
    clock = FakeClock()
    HeartbeatStore(redis_client).beat("other.example:1:1", clock.now(), prune_after=600)
    take_slot(Store(redis_client).owned_by("other.example:1:1"), "pa", "theirs")
    redis_client.sadd(schema.migration(), "moving")
    with started(redis_client, config):
        assert redis_client.get(schema.tasks_clone()) == "1"
        assert redis_client.sismember(schema.migration(), "moving")


def test_a_handed_over_pool_is_taken_at_once_by_its_new_owner(
        redis_client: redis.Redis) -> None:
    """Manager A serves a pool; B joins and the pool now belongs to B. At A's renewal A hands
    it over and tells B's pool actor through the relay, which takes the lease at once: B's own
    renewal timer never fires here (its clock stands still), so without the message the pool
    would wait up to a third of the TTL with nobody acting on it."""
    start_a, start_b = 1_700_000_000.0, 1_700_000_001.0
    id_a, id_b = manager_id(start_a), manager_id(start_b)
    name = next(f"pool{n}" for n in range(100) if rendezvous_owner([id_a, id_b], f"pool{n}")
                == id_b)
    config = make_config([pool(name, 1)], manager_heartbeat_interval=5)
    clock_a, clock_b = FakeClock(start=start_a), FakeClock(start=start_b)
    a = PoolerSystem.start(config, redis_client=redis_client, clock=clock_a, scheduler=clock_a,
                           providers={"dummy": dummy_for(config)}, resolver=lambda _f: False)
    b = None
    try:
        assert a.manager_id == id_a
        wait_until(lambda: LeaseStore(redis_client).holder("pool", name) is not None, 10,
                   "A to take the pool")
        assert LeaseStore(redis_client).holder("pool", name).holder == id_a
        b = PoolerSystem.start(config, redis_client=redis_client, clock=clock_b,
                               scheduler=clock_b, providers={"dummy": dummy_for(config)},
                               resolver=lambda _f: False)
        assert b.manager_id == id_b
        clock_a.advance(5)  # A's renewal (TTL 15 s / 3): A sees B live and hands the pool over
        wait_until(lambda: (h := LeaseStore(redis_client).holder("pool", name)) is not None
                   and h.holder == id_b, 10, "B to take the pool without waiting for a timer")
    finally:
        if b is not None:
            b.stop()
        a.stop()


@pytest.mark.slow
def test_balanced_owners_give_every_manager_its_share_and_move_little() -> None:
    """Nine pools over three managers: three each, whatever the ids (plain rendezvous left
    one without a pool one time in 13); a fourth gets two or three and only pools that move
    to it change hands; a manager leaving gives away only its own pools' worth."""
    pools = [f"pool{n}" for n in range(9)]
    for run in range(200):
        three = [f"host{run}:{n}:{run}" for n in range(3)]
        before = balanced_owners(three, pools)
        assert sorted(collections.Counter(before.values()).values()) == [3, 3, 3]
        fourth = f"host{run}:9:{run}"
        after = balanced_owners([*three, fourth], pools)
        shares = collections.Counter(after.values())
        assert sorted(shares.values()) == [2, 2, 2, 3]
        assert balanced_owners(list(reversed([*three, fourth])), pools) == after
    big = [f"pool{n}" for n in range(1000)]
    three = ["a:1:1", "b:2:2", "c:3:3"]
    moved = sum(balanced_owners(three, big)[p] != balanced_owners([*three, "d:4:4"], big)[p]
                for p in big)
    assert moved <= 330, moved  # 250 is the least possible


def test_another_managers_pool_backs_off_and_hurries_once_it_becomes_ours(
        redis_client: redis.Redis) -> None:
    """A pool another live manager owns is not polled at the shortest delay all along: its
    cycle timer backs off like an idle pool's. Once it is this manager's but its lease is
    still held (the other manager died a moment ago), the timer comes back to the shortest
    delay, so the lease is taken within a second of its expiry, not a renewal period later."""
    mine = manager_id(FakeClock().now())
    other = next(f"other-{n}.example:1:1" for n in range(1000)
                 if rendezvous_owner([mine, f"other-{n}.example:1:1"], "pa")
                 == f"other-{n}.example:1:1")
    beats = HeartbeatStore(redis_client)
    beats.beat(other, FakeClock().now(), prune_after=600)
    config = make_config([pool("pa", 1)], manager_heartbeat_interval=5,
                         check_loop_delay_min=1, check_loop_delay_max=60)
    with started(redis_client, config) as h:
        assert h.system.manager_id == mine
        actor = h.system.actor_ref("pool:pa")
        assert actor is not None

        def delay() -> float:
            return float(actor.proxy().cycle.get().delay)

        for _ in range(12):
            beats.beat(other, h.clock.now(), prune_after=600)
            h.advance(5)
        assert delay() >= 30, "another manager's pool kept the shortest delay"
        assert redis_client.get(schema.lease("pool", "pa")) is None
        # The other manager dies holding the lease; its heartbeat goes stale.
        redis_client.set(schema.lease("pool", "pa"), f"999 {other}", px=30_000)
        h.advance(20)  # stale heartbeat, then a renewal tick: ours, the lease not yet free
        assert delay() == 1
        redis_client.delete(schema.lease("pool", "pa"))  # its TTL is over
        h.advance(1, step=1)
        wait_until(lambda: (lease := LeaseStore(redis_client).holder("pool", "pa")) is not None
                   and lease.holder == mine, 10, "the lease to be taken at the next second")


def test_a_pool_waiting_for_a_lease_cycles_again_when_it_expires(
        redis_client: redis.Redis) -> None:
    """The pool is this manager's but a gone holder's lease has 3 s left: the next cycle is
    due when the lease expires, not a whole check_loop_delay_min (5 s) later."""
    redis_client.set(schema.lease("pool", "pa"), "999 gone.example:1:1", px=3_000)
    config = make_config([pool("pa", 1)], check_loop_delay_min=5, check_loop_delay_max=60)
    with started(redis_client, config) as h:
        def cycles_due() -> list[float]:
            return [due for due, m in h.clock.pending() if isinstance(m, RunPoolCycle)]
        wait_until(lambda: cycles_due() and min(cycles_due()) <= 3.1, 10,
                   "a cycle due at the lease's expiry")


def test_a_dead_manager_leaves_the_rendezvous_before_its_leases_expire() -> None:
    def stale(**settings: float) -> float:
        return LeasePolicy.of(make_config([pool("a", 1)], **settings).settings).stale_after

    assert stale(manager_heartbeat_interval=5) == 10  # the TTL is 15
    assert stale(manager_heartbeat_interval=5, manager_lease_ttl=60) == 15
    assert stale(manager_heartbeat_interval=5, manager_lease_ttl=6) == 10  # two beats at least
    assert stale(manager_heartbeat_interval=5, manager_heartbeat_max_age=7) == 7
    policy = LeasePolicy.of(make_config([pool("a", 1)], manager_heartbeat_interval=4).settings)
    assert policy.ttl == 12  # three beats unless manager_lease_ttl says otherwise


def test_news_of_a_pool_reaching_a_manager_that_does_not_own_it_goes_on_to_its_owner(
        redis_client: redis.Redis) -> None:
    """The API's commands reach one manager of several. A VM of A's pool is checked out and
    B hears of it: B's pool actor passes the news to A's through the relay, and A refills at
    once. Neither clock moves, so without the message A would wait for its timer."""
    start_a, start_b = 1_700_000_000.0, 1_700_000_001.0
    id_a, id_b = manager_id(start_a), manager_id(start_b)
    name = next(f"pool{n}" for n in range(100) if rendezvous_owner([id_a, id_b], f"pool{n}")
                == id_a)
    config = make_config([pool(name, 2)], manager_heartbeat_interval=5,
                         check_loop_delay_min=60, check_loop_delay_max=60)
    clock_a, clock_b = FakeClock(start=start_a), FakeClock(start=start_b)
    a = PoolerSystem.start(config, redis_client=redis_client, clock=clock_a, scheduler=clock_a,
                           providers={"dummy": dummy_for(config)}, resolver=lambda _f: False)
    b = None
    try:
        wait_until(lambda: redis_client.scard(schema.ready(name)) == 2, 10, "A to fill it")
        b = PoolerSystem.start(config, redis_client=redis_client, clock=clock_b,
                               scheduler=clock_b, providers={"dummy": dummy_for(config)},
                               resolver=lambda _f: False)
        assert LeaseStore(redis_client).holder("pool", name).holder == id_a
        taken = redis_client.spop(schema.ready(name))
        redis_client.sadd(schema.running(name), taken)  # checked out
        assert b.notify(name, "checkout")
        wait_until(lambda: redis_client.scard(schema.ready(name)) == 2, 10,
                   "A to refill the pool at once")
    finally:
        if b is not None:
            b.stop()
        a.stop()
