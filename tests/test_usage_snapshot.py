"""UserQuotaStore.usage_snapshot over the session's real redis-server: the shared snapshot of
the users section, counted at most once per max_age whatever the number of callers (each
caller here is a separate API process as far as Redis knows: no in-process copy)."""

from __future__ import annotations

import threading

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.user_quota import UsageSnapshot, UserQuotaStore

CALLERS = 12


def add_users(client: redis.Redis, count: int, held: int = 2) -> None:
    for i in range(count):
        vms = [f"u{i}v{j}" for j in range(held + i % 3)]
        client.sadd(schema.running("pool1"), *vms)
        client.sadd(schema.quota_held(f"user{i}"), *(f"vm:pool1:{vm}" for vm in vms))
        client.hset(schema.quota_users(), f"user{i}", f"{i + 1}|5|||")


def test_concurrent_callers_on_a_stale_snapshot_count_once(redis_client: redis.Redis) -> None:
    add_users(redis_client, 50)
    stores = [UserQuotaStore(redis.Redis(connection_pool=redis_client.connection_pool))
              for _ in range(CALLERS)]
    barrier = threading.Barrier(CALLERS)
    got: list[UsageSnapshot] = []

    def call(store: UserQuotaStore) -> None:
        barrier.wait(timeout=10)
        got.append(store.usage_snapshot(1000.0, max_age=5.0, top=10))

    threads = [threading.Thread(target=call, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert [snapshot.counted for snapshot in got].count(True) == 1
    assert len({(s.at, s.users, s.vms_held, s.top) for s in got}) == 1
    assert got[0].users == 50 and len(got[0].top) == 10


def test_the_snapshot_is_counted_again_once_max_age_has_passed(
        redis_client: redis.Redis) -> None:
    store = UserQuotaStore(redis_client)
    add_users(redis_client, 3)
    first = store.usage_snapshot(100.0, max_age=5.0, top=2)
    assert first.counted and (first.users, first.vms_held) == (3, 2 + 3 + 4)
    # the most held first, at most ``top``
    assert [u.user for u in first.top] == ["user2", "user1"]
    assert [u.label for u in first.top] == [3, 2]
    redis_client.delete(schema.quota_held("user2"))
    fresh = store.usage_snapshot(104.9, max_age=5.0, top=2)
    assert not fresh.counted and fresh == UsageSnapshot(100.0, 3, 9, 0, first.top)
    again = store.usage_snapshot(105.0, max_age=5.0, top=2)
    assert again.counted and (again.at, again.users, again.vms_held) == (105.0, 2, 5)
    # a clock that went back does not keep a snapshot from the future
    assert store.usage_snapshot(90.0, max_age=5.0, top=2).counted
    assert 0 < redis_client.ttl(schema.quota_usage_snapshot()) <= 300


def test_no_users_is_an_empty_snapshot(redis_client: redis.Redis) -> None:
    snapshot = UserQuotaStore(redis_client).usage_snapshot(1.0, max_age=5.0, top=100)
    assert (snapshot.users, snapshot.vms_held, snapshot.top) == (0, 0, ())
