"""Every transition of the pooled VM lifecycle (reference §2.3), on a real redis-server.

Each script is a compare-and-set: these tests check both that it applies from the right
state and that it writes nothing from a wrong one.
"""

from __future__ import annotations

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.store import CloneReservation, Store

POOL = "debian"


def queues_of(client: redis.Redis, vm: str) -> list[str]:
    return [
        q for q in ("pending", "ready", "running", "completed", "discovered")
        if client.sismember(getattr(schema, q)(POOL), vm)
    ]


def test_reserve_clone_takes_slot_name_and_pending(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    code = store.reserve_clone(POOL, "vm1", limit=2, clone_time="2024-05-01 13:02:11 +0000",
                               domain="example.com")
    assert code == CloneReservation.RESERVED
    assert queues_of(redis_client, "vm1") == ["pending"]
    assert redis_client.hgetall(schema.vm("vm1")) == {
        "clone": "2024-05-01 13:02:11 +0000", "template": POOL, "pool": POOL,
        "domain": "example.com",
    }
    assert redis_client.get(schema.tasks_clone()) == "1"


def test_reserve_clone_refuses_taken_name_and_full_slots(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    assert store.reserve_clone(POOL, "vm1", limit=2, clone_time="t", domain=None) == 1
    assert store.reserve_clone(POOL, "vm1", limit=2, clone_time="t", domain=None) == -1
    assert store.reserve_clone(POOL, "vm2", limit=2, clone_time="t", domain=None) == 1
    assert store.reserve_clone(POOL, "vm3", limit=2, clone_time="t", domain=None) == 0
    assert not redis_client.exists(schema.vm("vm3"))
    assert redis_client.get(schema.tasks_clone()) == "2"


def test_clone_success_releases_slot_and_records(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    store.reserve_clone(POOL, "vm1", limit=5, clone_time="t", domain=None)
    store.clone_succeeded(POOL, "vm1", seconds=3.5, ip="10.0.0.1", date="2024-05-01")
    assert redis_client.get(schema.tasks_clone()) == "0"
    assert redis_client.hget(schema.vm("vm1"), "ip") == "10.0.0.1"
    assert redis_client.hget(schema.clone_stats("2024-05-01"), f"{POOL}:vm1") == "3.50"
    store.clone_succeeded(POOL, "vm1", seconds=1, ip="x", date="2024-05-01")
    assert redis_client.get(schema.tasks_clone()) == "0", "the counter never goes negative"


def test_clone_failure_leaves_pending_and_expires_hash(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    store.reserve_clone(POOL, "vm1", limit=5, clone_time="t", domain=None)
    assert store.clone_failed(POOL, "vm1", error="boom", error_class="RuntimeError", ttl=60,
                              release_slot=True)
    assert queues_of(redis_client, "vm1") == []
    assert redis_client.hget(schema.vm("vm1"), "clone_error") == "boom"
    assert 0 < redis_client.ttl(schema.vm("vm1")) <= 60
    assert redis_client.get(schema.tasks_clone()) == "0"


def test_pending_to_ready_only_from_pending(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    redis_client.sadd(schema.pending(POOL), "vm1")
    assert store.mark_ready(POOL, "vm1", now="now", boot_seconds=12.0, date="2024-05-01")
    assert queues_of(redis_client, "vm1") == ["ready"]
    assert redis_client.hget(schema.vm("vm1"), "ready") == "now"
    assert redis_client.hget(schema.boot_stats("2024-05-01"), f"{POOL}:vm1") == "12.00"
    assert redis_client.hget(schema.lastboot(), POOL) == "now"
    # A second (late) answer, or one for a VM that was drained meanwhile, changes nothing.
    redis_client.smove(schema.ready(POOL), schema.completed(POOL), "vm1")
    assert not store.mark_ready(POOL, "vm1", now="later", boot_seconds=1, date="2024-05-01")
    assert queues_of(redis_client, "vm1") == ["completed"]
    assert redis_client.hget(schema.vm("vm1"), "ready") == "now"


def test_a_request_vm_never_enters_ready(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    assert store.reserve_clone(POOL, "od1", limit=5, clone_time="t", domain=None,
                               request=("r1", "alias")) == 1
    assert redis_client.get(schema.tasks_ondemandclone()) == "1"
    assert redis_client.hget(schema.vm("od1"), "request_id") == "r1"
    assert store.mark_ready(POOL, "od1", now="now", boot_seconds=1, date="2024-05-01") == -1
    assert queues_of(redis_client, "od1") == ["pending"]
    assert store.ondemand_owners(["od1", "nobody"]) == {"od1": ("r1", "alias")}
    # Pool drains spare it: its request owns it.
    assert store.drain(POOL) == 0
    assert queues_of(redis_client, "od1") == ["pending"]


def test_retire_from_each_queue(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    for source in ("pending", "ready", "running", "discovered"):
        vm = f"vm-{source}"
        redis_client.sadd(getattr(schema, source)(POOL), vm)
        assert store.retire(POOL, vm, source)
        assert queues_of(redis_client, vm) == ["completed"]
        assert not store.retire(POOL, vm, source), "a second retire finds nothing to move"


def test_retire_does_not_touch_a_vm_that_moved(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    redis_client.sadd(schema.running(POOL), "vm1")  # checked out meanwhile
    assert not store.retire(POOL, "vm1", "ready")
    assert queues_of(redis_client, "vm1") == ["running"]


def test_destroy_then_forget(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    redis_client.sadd(schema.completed(POOL), "vm1")
    redis_client.hset(schema.active(POOL), "vm1", "t")
    redis_client.hset(schema.vm("vm1"), "pool", POOL)
    assert store.begin_destroy(POOL, "vm1", now="now", ttl=100)
    assert redis_client.hget(schema.vm("vm1"), "destroy") == "now"
    assert not redis_client.hexists(schema.active(POOL), "vm1")
    assert 0 < redis_client.ttl(schema.vm("vm1")) <= 100
    assert store.forget(POOL, "vm1", delete_hash=False)
    assert queues_of(redis_client, "vm1") == []
    assert redis_client.exists(schema.vm("vm1")), "the hash stays for data_ttl"
    assert not store.begin_destroy(POOL, "vm1", now="x", ttl=1), "only completed VMs"


def test_forget_vanished_vm_deletes_hash(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    redis_client.sadd(schema.completed(POOL), "vm1")
    redis_client.hset(schema.vm("vm1"), "pool", POOL)
    assert store.forget(POOL, "vm1", delete_hash=True)
    assert not redis_client.exists(schema.vm("vm1"))


def test_discover_only_unknown_vms(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    redis_client.sadd(schema.ready(POOL), "known")
    assert store.discover(POOL, ["known", "stray"]) == ["stray"]
    assert queues_of(redis_client, "stray") == ["discovered"]
    assert store.discover(POOL, ["stray"]) == []


def test_resolve_discovered(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    redis_client.sadd(schema.discovered(POOL), "stray", "claimed")
    redis_client.sadd(schema.running(POOL), "claimed")
    assert store.resolve_discovered(POOL, "stray") == 1
    assert queues_of(redis_client, "stray") == ["completed"]
    assert store.resolve_discovered(POOL, "claimed") == 2
    assert queues_of(redis_client, "claimed") == ["running"]
    assert store.resolve_discovered(POOL, "nothing") == 0


def test_drain_moves_ready_and_pending(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    redis_client.sadd(schema.ready(POOL), "r1", "r2")
    redis_client.sadd(schema.pending(POOL), "p1")
    redis_client.sadd(schema.running(POOL), "u1")
    assert store.drain(POOL) == 3
    assert redis_client.smembers(schema.completed(POOL)) == {"r1", "r2", "p1"}
    assert queues_of(redis_client, "u1") == ["running"]


def test_drain_pending_only(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    redis_client.sadd(schema.ready(POOL), "r1")
    redis_client.sadd(schema.pending(POOL), "p1")
    assert store.drain(POOL, include_ready=False) == 1
    assert queues_of(redis_client, "r1") == ["ready"]


def test_snapshot_reads_queues_and_overrides(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    redis_client.sadd(schema.ready(POOL), "r1")
    redis_client.hset(schema.config_poolsize(), POOL, "7")
    redis_client.sadd(schema.poolreset(), POOL)
    snap = store.snapshot(POOL)
    assert snap.ready == {"r1"}
    assert snap.size_override == "7"
    assert snap.reset_requested
    assert snap.queue_of("r1") == "ready"
    assert store.ack_reset(POOL)
    assert not store.ack_reset(POOL)


def test_publish_pools_prunes_removed(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    store.publish_pools({"a": {"size": "1"}, "b": {"size": "2"}})
    assert store.publish_pools({"a": {"size": "3", "alias": "x,y"}}) == ["b"]
    assert redis_client.smembers(schema.pools()) == {"a"}
    assert redis_client.hgetall(schema.pool_hash("a")) == {"size": "3", "alias": "x,y"}
    assert not redis_client.exists(schema.pool_hash("b"))


def test_dead_letter_queue_trims_and_expires(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    for i in range(5):
        store.dlq_add("clone", f"vm{i}:{i}:{{}}", float(i), ttl=3600, max_entries=3)
    members = redis_client.zrange(schema.dlq("clone"), 0, -1)
    assert members == ["vm2:2:{}", "vm3:3:{}", "vm4:4:{}"]
    assert 0 < redis_client.ttl(schema.dlq("clone")) <= 3600
