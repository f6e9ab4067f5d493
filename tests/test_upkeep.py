"""The housekeeper on a fake clock: auto-purge of stale queue entries (and its dry run), the
queue health check written as vmpooler writes it, and dead letters of every kind.

A pool is seeded with VMs of known ages, in Redis and in the dummy's inventory. Destroys
are held by a gate (the dummy's ``sleep``), so VMs sent to completed stay visible, and
the pool's own timeouts are set far out, so only the purge can move the stale VMs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pykka
import pytest
import redis

from tests.harness import Harness, context_for, make_config, pool, started, wait_until
from vmpooler.actors.messages import RunPurge
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.service.queue_health import health_status
from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.check_stamps import stamp_fields
from vmpooler.actors.storage.dlq_store import parse_member
from vmpooler.providers.dummy import DummyProvider

START = FakeClock().now()
HOUR = 3600.0
FAR = 10**6  # minutes: the pool's own pending timeout and ready TTL never fire


class Gate:
    """The dummy's ``sleep``: a destroy waits until the test opens the gate."""

    def __init__(self) -> None:
        self.open = threading.Event()

    def __call__(self, _seconds: float) -> None:
        self.open.wait(timeout=30)


def _vm(name: str, state: str = "RUNNING", ready: bool = True) -> dict[str, Any]:
    return {"name": name, "hostname": name, "template": "a", "poolname": "a",
            "dummy_state": state, "ready": ready, "powerstate": "PoweredOn", "snapshots": [],
            "disks": []}


def seed(client: redis.Redis) -> list[dict[str, Any]]:
    """Stale and fresh VMs in every queue of pool ``a``, plus an orphaned hash; returns the
    dummy inventory holding the queued ones."""
    def stamp(age: float) -> str:
        return timefmt.format_epoch(START - age)

    def hset(vm: str, **fields: str) -> None:
        client.hset(schema.vm(vm), mapping={"pool": "a", "template": "a", **fields})

    for vm, age in (("pend-old", 3 * HOUR), ("pend-new", 60)):
        client.sadd(schema.pending("a"), vm)
        hset(vm, clone=stamp(age))
    for vm, age in (("ready-old", 25 * HOUR), ("ready-new", 60)):
        client.sadd(schema.ready("a"), vm)
        # checked just now by an earlier run of ours (a foreign stamp would stop the start)
        hset(vm, clone=stamp(age + 60), ready=stamp(age),
             **stamp_fields("earlier-run", stamp(0)))
    for vm in ("done-old", "done-new"):
        client.sadd(schema.completed("a"), vm)
        hset(vm, clone=stamp(HOUR), checkout=stamp(60))
    hset("lost-old", clone=stamp(25 * HOUR))  # in no queue: orphaned
    hset("lost-new", clone=stamp(HOUR))
    return [_vm("pend-old", "CLONING", False), _vm("pend-new", "CLONING", False),
            _vm("ready-old"), _vm("ready-new"), _vm("done-old"), _vm("done-new")]


def settle(h: Harness) -> None:
    """Wait until every actor has handled its mail (held destroys keep running)."""
    for _ in range(3):
        for name in h.system.directory.names():
            ref = h.system.actor_ref(name)
            if ref is not None:
                with contextlib.suppress(pykka.ActorDeadError):
                    ref.ask("ping", timeout=10)


def advance(h: Harness, seconds: float, step: float) -> None:
    while seconds > 0:
        settle(h)
        h.clock.advance(min(step, seconds))
        seconds -= step
    settle(h)


@contextmanager
def seeded(client: redis.Redis, **settings: Any) -> Iterator[tuple[Harness, Gate]]:
    settings.setdefault("provider_call_timeout", 10**6)
    config = make_config([pool("a", 2, timeout=FAR, ready_ttl=FAR)], check_loop_delay_min=60,
                         check_loop_delay_max=60, **settings)
    inventory = seed(client)
    gate = Gate()
    provider = DummyProvider(
        context_for(config, {"initial_state": {"pool": {"a": inventory}},
                             "destroyvm_max_time": 1}),
        rng=random.Random(1), sleep=gate)
    try:
        with started(client, config, provider=provider) as h:
            yield h, gate
    finally:
        gate.open.set()


def test_purge_moves_stale_vms_and_expires_orphans(redis_client: redis.Redis) -> None:
    with seeded(redis_client, purge_enabled=True, dlq_enabled=True, purge_interval=HOUR,
                max_completed_age=HOUR / 2) as (h, _gate):
        wait_until(lambda: h.metrics.last_gauge("vmpooler_purge.total.count") is not None,
                   10, "the first purge round")
        settle(h)
        c = redis_client
        assert not c.sismember(schema.pending("a"), "pend-old")
        assert not c.sismember(schema.ready("a"), "ready-old")
        assert c.sismember(schema.completed("a"), "pend-old")
        assert c.sismember(schema.completed("a"), "ready-old")
        assert c.sismember(schema.pending("a"), "pend-new")
        assert c.sismember(schema.ready("a"), "ready-new")
        assert 0 < c.ttl(schema.vm("lost-old")) <= 3600
        assert c.ttl(schema.vm("lost-new")) == -1
        assert h.metrics.counts("vmpooler_purge.pending.count", pool="a") == 1
        assert h.metrics.counts("vmpooler_purge.ready.count", pool="a") == 1
        assert h.metrics.counts("vmpooler_purge.orphaned.count") == 1
        assert h.metrics.last_gauge("vmpooler_purge.total.count") == 3
        (member,) = c.zrange(schema.dlq("pending"), 0, -1)
        entry = parse_member("pending", member)
        assert (entry.vm, entry.pool, entry.error_class) == ("pend-old", "a", "Purge")
        assert entry.error_message == "Stale pending VM (age: 10800s > max: 7200s)"
        assert h.metrics.counts("vmpooler_dlq.pending.count") == 0  # purges are not counted

        # The completed VMs' destroys hang; by the next round they are stale too.
        assert c.sismember(schema.completed("a"), "done-old")
        advance(h, HOUR, step=600)
        wait_until(lambda: h.metrics.counts("vmpooler_purge.completed.count", pool="a") >= 4,
                   10, "the stale completed VMs to be purged")
        orphan_ttl = c.pttl(schema.vm("lost-old"))
        h.system.actor_ref("housekeeping").tell(RunPurge())  # type: ignore[union-attr]
        settle(h)
        assert c.pttl(schema.vm("lost-old")) <= orphan_ttl, "a purge postponed the expiry"


def test_a_pool_held_elsewhere_answers_the_round_and_purges_nothing(
        redis_client: redis.Redis) -> None:
    """A pool whose lease is held by another manager (here a foreign holder that is in no
    heartbeat, so this manager keeps waiting for its lease) is not purged here, and its
    actor still answers: the round ends, with the orphan alone. Without the answer the
    round never ended (its gauge never came until the next interval)."""
    redis_client.set(schema.lease("pool", "a"), "99 elsewhere:1:1", px=600_000)
    with seeded(redis_client, purge_enabled=True, purge_interval=HOUR) as (h, _gate):
        wait_until(lambda: h.metrics.last_gauge("vmpooler_purge.total.count") is not None,
                   10, "the first purge round")
        settle(h)
        assert h.metrics.last_gauge("vmpooler_purge.total.count") == 1  # lost-old
        assert redis_client.sismember(schema.pending("a"), "pend-old")
        assert redis_client.sismember(schema.ready("a"), "ready-old")


def test_dry_run_changes_nothing_and_counts(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="vmpooler")
    with seeded(redis_client, purge_enabled=True, purge_dry_run=True, dlq_enabled=True) as (
            h, _gate):
        wait_until(lambda: h.metrics.last_gauge("vmpooler_purge.total.count") is not None,
                   10, "the first purge round")
        settle(h)
        c = redis_client
        assert c.sismember(schema.pending("a"), "pend-old")
        assert c.sismember(schema.ready("a"), "ready-old")
        assert c.ttl(schema.vm("lost-old")) == -1
        assert not c.exists(schema.dlq("pending"))
        assert h.metrics.last_gauge("vmpooler_purge.total.count") == 3
        assert h.metrics.counts("vmpooler_purge.pending.count") == 0
        lines = [r.getMessage() for r in caplog.records if "[dry-run]" in r.getMessage()]
        assert any("would purge stale pending VM 'pend-old'" in line for line in lines)
        assert any("would purge stale ready VM 'ready-old'" in line for line in lines)
        assert any("orphaned metadata of 'lost-old'" in line for line in lines)


def test_purge_runs_every_interval_and_not_when_disabled(redis_client: redis.Redis) -> None:
    with seeded(redis_client, purge_enabled=True, purge_dry_run=True,
                purge_interval=600) as (h, _gate):
        wait_until(lambda: h.metrics.values("gauge", "vmpooler_purge.total.count"), 10)
        advance(h, 1800, step=300)
        wait_until(lambda: len(h.metrics.values("gauge", "vmpooler_purge.total.count")) >= 4,
                   10, "a purge every 600 s")
    redis_client.flushall()
    with seeded(redis_client) as (h, _gate):
        advance(h, 2 * HOUR, step=600)
        assert not h.metrics.values("gauge", "vmpooler_purge.total.count")
        assert redis_client.sismember(schema.pending("a"), "pend-old")
        assert not redis_client.exists(schema.health())


def test_health_check_writes_vmpooler_health(redis_client: redis.Redis) -> None:
    thresholds = {"pending_queue_max": 1, "stuck_vm_age_threshold": 3600}
    redis_client.zadd(schema.dlq("clone"), {"x:1:{}": 1})
    with seeded(redis_client, health_check_enabled=True, health_check_interval=300,
                dlq_enabled=True, health_thresholds=thresholds_of(thresholds)) as (h, _gate):
        wait_until(lambda: redis_client.exists(schema.health()), 10, "vmpooler__health")
        settle(h)
        first = redis_client.hgetall(schema.health())
        assert set(first) == {"metrics", "status", "last_check"}
        assert 0 < redis_client.ttl(schema.health()) <= 3600
        assert timefmt.parse_epoch(first["last_check"]) == int(h.clock.now())
        metrics = json.loads(first["metrics"])
        pool_a = metrics["queues"]["a"]
        assert pool_a["pending"] == {"size": 2, "oldest_age": 10800, "avg_age": 5430,
                                     "stuck_count": 1}
        assert pool_a["ready"] == {"size": 2, "oldest_age": 90000, "avg_age": 45030}
        assert pool_a["completed"] == {"size": 2}
        assert metrics["queues"]["dlq"] == {"clone": {"size": 1}}
        assert metrics["errors"] == {"dlq_total_size": 1, "stuck_vm_count": 1,
                                     "orphaned_metadata_count": 2}
        assert list(metrics) == ["queues", "tasks", "errors"]
        assert first["metrics"] == json.dumps(metrics, separators=(",", ":"))
        # 2 pending > pending_queue_max 1 (but not > 2): degraded
        assert first["status"] == "degraded"
        assert h.metrics.last_gauge("vmpooler_health.status") == 1
        assert h.metrics.last_gauge("vmpooler_health.queue.pending.size", pool="a") == 2
        assert h.metrics.last_gauge("vmpooler_health.dlq.size", queue="clone") == 1
        assert h.metrics.last_gauge("vmpooler_health.orphaned_metadata.count") == 2
        advance(h, 300, step=300)
        wait_until(lambda: timefmt.parse_epoch(redis_client.hget(schema.health(), "last_check"))
                   == int(h.clock.now()), 10, "the next health check")
        assert len(h.metrics.values("gauge", "vmpooler_health.status")) == 2


def thresholds_of(given: dict[str, float]) -> dict[str, float]:
    from vmpooler.actors.config.model import DEFAULT_HEALTH_THRESHOLDS

    return {**DEFAULT_HEALTH_THRESHOLDS, **given}


def test_health_status_rules() -> None:
    t = thresholds_of({})

    def doc(dlq: int = 0, stuck: int = 0, pending: int = 0, ready: int = 0) -> dict[str, Any]:
        return {"queues": {"p": {"pending": {"size": pending}, "ready": {"size": ready}}},
                "errors": {"dlq_total_size": dlq, "stuck_vm_count": stuck}}

    assert health_status(doc(), t) == "healthy"
    assert health_status(doc(dlq=101), t) == "degraded"
    assert health_status(doc(dlq=1001), t) == "unhealthy"
    assert health_status(doc(stuck=11), t) == "degraded"
    assert health_status(doc(stuck=51), t) == "unhealthy"
    assert health_status(doc(pending=101), t) == "degraded"
    assert health_status(doc(pending=201), t) == "unhealthy"
    assert health_status(doc(ready=501), t) == "degraded"
    assert health_status(doc(ready=1001), t) == "unhealthy"
    assert health_status(doc(ready=500, pending=100, dlq=100, stuck=10), t) == "healthy"
