"""Migration at checkout (reference §4.9; the vSphere provider's ``migrate_vm`` contract)
through real actors, a real redis-server and the dummy provider, on a fake clock.

The core keeps the count of migrations in flight in ``vmpooler__migration`` (one script:
check and add together) and writes what the provider reports on the VM's hash."""

from __future__ import annotations

import redis

from tests.harness import make_config, pool, started, wait_until
from vmpooler.actors.storage import schema


def migrate(h: object, redis_client: redis.Redis, vm: str) -> dict[str, str]:
    redis_client.sadd(schema.migrating("a"), vm)
    h.system.notify("a", "checked out")  # type: ignore[attr-defined]
    wait_until(lambda: "host" in redis_client.hgetall(schema.vm(vm)), 5, "the host recorded")
    h.quiesce()  # type: ignore[attr-defined]
    return redis_client.hgetall(schema.vm(vm))


def test_without_migration_limit_the_host_is_only_recorded(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1)])
    with started(redis_client, config, migratevm_couldmove_percent=100) as h:
        (vm,) = h.wait_full("a", 1)
        h.checkout("a", vm)
        fields = migrate(h, redis_client, vm)
        assert fields["host"] == "HOST1"
        assert "migrated" not in fields
        assert h.metrics.counts("migrate_from", host="HOST1") == 0


def test_a_move_is_recorded_and_its_slot_given_back(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1)], migration_limit=2)
    with started(redis_client, config, migratevm_couldmove_percent=100) as h:
        (vm,) = h.wait_full("a", 1)
        h.checkout("a", vm)
        fields = migrate(h, redis_client, vm)
        assert fields["host"] != "HOST1"
        assert fields["migrated"] == "true"
        assert float(fields["migration_time"]) >= 0
        assert float(fields["checkout_to_migration"]) >= 0
        assert h.metrics.counts("migrate_from", host="HOST1") == 1
        assert h.metrics.counts("migrate_to", host=fields["host"]) == 1
        assert redis_client.scard(schema.migration()) == 0
        assert h.provider.get_vm("a", vm).host == fields["host"]  # type: ignore[union-attr]


def test_at_the_limit_no_move_is_evaluated(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1)], migration_limit=1)
    with started(redis_client, config, migratevm_couldmove_percent=100) as h:
        (vm,) = h.wait_full("a", 1)
        h.checkout("a", vm)
        redis_client.sadd(schema.migration(), "someone-else")  # the one slot is taken
        fields = migrate(h, redis_client, vm)
        assert fields["host"] == "HOST1"
        assert "migrated" not in fields
        assert redis_client.smembers(schema.migration()) == {"someone-else"}


def test_concurrent_reservations_never_exceed_the_limit(redis_client: redis.Redis) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from vmpooler.actors.storage.provider_store import ProviderStore

    store = ProviderStore(redis_client)
    with ThreadPoolExecutor(max_workers=8) as workers:
        granted = list(workers.map(lambda n: store.reserve_migration(f"vm{n}", 3), range(40)))
    assert sum(granted) == 3
    assert redis_client.scard(schema.migration()) == 3
    winner = next(f"vm{n}" for n, ok in enumerate(granted) if ok)
    assert store.reserve_migration(winner, 3)  # asking again for a VM that holds one: yes
    store.release_migration(winner)
    assert store.reserve_migration("late", 3)
