"""Leases with fencing tokens (actors/storage/lease_store.py) and the fence of the pool
scripts (actors/storage/store.py, upkeep_store.py), on a real Redis."""

from __future__ import annotations

import pytest
import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.lease_store import Fenced, Lease, LeaseStore
from vmpooler.actors.storage.store import FENCED_SCRIPTS, STANDALONE, Store
from vmpooler.actors.storage.upkeep_store import UpkeepStore


class _Holding:
    """A fence over one pool's lease, holding whatever the test sets."""

    def __init__(self, pool: str) -> None:
        self.key = schema.lease("pool", pool)
        self.value: str | None = None

    def held(self) -> str | None:
        return self.value


def test_acquire_renew_release(redis_client: redis.Redis) -> None:
    leases = LeaseStore(redis_client)
    first = leases.acquire("pool", "p", "a:1:1", ttl=30)
    assert first.ours and first.taken and first.lease.holder == "a:1:1"
    again = leases.acquire("pool", "p", "a:1:1", ttl=30)
    assert again.ours and not again.taken and again.lease == first.lease
    other = leases.acquire("pool", "p", "b:2:2", ttl=30)
    assert not other.ours and other.lease == first.lease and 0 < other.ttl_ms <= 30_000
    assert not leases.renew(Lease(first.lease.key, first.lease.token, "b:2:2"), ttl=30)
    assert leases.renew(first.lease, ttl=60)
    assert 30_000 < redis_client.pttl(first.lease.key) <= 60_000
    assert not leases.release(Lease(first.lease.key, first.lease.token + 1, "a:1:1"))
    assert leases.release(first.lease)
    assert leases.holder("pool", "p") is None
    taken = leases.acquire("pool", "p", "b:2:2", ttl=30)
    assert taken.ours and taken.taken and taken.lease.token > first.lease.token
    assert leases.holders("pool", ["p", "q"]) == {"p": taken.lease, "q": None}


def test_an_expired_lease_is_taken_with_a_larger_token(redis_client: redis.Redis) -> None:
    leases = LeaseStore(redis_client)
    first = leases.acquire("pool", "p", "a:1:1", ttl=30).lease
    redis_client.delete(first.key)  # what the expiry does
    assert not leases.renew(first, ttl=30)
    second = leases.acquire("pool", "p", "b:2:2", ttl=30)
    assert second.taken and second.lease.token > first.token
    assert not leases.release(first)
    assert leases.holder("pool", "p") == second.lease


def _transitions(store: Store) -> list[tuple[str, object]]:
    """One call of every fenced transition, on pool ``p`` and VM ``vm1`` (in completed)."""
    return [
        ("START_CLONE", lambda: store.reserve_clone("p", "vm2", limit=5, clone_time="t",
                                                     domain=None)),
        ("MARK_READY", lambda: store.mark_ready("p", "vm1", now="t", boot_seconds=1, date="d")),
        ("RETIRE", lambda: store.retire("p", "vm1", "ready")),
        ("BEGIN_DESTROY", lambda: store.begin_destroy("p", "vm1", now="t", ttl=60)),
        ("FORGET", lambda: store.forget("p", "vm1", delete_hash=True)),
        ("DISCOVER", lambda: store.discover("p", ["stray"])),
        ("RESOLVE_DISCOVERED", lambda: store.resolve_discovered("p", "vm1")),
        ("DRAIN", lambda: store.drain("p")),
        ("SET_FIELDS", lambda: store.set_vm_fields("vm1", {"open_socket_error": "x"})),
        ("SET_FIELDS", lambda: store.set_check_times({"vm1": "t"})),
        ("SET_REMOVE", lambda: store.leave_migrating("p", "vm1")),
        ("SET_FLAG", lambda: store.set_empty_flag("p", True)),
        ("CLONE_SUCCEEDED", lambda: store.clone_succeeded("p", "vm1", seconds=1, ip="i",
                                                          date="d")),
        ("CLONE_FAILED", lambda: store.clone_failed("p", "vm1", error="e", error_class="E",
                                                    ttl=60, release_slot=True)),
    ]


SLOTS = schema.tasks_clone_slots(STANDALONE)
SLOT_KEYS = (schema.tasks_clone(), SLOTS)


def _seed(client: redis.Redis) -> None:
    client.flushdb()
    client.sadd(schema.completed("p"), "vm1")
    client.sadd(schema.migrating("p"), "vm1")
    client.hset(schema.vm("vm1"), mapping={"clone": "t", "pool": "p"})
    client.set(schema.tasks_clone(), 2)
    client.sadd(SLOTS, "vm1", "vm0")  # the two slots: vm1's is given back by its answer


def test_every_fenced_write_is_refused_without_the_lease(redis_client: redis.Redis) -> None:
    fence = _Holding("p")
    store = Store(redis_client).with_fence(fence)
    covered = set()
    for name, call in _transitions(store):
        covered.add(name)
        for held in (None, "7 someone:else:1"):
            _seed(redis_client)
            redis_client.set(fence.key, "8 owner:1:1")
            before = {k: (redis_client.type(k), redis_client.dump(k))
                      for k in redis_client.keys("vmpooler__*") if k not in SLOT_KEYS}
            fence.value = held
            with pytest.raises(Fenced):
                call()  # type: ignore[operator]
            after = {k: (redis_client.type(k), redis_client.dump(k))
                     for k in redis_client.keys("vmpooler__*") if k not in SLOT_KEYS}
            assert after == before, name
            # A refused clone answer still gives its slot back; nothing else touches it.
            slots = 1 if name in ("CLONE_SUCCEEDED", "CLONE_FAILED") else 2
            assert int(redis_client.get(schema.tasks_clone())) == slots, name
            assert redis_client.scard(SLOTS) == slots, name
    assert covered == set(FENCED_SCRIPTS)


def test_fenced_writes_apply_while_the_lease_is_held(redis_client: redis.Redis) -> None:
    fence = _Holding("p")
    fence.value = "8 owner:1:1"
    fenced_store = Store(redis_client).with_fence(fence)
    plain = Store(redis_client)
    for index, (name, call) in enumerate(_transitions(fenced_store)):
        _seed(redis_client)
        redis_client.set(fence.key, fence.value)
        fenced_result = call()  # type: ignore[operator]
        fenced_dump = {k: redis_client.dump(k) for k in redis_client.keys("vmpooler__*")
                       if k != fence.key}
        _seed(redis_client)
        plain_result = _transitions(plain)[index][1]()  # type: ignore[operator]
        plain_dump = {k: redis_client.dump(k) for k in redis_client.keys("vmpooler__*")}
        assert fenced_result == plain_result, name
        assert fenced_dump == plain_dump, name


def test_the_purge_is_fenced(redis_client: redis.Redis) -> None:
    fence = _Holding("p")
    upkeep = UpkeepStore(redis_client).with_fence(fence)
    _seed(redis_client)
    redis_client.set(fence.key, "8 owner:1:1")
    fence.value = "7 owner:1:1"
    with pytest.raises(Fenced):
        upkeep.purge_completed("p", "vm1", ttl=60)
    assert redis_client.sismember(schema.completed("p"), "vm1")
    fence.value = "8 owner:1:1"
    assert upkeep.purge_completed("p", "vm1", ttl=60)
    assert not redis_client.sismember(schema.completed("p"), "vm1")
