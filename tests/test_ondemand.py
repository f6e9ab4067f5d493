"""On-demand requests through the actor system: request actors, clone slots, the
request lifecycle of reference §2.4 (over a real redis-server, on a fake clock)."""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

import pytest
import redis

from tests.harness import (
    assert_no_vm_in_two_queues,
    context_for,
    make_config,
    pool,
    started,
    wait_until,
)
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import Entry, RequestStore
from vmpooler.actors.system import PoolerSystem
from vmpooler.providers.dummy import DummyProvider
from vmpooler.providers.errors import PermanentProviderError, TransientProviderError


def test_request_is_provisioned_and_ready(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0), pool("b", 0)])
    with started(redis_client, config) as h:
        rid = h.system.request_ondemand({"a": 2, "b": 1})
        assert rid
        wait_until(lambda: (h.system.ondemand_request(rid) or None) and
                   h.system.ondemand_request(rid).status == "ready")
        record = h.system.ondemand_request(rid)
        assert len(record.delivered[("a", "a")]) == 2
        assert len(record.delivered[("b", "b")]) == 1
        for vm in record.delivered[("a", "a")]:
            assert redis_client.sismember(schema.running("a"), vm)
            assert redis_client.hget(schema.vm(vm), "request_id") == rid
        assert not redis_client.zscore(schema.provisioning_processing(), rid)
        h.quiesce()
        assert redis_client.scard(schema.ready("a")) == 0
        assert_no_vm_in_two_queues(redis_client, "a")



@pytest.mark.parametrize("order", [{}, {"a": 0}, {"a": 0, "b": 0}, {"a": -1, "b": 2}])
def test_the_facade_refuses_a_request_for_no_vm(redis_client: redis.Redis,
                                                 order: dict[str, int]) -> None:
    config = make_config([pool("a", 0), pool("b", 0)])
    with started(redis_client, config) as h:
        with pytest.raises(ValueError):
            h.system.request_ondemand(order)
        assert not redis_client.keys(schema.odrequest("*"))


def test_the_facade_leaves_zero_counts_out(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0), pool("b", 0)])
    with started(redis_client, config) as h:
        rid = h.system.request_ondemand({"a": 0, "b": 1})
        assert rid is not None
        assert redis_client.hget(schema.odrequest(rid), "requested") == "b:b:1"

class GatedProvider(DummyProvider):
    """The dummy provider, with readiness released per VM and clone failures on demand."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.released: set[str] = set()
        self.all_ready = False
        self.fail_next: list[Exception] = []
        self.created: list[str] = []
        self.gate = threading.Lock()

    def create_vm(self, pool: str, vm: str, **kwargs: Any) -> Any:
        with self.gate:
            self.created.append(vm)
            error = self.fail_next.pop(0) if self.fail_next else None
        if error is not None:
            raise error
        return super().create_vm(pool, vm, **kwargs)

    def vm_ready(self, pool: str, vm: str) -> bool:
        with self.gate:
            allowed = self.all_ready or vm in self.released
        return allowed and super().vm_ready(pool, vm)


def gated(config: Any) -> GatedProvider:
    return GatedProvider(context_for(config), rng=random.Random(1), sleep=lambda _s: None)


def manager(config: Any, client: redis.Redis, provider: GatedProvider,
            clock: FakeClock) -> PoolerSystem:
    """A manager over ``client``; start another with the same arguments to restart it."""
    return PoolerSystem.start(config, redis_client=client, clock=clock, scheduler=clock,
                              providers={"dummy": provider}, resolver=lambda _f: False)


def status(client: redis.Redis, rid: str) -> str | None:
    return client.hget(schema.odrequest(rid), "status")


def request_vms(client: redis.Redis, rid: str) -> dict[str, str]:
    """vm -> pool of every VM cloned for the request that still has a hash."""
    found = {}
    for key in client.scan_iter(match=schema.vm("*")):
        fields = client.hgetall(key)
        if fields.get("request_id") == rid:
            found[key.removeprefix(schema.vm(""))] = fields["pool"]
    return found


def test_request_fails_at_its_ttl_and_its_vms_are_retired(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)], ondemand_request_ttl=1)
    provider = gated(config)
    with started(redis_client, config, provider=provider) as h:
        rid = h.system.request_ondemand({"a": 2})
        wait_until(lambda: redis_client.scard(schema.pending("a")) == 2)
        provider.released.add(sorted(redis_client.smembers(schema.pending("a")))[0])
        h.system.notify("a")
        wait_until(lambda: redis_client.scard(schema.running("a")) == 1)
        h.advance(61)
        assert status(redis_client, rid) == "failed"
        assert "ondemand_request_ttl" in redis_client.hget(schema.odrequest(rid), "failure_reason")
        vms = request_vms(redis_client, rid)
        assert len(vms) == 2
        assert redis_client.scard(schema.running("a")) == 0
        assert redis_client.scard(schema.pending("a")) == 0
        inventory = set(provider.inventory_snapshot().get("a", []))
        for vm in vms:  # retired: waiting for destruction, or destroyed already
            assert redis_client.sismember(schema.completed("a"), vm) or vm not in inventory
        # A late "ready" for the finished request never resurrects it nor hands the VM out.
        provider.all_ready = True
        h.advance(10)
        assert status(redis_client, rid) == "failed"
        assert redis_client.scard(schema.running("a")) == 0


def test_grace_window_lets_a_booting_vm_complete_the_request(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)], ondemand_request_ttl=1, ondemand_request_grace=30)
    provider = gated(config)
    with started(redis_client, config, provider=provider) as h:
        rid = h.system.request_ondemand({"a": 1})
        wait_until(lambda: redis_client.scard(schema.pending("a")) == 1)
        h.advance(61)  # past the TTL, inside the grace window
        assert status(redis_client, rid) is None
        provider.all_ready = True
        h.system.notify("a")
        wait_until(lambda: status(redis_client, rid) == "ready")


def test_grace_window_ends_in_failure(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)], ondemand_request_ttl=1, ondemand_request_grace=30)
    with started(redis_client, config, provider=gated(config)) as h:
        rid = h.system.request_ondemand({"a": 1})
        wait_until(lambda: redis_client.scard(schema.pending("a")) == 1)
        h.advance(95)
        assert status(redis_client, rid) == "failed"
        assert redis_client.scard(schema.pending("a")) == 0


def test_delete_while_provisioning_retires_every_vm(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)])
    provider = gated(config)
    with started(redis_client, config, provider=provider) as h:
        rid = h.system.request_ondemand({"a": 3})
        wait_until(lambda: redis_client.scard(schema.pending("a")) == 3)
        provider.released.add(sorted(redis_client.smembers(schema.pending("a")))[0])
        h.system.notify("a")
        wait_until(lambda: redis_client.scard(schema.running("a")) == 1)
        assert h.system.delete_ondemand(rid)
        wait_until(lambda: redis_client.scard(schema.pending("a")) == 0)
        assert status(redis_client, rid) == "deleted"
        assert redis_client.scard(schema.running("a")) == 0
        provider.all_ready = True
        h.advance(30)
        assert status(redis_client, rid) == "deleted"
        assert redis_client.scard(schema.running("a")) == 0
        assert redis_client.scard(schema.ready("a")) == 0
        wait_until(lambda: not provider.inventory_snapshot().get("a"))


def test_permanent_clone_error_fails_the_request_at_once(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)])
    provider = gated(config)
    provider.fail_next.append(PermanentProviderError("template not found"))
    with started(redis_client, config, provider=provider) as h:
        rid = h.system.request_ondemand({"a": 1})
        wait_until(lambda: status(redis_client, rid) == "failed")
        reason = redis_client.hget(schema.odrequest(rid), "failure_reason")
        assert reason.startswith("Configuration error")
        assert len(provider.created) == 1


def test_transient_clone_errors_are_retried_then_fail(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)], max_vm_retries=2)
    provider = gated(config)
    provider.fail_next.extend(TransientProviderError("busy") for _ in range(3))
    with started(redis_client, config, provider=provider) as h:
        rid = h.system.request_ondemand({"a": 1})
        wait_until(lambda: status(redis_client, rid) == "failed")
        assert redis_client.hget(schema.odrequest(rid), "failure_reason") == (
            "Max retry attempts exceeded")
        assert redis_client.hget(schema.odrequest(rid), "retry_count") == "2"
        assert len(provider.created) == 3


def test_each_failure_gets_its_own_retry(redis_client: redis.Redis) -> None:
    """vmpooler collapsed simultaneous retries of one request+pool into one task."""
    config = make_config([pool("a", 0)], max_vm_retries=3)
    provider = gated(config)
    provider.fail_next.extend(TransientProviderError("busy") for _ in range(2))
    provider.all_ready = True
    with started(redis_client, config, provider=provider) as h:
        rid = h.system.request_ondemand({"a": 3})
        wait_until(lambda: status(redis_client, rid) == "ready")
        assert redis_client.scard(schema.request_vms(rid, "a", "a")) == 3
        assert len(provider.created) == 5


def test_requests_survive_a_manager_restart(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)], ondemand_request_ttl=5)
    provider = gated(config)
    clock = FakeClock()
    first = manager(config, redis_client, provider, clock)
    try:
        rid = first.request_ondemand({"a": 2})
        wait_until(lambda: redis_client.scard(schema.pending("a")) == 2)
    finally:
        first.stop()
    assert redis_client.zscore(schema.provisioning_processing(), rid) is not None
    second = manager(config, redis_client, provider, clock)
    try:
        wait_until(lambda: second.actor_ref(f"request:{rid}") is not None)
        provider.all_ready = True
        second.notify("a")
        wait_until(lambda: status(redis_client, rid) == "ready")
        assert len(provider.created) == 2  # the rebuilt actor cloned nothing twice
    finally:
        second.stop()


def test_rebuilt_request_keeps_its_deadline(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)], ondemand_request_ttl=5)
    clock = FakeClock()
    provider = gated(config)
    first = manager(config, redis_client, provider, clock)
    try:
        rid = first.request_ondemand({"a": 1})
        wait_until(lambda: redis_client.scard(schema.pending("a")) == 1)
    finally:
        first.stop()
    clock.advance(4 * 60)  # the manager was down for four of the five minutes
    second = manager(config, redis_client, provider, clock)
    try:
        ref = wait_until(lambda: second.actor_ref(f"request:{rid}"))
        ref.ask("ping", timeout=10)  # its start-up (claim, deadline timer) is done
        clock.advance(30)
        assert status(redis_client, rid) is None
        clock.advance(31)
        wait_until(lambda: status(redis_client, rid) == "failed")
    finally:
        second.stop()


def test_small_request_is_not_starved_by_a_big_one(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0), pool("b", 0)], ondemand_clone_limit=1)
    provider = gated(config)
    provider.all_ready = True
    with started(redis_client, config, provider=provider) as h:
        with provider.gate:  # no clone ends before both requests have asked for theirs
            big = h.system.request_ondemand({"a": 8})
            small = h.system.request_ondemand({"b": 1})
            for rid in (big, small):
                wait_until(lambda r=rid: h.system.actor_ref(f"request:{r}")).ask(
                    "ping", timeout=10)  # its start-up (claim, clones asked for) is done
        wait_until(lambda: status(redis_client, small) == "ready")
        wait_until(lambda: status(redis_client, big) == "ready")
        owners = [redis_client.hget(schema.vm(vm), "request_id") for vm in provider.created]
        assert owners.index(small) <= 2, owners
        assert big in owners


def test_request_for_unconfigured_pool_fails(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)])
    with started(redis_client, config) as h:
        RequestStore(redis_client).create("r-x", [Entry("zz", "zz", 1)], created=int(h.clock.now()))
        h.system.notify_request("r-x", "created")
        wait_until(lambda: status(redis_client, "r-x") == "failed")
        assert "not configured" in redis_client.hget(schema.odrequest("r-x"), "failure_reason")


def test_request_written_by_another_process_is_found_by_the_sweep(
    redis_client: redis.Redis,
) -> None:
    config = make_config([pool("a", 0)])
    with started(redis_client, config, vmready_fail_percent=0) as h:
        h.quiesce()
        RequestStore(redis_client).create("r-y", [Entry("a", "a", 1)], created=int(h.clock.now()))
        h.advance(5)  # no command was sent: the periodic sweep finds it
        wait_until(lambda: status(redis_client, "r-y") == "ready")


def test_pool_refill_ignores_request_vms(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 2)])
    provider = gated(config)
    with started(redis_client, config, provider=provider) as h:
        h.system.request_ondemand({"a": 3})
        wait_until(lambda: redis_client.scard(schema.pending("a")) == 5)
        for vm in redis_client.smembers(schema.pending("a")):
            if not redis_client.hget(schema.vm(vm), "request_id"):
                provider.released.add(vm)
        h.system.notify("a")
        wait_until(lambda: redis_client.scard(schema.ready("a")) == 2)
        assert redis_client.scard(schema.pending("a")) == 3


def test_clone_lost_with_the_old_manager_is_retried_after_restart(
    redis_client: redis.Redis,
) -> None:
    """Like a kill -9 mid-clone: the VM is pending in Redis but the provider never made it."""
    config = make_config([pool("a", 0)], ondemand_request_ttl=5)
    provider = gated(config)
    clock = FakeClock()
    first = manager(config, redis_client, provider, clock)
    try:
        rid = first.request_ondemand({"a": 1})
        (lost,) = wait_until(lambda: redis_client.smembers(schema.pending("a")))
        # The clone's call must have returned before the stop: a worker busy with it would
        # finish it after the stop, possibly after the destroy below (a race of the test's).
        wait_until(lambda: redis_client.hget(schema.vm(lost), "clone_time"), 10, "the clone")
    finally:
        first.stop()
    provider.destroy_vm("a", lost)  # the clone died with its process
    provider.all_ready = True
    second = manager(config, redis_client, provider, clock)
    try:
        # the pool's second listing without the lost VM (its next cycle) gives it up
        wait_until(lambda: clock.advance(1) or status(redis_client, rid) == "ready", 10,
                   "the request ready", every=0.02)
        (delivered,) = redis_client.smembers(schema.request_vms(rid, "a", "a"))
        assert delivered != lost
        # Counted as a retry only if the request's actor was up when the loss was noticed;
        # otherwise the rebuilt actor simply asks for what it misses.
        assert redis_client.hget(schema.odrequest(rid), "retry_count") in (None, "1")
        assert not redis_client.sismember(schema.pending("a"), lost)
    finally:
        second.stop()


def test_manager_crash_leaves_one_actor_per_request(redis_client: redis.Redis) -> None:
    from vmpooler.actors.messages import RestartActor, WantRequestVms

    config = make_config([pool("a", 0)])
    provider = gated(config)
    with started(redis_client, config, provider=provider) as h:
        rid = h.system.request_ondemand({"a": 2})
        wait_until(lambda: redis_client.scard(schema.pending("a")) == 2)
        old_manager = h.system.actor_ref("ondemand")
        old_request = h.system.actor_ref(f"request:{rid}")
        old_manager.tell(WantRequestVms(rid, (("no-pool",),)))  # type: ignore[arg-type]
        wait_until(lambda: not old_manager.is_alive(), 10, "the manager to crash")
        wait_until(lambda: any(isinstance(m, RestartActor) for _, m in h.clock.pending()))
        h.clock.advance(2)  # the supervisor's back-off
        wait_until(lambda: h.system.actor_ref(f"request:{rid}") not in (None, old_request))
        assert not old_request.is_alive()
        provider.all_ready = True
        h.system.notify("a")
        wait_until(lambda: status(redis_client, rid) == "ready")
        h.quiesce()
        assert len(provider.created) == 2  # the rebuilt actor cloned nothing again


class HeldClones(GatedProvider):
    """Clones wait in ``create_vm`` until ``go`` is set (so on-demand slots stay taken)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.go = threading.Event()

    def create_vm(self, pool: str, vm: str, **kwargs: Any) -> Any:
        assert self.go.wait(30), "the test never let the clone go"
        return super().create_vm(pool, vm, **kwargs)


def tasks(client: redis.Redis) -> set[str]:
    return set(client.zrange(schema.odcreate_task(), 0, -1))


def test_odcreate_task_counts_the_clones_not_started_as_vmpooler_writes_it(
    redis_client: redis.Redis,
) -> None:
    """One clone slot, three VMs asked for: ``alias:pool:count:id`` with the clones still to
    start; a predecessor's members for the request are replaced, other requests' pruned."""
    config = make_config([pool("a", 0)], ondemand_clone_limit=1)
    provider = HeldClones(context_for(config), rng=random.Random(1), sleep=lambda _s: None)
    provider.all_ready = True
    # written before the manager starts, so its first sweep finds the request's actor alive
    assert RequestStore(redis_client).create("req-1", [Entry("a", "a", 3)], created=1,
                                             token=None, user=None)
    redis_client.zadd(schema.odcreate_task(), {"a:a:1:req-1": 5, "a:a:3:req-1": 5,
                                               "a:a:4:gone": 5})
    try:
        with started(redis_client, config, provider=provider) as h:
            wait_until(lambda: tasks(redis_client) == {"a:a:2:req-1"})
            score = redis_client.zscore(schema.odcreate_task(), "a:a:2:req-1")
            assert score == int(h.clock.now())
            provider.go.set()
            wait_until(lambda: status(redis_client, "req-1") == "ready")
            wait_until(lambda: tasks(redis_client) == set())
    finally:
        provider.go.set()


class FirstClonesHeld(GatedProvider):
    """The first ``held`` clones wait in ``create_vm`` until ``go`` is set."""

    def __init__(self, *args: Any, held: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.go = threading.Event()
        self.held = held
        self.calls = 0

    def create_vm(self, pool: str, vm: str, **kwargs: Any) -> Any:
        with self.gate:
            self.calls += 1
            wait = self.calls <= self.held
        if wait:
            assert self.go.wait(30), "the test never let the clone go"
        return super().create_vm(pool, vm, **kwargs)


def test_refill_after_request_vms_left_pending_does_not_clone_above_the_size(
    redis_client: redis.Redis,
) -> None:
    """The pool's own clones answer after a request's VMs were delivered (pending ->
    running) and before a cycle forgot them: the pool counts its pending VMs, not pending
    minus every request VM it still remembers, so it starts no clone beyond its size."""
    config = make_config([pool("a", 2)])
    provider = FirstClonesHeld(context_for(config), rng=random.Random(1),
                               sleep=lambda _s: None, held=2)
    try:
        with started(redis_client, config, provider=provider) as h:
            wait_until(lambda: provider.calls == 2)  # the pool's two, held
            rid = h.system.request_ondemand({"a": 2})
            wait_until(lambda: redis_client.scard(schema.pending("a")) == 4)
            for vm in redis_client.smembers(schema.pending("a")):
                if redis_client.hget(schema.vm(vm), "request_id"):
                    provider.released.add(vm)
            h.system.notify("a")  # a cycle: the request's VMs pass their check
            wait_until(lambda: status(redis_client, rid) == "ready")
            provider.go.set()  # the pool's clones answer: each frees a slot, refills
            h.quiesce()
            assert redis_client.scard(schema.pending("a")) == 2, "cloned above the size"
            assert len(provider.created) == 4
    finally:
        provider.go.set()


def test_no_clone_starts_for_a_request_while_the_breaker_is_open(
    redis_client: redis.Redis, caplog: Any,
) -> None:
    """A clone refused by the provider's open breaker tells the pool for how long: the
    request's slots wait, no VM is named, pending or logged as cloning meanwhile, and no
    retry is spent; once the breaker lets calls through, the request completes."""
    config = make_config([pool("a", 0)], circuit_breaker_failure_threshold=1,
                         circuit_breaker_timeout=60, max_vm_retries=3,
                         check_loop_delay_min=5, check_loop_delay_max=5)  # asks every 5 s
    provider = gated(config)
    provider.fail_next.append(TransientProviderError("busy"))  # opens the breaker
    provider.all_ready = True
    caplog.set_level(logging.INFO, logger="vmpooler")
    with started(redis_client, config, provider=provider) as h:
        rid = h.system.request_ondemand({"a": 1})
        wait_until(lambda: len(provider.created) == 1)
        h.advance(50, step=1)  # sweeps and checks, every second, with the breaker open

        def cloning() -> list[str]:
            return [r.getMessage() for r in caplog.records
                    if "is being cloned" in r.getMessage()]

        assert len(provider.created) == 1
        # the failed clone, and its replacement refused once
        assert len(cloning()) <= 2, cloning()
        assert status(redis_client, rid) is None
        assert redis_client.hget(schema.odrequest(rid), "retry_count") == "1"
        h.advance(90, step=1)
        assert status(redis_client, rid) == "ready", caplog.text[-3000:]
        assert len(provider.created) == 2
        assert redis_client.hget(schema.odrequest(rid), "retry_count") == "1"
