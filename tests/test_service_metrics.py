"""Service-level metrics (docs/architecture.md, "Service-level metrics"): warm-hit ratio,
on-demand time to ready and outcome, clone queue wait, clone outcome, VMs lost by reason.

Driven through real actors over a real redis-server on a fake clock, with recording metrics;
the checkout counters through the Falcon app in-process.
"""

from __future__ import annotations

import redis

from tests.api_harness import api, api_config, api_pool
from tests.harness import make_config, pool, started, wait_until
from tests.test_ondemand import gated, status
from vmpooler.actors.messages import RequestSlotFreed
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.storage import schema
from vmpooler.providers.errors import TransientProviderError


def queue_waits(metrics: RecordingMetrics, kind: str, **tags: str) -> list[float]:
    """``clone.queue_wait`` timings of ``kind`` (``timings()`` cannot take a ``kind`` tag)."""
    return [value for k, name, value, recorded in metrics.records
            if k == "timing" and name == "clone.queue_wait" and recorded.get("kind") == kind
            and all(recorded.get(t) == v for t, v in tags.items())]


# -- warm-hit ratio: checkout.success / (checkout.success + checkout.miss) --------------------
def test_checkout_counters_give_the_warm_hit_ratio_per_pool(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([
        api_pool("pool1", alias=("either", "one")), api_pool("pool2", alias=("either",)),
    ]))
    a.add_vm("pool1", "vm1")
    assert a.client.simulate_post("/api/v3/vm", json={"pool1": 1}).status_code == 200
    assert a.client.simulate_post("/api/v3/vm", json={"pool1": 1}).status_code == 503
    assert a.client.simulate_post("/api/v3/vm", json={"one": 1}).status_code == 503
    # an alias refused: every pool it maps to was tried and found empty
    assert a.client.simulate_post("/api/v3/vm", json={"either": 1}).status_code == 503
    m = a.metrics
    assert m.counts("checkout.success", pool="pool1") == 1
    assert m.counts("checkout.miss", pool="pool1") == 3
    assert m.counts("checkout.miss", pool="pool2") == 1
    assert m.counts("checkout.miss", pool="one") == m.counts("checkout.miss", pool="either") == 0
    # vmpooler's checkout.empty names what was asked for
    assert [m.counts("checkout.empty", pool=n) for n in ("pool1", "one", "either")] == [1, 1, 1]
    hits = m.counts("checkout.success", pool="pool1")
    assert hits / (hits + m.counts("checkout.miss", pool="pool1")) == 0.25


# -- on-demand: time to ready and outcome ------------------------------------------------------
def test_ondemand_time_to_ready_is_the_time_since_the_request_was_created(
    redis_client: redis.Redis,
) -> None:
    config = make_config([pool("a", 0)])
    provider = gated(config)
    with started(redis_client, config, provider=provider) as h:
        created = h.clock.now()
        rid = h.system.request_ondemand({"a": 1})
        wait_until(lambda: redis_client.scard(schema.pending("a")) == 1)
        h.advance(40)
        provider.all_ready = True
        h.system.notify("a")
        wait_until(lambda: status(redis_client, rid) == "ready")
        h.quiesce()
        assert h.metrics.timings("ondemand.time_to_ready") == [h.clock.now() - created]
        assert h.clock.now() - created == 40.0
        assert h.metrics.counts("ondemand.outcome", result="ready") == 1
        assert h.metrics.counts("ondemand.outcome") == 1


def test_ondemand_outcome_counts_failed_and_deleted_requests(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)], ondemand_request_ttl=1)
    provider = gated(config)
    with started(redis_client, config, provider=provider) as h:
        expiring = h.system.request_ondemand({"a": 1})
        deleted = h.system.request_ondemand({"a": 2})
        wait_until(lambda: redis_client.scard(schema.pending("a")) == 3)
        assert h.system.delete_ondemand(deleted)
        wait_until(lambda: status(redis_client, deleted) == "deleted")
        h.advance(61)
        assert status(redis_client, expiring) == "failed"
        h.quiesce()
        m = h.metrics
        assert m.counts("ondemand.outcome", result="deleted") == 1
        assert m.counts("ondemand.outcome", result="failed") == 1
        assert m.counts("ondemand.outcome", result="ready") == 0
        assert m.timings("ondemand.time_to_ready") == []
        # the three VMs still booting were retired unused
        assert m.counts("vm.lost", pool="a", reason="abandoned") == 3


# -- clone slots ---------------------------------------------------------------------------------
def test_pool_clone_queue_wait_is_the_time_the_slots_were_full(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)], task_limit=1)
    with started(redis_client, config) as h:
        h.quiesce()  # the manager zeroes the clone counters when it starts
        redis_client.set(schema.tasks_clone(), 1)  # another process holds the only slot
        redis_client.hset(schema.config_poolsize(), "a", "1")
        h.system.notify("a", "grown")
        h.quiesce()
        assert redis_client.scard(schema.pending("a")) + redis_client.scard(
            schema.ready("a")) == 0
        h.advance(30)
        redis_client.set(schema.tasks_clone(), 0)  # the slot is freed; the clock stays
        h.system.notify("a", "slot freed")
        h.wait_full("a", 1)
        h.quiesce()
        assert queue_waits(h.metrics, "pool", pool="a") == [30.0]
        # a clone that finds a free slot at once waited 0 s
        (vm,) = redis_client.smembers(schema.ready("a"))
        h.checkout("a", vm)
        h.system.notify("a", "checkout")
        h.wait_full("a", 1)
        h.quiesce()
        assert queue_waits(h.metrics, "pool", pool="a") == [30.0, 0.0]


def test_ondemand_clone_queue_wait_is_the_time_the_slots_were_full(
    redis_client: redis.Redis,
) -> None:
    config = make_config([pool("a", 0)], ondemand_clone_limit=1)
    provider = gated(config)
    with started(redis_client, config, provider=provider) as h:
        h.quiesce()  # the manager zeroes the clone counters when it starts
        redis_client.set(schema.tasks_ondemandclone(), 1)  # the only on-demand slot is taken
        rid = h.system.request_ondemand({"a": 1})
        h.advance(20)
        assert redis_client.scard(schema.pending("a")) == 0
        redis_client.set(schema.tasks_ondemandclone(), 0)
        h.system.actor_ref("ondemand").tell(RequestSlotFreed())
        wait_until(lambda: redis_client.scard(schema.pending("a")) == 1)
        h.quiesce()
        assert queue_waits(h.metrics, "ondemand", pool="a") == [20.0]
        assert queue_waits(h.metrics, "pool") == []
        assert status(redis_client, rid) is None


# -- clone outcome -------------------------------------------------------------------------------
def test_clone_outcome_counts_each_finished_clone(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 2)])
    provider = gated(config)
    provider.all_ready = True
    provider.fail_next.append(TransientProviderError("datastore full"))
    with started(redis_client, config, provider=provider) as h:
        wait_until(lambda: len(provider.created) >= 2)
        h.advance(10)  # past the clone back-off
        h.wait_full("a", 2)
        h.quiesce()
        m = h.metrics
        assert m.counts("clone.outcome", pool="a", provider="dummy", result="failure") == 1
        assert m.counts("clone.outcome", pool="a", provider="dummy", result="success") == 2
        assert m.counts("clone.outcome") == len(provider.created) == 3
        assert m.counts("vm.lost", pool="a", reason="clone_failed") == 1


# -- VMs lost ------------------------------------------------------------------------------------
def test_vm_lost_counts_ready_vms_expired_drained_and_surplus(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 2, ready_ttl=10)], vm_checktime=1)
    with started(redis_client, config) as h:
        h.wait_full("a", 2)
        h.advance(11 * 60, step=30)
        h.wait_full("a", 2)
        h.quiesce()
        assert h.metrics.counts("vm.lost", pool="a", reason="ready_ttl") == 2
        redis_client.sadd(schema.poolreset(), "a")
        h.system.notify("a", "reset")
        wait_until(lambda: h.metrics.counts("vm.lost", reason="drained") == 2)
        h.wait_full("a", 2)
        h.quiesce()
        redis_client.hset(schema.config_poolsize(), "a", "1")
        h.system.notify("a", "shrink")
        wait_until(lambda: h.metrics.counts("vm.lost", pool="a", reason="excess") == 1)
        h.wait_full("a", 1)
        h.quiesce()
        lost = {r[3]["reason"] for r in h.metrics.records if r[1] == "vm.lost"}
        assert lost == {"ready_ttl", "drained", "excess"}
        # checked-out VMs are not lost when they are reaped
        (vm,) = redis_client.smembers(schema.ready("a"))
        before = h.metrics.counts("vm.lost")
        h.checkout("a", vm)
        redis_client.hdel(schema.active("a"), vm)
        h.advance(70, step=10)
        wait_until(lambda: redis_client.sismember(schema.completed("a"), vm)
                   or not redis_client.exists(schema.vm(vm)) or redis_client.hget(
                       schema.vm(vm), "destroy"))
        h.quiesce()
        assert h.metrics.counts("vm.lost") == before


def test_vm_lost_counts_pending_timeouts(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1, timeout=2, timeout_notification=1)],
                         check_loop_delay_min=10, check_loop_delay_max=10)
    with started(redis_client, config, vmready_fail_percent=100) as h:
        wait_until(lambda: redis_client.scard(schema.pending("a")) == 1)
        (vm,) = redis_client.smembers(schema.pending("a"))
        h.advance(130, step=10)
        wait_until(lambda: not redis_client.sismember(schema.pending("a"), vm))
        h.quiesce()
        assert h.metrics.counts("vm.lost", pool="a", reason="pending_timeout") >= 1
        assert h.metrics.counts("vm.lost", pool="a", reason="pending_timeout") == (
            h.metrics.counts("vmpooler_errors.markedasfailed", pool="a"))
