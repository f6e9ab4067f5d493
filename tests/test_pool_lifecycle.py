"""The pool lifecycle (reference §2.3, §4.2–§4.8) driven through real actors, a real
redis-server and the dummy provider, on a fake clock."""

from __future__ import annotations

import random
import time

import redis

from tests.harness import (
    assert_no_vm_in_two_queues,
    context_for,
    make_config,
    pool,
    started,
    wait_until,
)
from vmpooler.actors.messages import CheckPending
from vmpooler.actors.pool.hostnames import HostnameGenerator
from vmpooler.actors.storage import schema, timefmt
from vmpooler.providers.dummy import DummyProvider


def test_fills_every_pool_to_size(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 3), pool("b", 2)])
    with started(redis_client, config) as h:
        ready_a = h.wait_full("a", 3)
        h.wait_full("b", 2)
        vm = next(iter(ready_a))
        fields = redis_client.hgetall(schema.vm(vm))
        assert fields["template"] == "a" and fields["pool"] == "a"
        assert fields["domain"] == "example.test"
        assert fields["ip"].startswith("192.168.")
        assert {"clone", "ready", "clone_time"} <= fields.keys()
        assert redis_client.get(schema.tasks_clone()) == "0"
        assert redis_client.smembers(schema.pools()) == {"a", "b"}
        assert len(vm) <= 15
        h.system.notify("a")
        h.quiesce()
        assert h.metrics.last_gauge("ready", pool="a") == 3


def test_checkout_refills_at_once_when_told(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 2)])
    with started(redis_client, config) as h:
        ready = h.wait_full("a", 2)
        h.quiesce()
        for vm in ready:
            h.checkout("a", vm)
        told = time.monotonic()
        h.system.notify("a", "two VMs checked out")
        # The fake clock does not move: only the message can start the refill.
        wait_until(lambda: redis_client.scard(schema.pending("a"))
                   + redis_client.scard(schema.ready("a")) >= 1, 1.0, "a refill to start")
        assert time.monotonic() - told < 0.1
        h.wait_full("a", 2)
        assert redis_client.smembers(schema.running("a")) == ready


def test_checkout_is_noticed_by_the_periodic_cycle(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1)], check_loop_delay_min=5, check_loop_delay_max=5)
    with started(redis_client, config) as h:
        (vm,) = h.wait_full("a", 1)
        h.checkout("a", vm)
        h.advance(5)
        h.wait_full("a", 1)


def test_ready_ttl_recycles_old_vms(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 2, ready_ttl=10)], vm_checktime=1)
    with started(redis_client, config) as h:
        first = h.wait_full("a", 2)
        h.advance(11 * 60, step=30)
        h.quiesce()
        now = h.wait_full("a", 2)
        assert not first & now, "every VM older than ready_ttl was replaced"
        for vm in first:
            assert redis_client.hget(schema.vm(vm), "destroy") is not None
        assert_no_vm_in_two_queues(redis_client, "a")


def test_pending_timeout_marks_failed(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1, timeout=2, timeout_notification=1)],
                         check_loop_delay_min=10, check_loop_delay_max=10)
    with started(redis_client, config, vmready_fail_percent=100) as h:
        wait_until(lambda: redis_client.scard(schema.pending("a")) == 1)
        (vm,) = redis_client.smembers(schema.pending("a"))
        h.advance(70, step=10)
        assert redis_client.hget(schema.vm(vm), "timeout_notification") == "1"
        h.advance(60, step=10)
        wait_until(lambda: not redis_client.sismember(schema.pending("a"), vm))
        h.quiesce()
        assert h.metrics.counts("vmpooler_errors.markedasfailed", pool="a") >= 1
        assert "Dummy Failure" in redis_client.hget(schema.vm(vm), "open_socket_error")


def test_clone_failure_is_recorded_and_slot_released(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1)], dlq_enabled=True)
    with started(redis_client, config, createvm_fail_percent=100) as h:
        wait_until(lambda: redis_client.zcard(schema.dlq("clone")) >= 1)
        h.quiesce()
        entry = redis_client.zrange(schema.dlq("clone"), 0, 0)[0]
        vm = entry.split(":", 1)[0]
        assert redis_client.hget(schema.vm(vm), "clone_error").startswith("Dummy Failure")
        assert redis_client.ttl(schema.vm(vm)) > 0
        assert not redis_client.sismember(schema.pending("a"), vm)
        assert int(redis_client.get(schema.tasks_clone()) or 0) <= 1


def test_running_vm_reaped_at_end_of_lifetime(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1)], vm_checktime=1, check_loop_delay_min=30,
                         check_loop_delay_max=30)
    with started(redis_client, config) as h:
        (vm,) = h.wait_full("a", 1)
        h.checkout("a", vm, lifetime=1)
        h.advance(30 * 60, step=30)
        assert redis_client.sismember(schema.running("a"), vm)
        h.advance(31 * 60, step=30)
        wait_until(lambda: not redis_client.sismember(schema.running("a"), vm))
        wait_until(lambda: redis_client.hget(schema.vm(vm), "destroy") is not None)


def test_running_vm_without_active_entry_is_reaped(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1)], check_loop_delay_min=5, check_loop_delay_max=5)
    with started(redis_client, config) as h:
        (vm,) = h.wait_full("a", 1)
        h.quiesce()
        redis_client.smove(schema.ready("a"), schema.running("a"), vm)
        h.system.notify("a")
        wait_until(lambda: not redis_client.sismember(schema.running("a"), vm))


def test_stray_provider_vm_is_discovered_then_destroyed(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1)], check_loop_delay_min=5, check_loop_delay_max=5)
    with started(redis_client, config) as h:
        h.wait_full("a", 1)
        h.quiesce()
        h.provider.create_vm("a", "stray-vm")
        h.system.notify("a")
        wait_until(lambda: redis_client.sismember(schema.discovered("a"), "stray-vm"))
        h.advance(5)  # the next cycle moves it to completed...
        assert redis_client.sismember(schema.completed("a"), "stray-vm")
        h.advance(5)  # ...and the one after destroys it
        wait_until(lambda: "stray-vm" not in h.provider.inventory_snapshot().get("a", []))
        h.quiesce()
        assert_no_vm_in_two_queues(redis_client, "a")


def test_completed_vm_missing_from_inventory_is_forgotten(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)])
    with started(redis_client, config) as h:
        # One transaction: a cycle running between two separate writes would forget the VM
        # and then see its hash written afresh.
        with redis_client.pipeline(transaction=True) as seed:
            seed.sadd(schema.completed("a"), "ghost")
            seed.hset(schema.vm("ghost"), "pool", "a")
            seed.execute()
        h.system.notify("a")
        wait_until(lambda: not redis_client.exists(schema.vm("ghost")))
        assert not redis_client.sismember(schema.completed("a"), "ghost")


def test_hostname_mismatch_evicts_ready_vm(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1)], vm_checktime=1, check_loop_delay_min=30,
                         check_loop_delay_max=30)
    with started(redis_client, config, getvm_rename_percent=100) as h:
        (vm,) = h.wait_full("a", 1)
        h.advance(3 * 60, step=30)
        wait_until(lambda: not redis_client.sismember(schema.ready("a"), vm))


def test_hostname_mismatch_check_can_be_disabled(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1, check_hostname_for_mismatch=False)], vm_checktime=1,
                         check_loop_delay_min=30, check_loop_delay_max=30)
    with started(redis_client, config, getvm_rename_percent=100) as h:
        (vm,) = h.wait_full("a", 1)
        h.advance(3 * 60, step=30)
        assert redis_client.sismember(schema.ready("a"), vm)


def test_size_override_grows_and_shrinks_without_losing_vms(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 2)])
    with started(redis_client, config) as h:
        h.wait_full("a", 2)
        redis_client.hset(schema.config_poolsize(), "a", "5")
        h.system.notify("a", "size override")
        h.wait_full("a", 5)
        h.quiesce()
        redis_client.hset(schema.config_poolsize(), "a", "1")
        h.system.notify("a", "size override")
        wait_until(lambda: redis_client.scard(schema.ready("a")) == 1)
        h.quiesce()
        # vmpooler's SPOP bug left surplus VMs in no queue; ours go to completed, then away.
        inventory = set(h.provider.inventory_snapshot().get("a", []))
        accounted = set().union(*(redis_client.smembers(getattr(schema, q)("a"))
                                  for q in ("ready", "pending", "completed")))
        assert inventory <= accounted
        assert_no_vm_in_two_queues(redis_client, "a")
        redis_client.hdel(schema.config_poolsize(), "a")
        redis_client.sadd(schema.undo_size_override(), "a")
        h.system.notify("a", "undo")
        h.wait_full("a", 2)
        wait_until(lambda: not redis_client.sismember(schema.undo_size_override(), "a"))


def test_pool_reset_drains_and_refills(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 2)])
    with started(redis_client, config) as h:
        before = h.wait_full("a", 2)
        h.quiesce()
        redis_client.sadd(schema.poolreset(), "a")
        h.system.notify("a", "reset")
        wait_until(lambda: not redis_client.sismember(schema.poolreset(), "a"))
        after = h.wait_full("a", 2)
        wait_until(lambda: not (set(h.provider.inventory_snapshot().get("a", [])) & before))
        assert not before & after


def test_template_override_drains_and_prepares(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 2, template="old")])
    with started(redis_client, config) as h:
        before = h.wait_full("a", 2)
        assert redis_client.hget(schema.template_prepared(), "a") == "old"
        h.quiesce()
        redis_client.hset(schema.config_template(), "a", "new")
        h.system.notify("a", "template override")
        wait_until(lambda: redis_client.hget(schema.template_prepared(), "a") == "new")
        after = h.wait_full("a", 2)
        assert not before & after


def test_checked_out_vm_leaves_migrating(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1)])
    with started(redis_client, config) as h:
        (vm,) = h.wait_full("a", 1)
        h.quiesce()
        h.checkout("a", vm)
        redis_client.sadd(schema.migrating("a"), vm)
        h.system.notify("a")
        wait_until(lambda: not redis_client.sismember(schema.migrating("a"), vm))
        assert redis_client.sismember(schema.running("a"), vm)


def test_disk_and_snapshot_tasks(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1)])
    with started(redis_client, config) as h:
        (vm,) = h.wait_full("a", 1)
        h.checkout("a", vm)
        redis_client.sadd(schema.tasks_disk(), f"{vm}:8")
        redis_client.sadd(schema.tasks_snapshot(), f"{vm}:snap1")
        h.system.notify_tasks()
        wait_until(lambda: redis_client.hget(schema.vm(vm), "disk") == "+8gb")
        wait_until(lambda: redis_client.hexists(schema.vm(vm), "snapshot:snap1"))
        redis_client.sadd(schema.tasks_snapshot_revert(), f"{vm}:snap1")
        h.system.notify_tasks()
        wait_until(lambda: not redis_client.scard(schema.tasks_snapshot_revert()))


def test_empty_flag_follows_ready_count(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1)], check_loop_delay_min=5, check_loop_delay_max=5)
    with started(redis_client, config, createvm_fail_percent=100) as h:
        wait_until(lambda: redis_client.get(schema.empty("a")) == "true")
        h.quiesce()


def test_unconfigured_pool_is_unpublished(redis_client: redis.Redis) -> None:
    redis_client.sadd(schema.pools(), "gone")
    redis_client.hset(schema.pool_hash("gone"), "size", "1")
    with started(redis_client, make_config([pool("a", 0)])):
        assert redis_client.smembers(schema.pools()) == {"a"}
        assert not redis_client.exists(schema.pool_hash("gone"))


def test_pending_vm_whose_clone_died_with_a_previous_process_is_dropped(
    redis_client: redis.Redis,
) -> None:
    # Reserved in Redis by a manager that was killed before its provider call started:
    # the VM will never exist, so waiting for the pending timeout would only starve the pool.
    redis_client.sadd(schema.pending("a"), "ghost-vm")
    redis_client.hset(schema.vm("ghost-vm"), mapping={"clone": "2024-05-01 13:02:11 +0000",
                                                      "template": "a", "pool": "a"})
    with started(redis_client, make_config([pool("a", 2)])) as h:
        # missed by two listings (the second requested after the first judgement): dropped
        wait_until(lambda: h.advance(5) or h.sizes("a") == {**h.sizes("a"), "ready": 2,
                                                              "pending": 0}, 20,
                   "the ghost dropped and the pool full")
        assert not redis_client.sismember(schema.pending("a"), "ghost-vm")
        assert redis_client.hget(schema.vm("ghost-vm"), "clone_error_class") == "VmNotFound"
        assert redis_client.ttl(schema.vm("ghost-vm")) > 0


def test_pending_vm_another_manager_is_cloning_is_left_pending(
    redis_client: redis.Redis,
) -> None:
    """A pool's former owner still holds a clone slot for a pending VM (its clone is in
    flight there): the VM is not in the inventory yet, but it is not judged vanished until
    the slot is given back (the clone's answer, or the fold of a dead manager's slots)."""
    config = make_config([pool("a", 1)], manager_heartbeat_interval=3600)
    with started(redis_client, config) as h:
        h.wait_full("a", 1)
        redis_client.sadd(schema.pending("a"), "elsewhere")
        redis_client.hset(schema.vm("elsewhere"), mapping={
            "clone": timefmt.format_epoch(h.clock.now()), "template": "a", "pool": "a"})
        redis_client.sadd(schema.tasks_clone_slots("former-owner"), "elsewhere")
        redis_client.hset(schema.tasks_slot_owners(), "former-owner", 1)
        h.advance(60)  # a dozen cycles, each listing without it
        assert redis_client.sismember(schema.pending("a"), "elsewhere")
        redis_client.srem(schema.tasks_clone_slots("former-owner"), "elsewhere")
        wait_until(lambda: h.advance(5) or not redis_client.sismember(schema.pending("a"),
                                                                      "elsewhere"), 20,
                   "the VM judged vanished once no slot is held for it")


class FlakyReadiness(DummyProvider):
    """A dummy whose readiness answer the test can flip."""

    ready_answer = True

    def vm_ready(self, pool: str, vm: str) -> bool:
        return self.ready_answer and super().vm_ready(pool, vm)


def test_ready_vm_failing_its_readiness_check_is_retired(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1)], vm_checktime=1, dlq_enabled=True,
                         check_loop_delay_min=30, check_loop_delay_max=30)
    provider = FlakyReadiness(context_for(config), rng=random.Random(3), sleep=lambda _s: None)
    with started(redis_client, config, provider=provider) as h:
        (vm,) = h.wait_full("a", 1)
        h.quiesce()
        provider.ready_answer = False
        h.advance(90, step=30)
        wait_until(lambda: redis_client.zcard(schema.dlq("ready")) >= 1)
        assert redis_client.zrange(schema.dlq("ready"), 0, 0)[0].startswith(f"{vm}:")
        assert not redis_client.sismember(schema.ready("a"), vm)


def test_ready_and_running_vms_missing_from_inventory_are_retired(
    redis_client: redis.Redis,
) -> None:
    config = make_config([pool("a", 2)])
    with started(redis_client, config) as h:
        ready = sorted(h.wait_full("a", 2))
        h.quiesce()
        h.checkout("a", ready[0])
        h.provider.destroy_vm("a", ready[0])  # vanished behind our back
        h.provider.destroy_vm("a", ready[1])
        h.system.notify("a")
        for vm in ready:
            wait_until(lambda vm=vm: redis_client.hget(schema.vm(vm), "destroy") is None
                       and not any(redis_client.sismember(getattr(schema, q)("a"), vm)
                                   for q in ("ready", "running")), 10, f"{vm} to be retired")
        h.wait_full("a", 2)


def test_running_vm_the_provider_no_longer_has_is_retired(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1)])

    class Vanishing(FlakyReadiness):
        def get_vm(self, pool_name: str, vm: str):  # type: ignore[no-untyped-def]
            return None if not self.ready_answer else super().get_vm(pool_name, vm)

    provider = Vanishing(context_for(config), rng=random.Random(3), sleep=lambda _s: None)
    with started(redis_client, config, provider=provider) as h:
        (vm,) = h.wait_full("a", 1)
        h.quiesce()
        provider.ready_answer = False  # still listed, but neither ready nor found
        h.checkout("a", vm)
        h.system.notify("a")
        wait_until(lambda: not redis_client.sismember(schema.running("a"), vm))


def test_clone_target_override_drains(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 2)])
    with started(redis_client, config) as h:
        before = h.wait_full("a", 2)
        h.quiesce()
        redis_client.hset(schema.config_clone_target(), "a", "cluster2")
        h.system.notify("a", "clone target")
        wait_until(lambda: not (redis_client.smembers(schema.ready("a")) & before))
        assert not h.wait_full("a", 2) & before


def test_freed_clone_slots_go_to_waiting_pools_without_a_timer(
    redis_client: redis.Redis,
) -> None:
    # One clone slot for three pools, and a clock that never moves: only the slot broker's
    # hand-over can fill the pools that found no free slot.
    config = make_config([pool("a", 2), pool("b", 2), pool("c", 2)], task_limit=1)
    with started(redis_client, config) as h:
        for name in ("a", "b", "c"):
            h.wait_full(name, 2)
        assert redis_client.get(schema.tasks_clone()) == "0"


class RecordingClones(DummyProvider):
    """A dummy that remembers the template and clone target of every clone."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.clones: dict[str, tuple[str | None, str | None]] = {}

    def create_vm(self, pool: str, vm: str, *, template: str | None = None,
                  clone_target: str | None = None):  # type: ignore[no-untyped-def]
        self.clones[vm] = (template, clone_target)
        return super().create_vm(pool, vm, template=template, clone_target=clone_target)


def test_overrides_reach_the_provider(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1, template="old", clone_target="c1")])
    provider = RecordingClones(context_for(config), rng=random.Random(3), sleep=lambda _s: None)
    with started(redis_client, config, provider=provider) as h:
        (first,) = h.wait_full("a", 1)
        assert provider.clones[first] == ("old", "c1")
        h.quiesce()
        redis_client.hset(schema.config_template(), "a", "new")
        redis_client.hset(schema.config_clone_target(), "a", "c2")
        h.system.notify("a", "overrides")
        wait_until(lambda: first not in redis_client.smembers(schema.ready("a")))
        (second,) = h.wait_full("a", 1)
        assert provider.clones[second] == ("new", "c2")


def test_failing_clones_back_off_instead_of_spinning(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 2)], check_loop_delay_min=5, check_loop_delay_max=60)
    with started(redis_client, config, createvm_fail_percent=100) as h:
        wait_until(lambda: redis_client.get(schema.empty("a")) == "true")
        h.quiesce()
        attempts = len(redis_client.keys(schema.vm("*")))
        assert attempts <= 2, "a failed clone must not be retried at once"
        h.advance(60, step=5)
        later = len(redis_client.keys(schema.vm("*")))
        assert attempts < later <= attempts + 2 * 6, "retries follow the back-off"


def test_pool_recovers_when_its_provider_actor_crashes_mid_call(
    redis_client: redis.Redis,
) -> None:
    import threading

    from vmpooler.actors.messages import CallProvider, RestartActor

    config = make_config([pool("a", 1)], check_loop_delay_min=5, check_loop_delay_max=5)
    release = threading.Event()
    entered = threading.Event()

    class Hanging(DummyProvider):
        hang = True

        def vms_in_pool(self, pool_name: str) -> list[str]:
            if self.hang:
                self.hang = False
                entered.set()
                release.wait(30)
            return super().vms_in_pool(pool_name)

    provider = Hanging(context_for(config), rng=random.Random(3), sleep=lambda _s: None)
    try:
        with started(redis_client, config, provider=provider) as h:
            old = h.system.actor_ref("provider:dummy")
            assert old is not None
            assert entered.wait(10), "the inventory call is running"
            # A message its handler cannot take (no reply_to) crashes the provider actor.
            old.tell(CallProvider(CheckPending(), "a", "x", None))  # type: ignore[arg-type]
            wait_until(lambda: not old.is_alive(), 10, "the provider actor to crash")
            # The supervisor handles the crash on its own thread: once it has scheduled the
            # restart, move the clock past its back-off.
            wait_until(lambda: any(isinstance(m, RestartActor) for _, m in h.clock.pending()),
                       10, "the supervisor to schedule the restart")
            h.clock.advance(2)
            wait_until(lambda: h.system.actor_ref("provider:dummy") not in (None, old))
            release.set()  # the call its predecessor started finishes now
            h.wait_full("a", 1)
            assert h.system._supervisor is not None
            assert h.system._supervisor.proxy().restart_counts().get()["provider:dummy"] == 1
    finally:
        release.set()


def test_task_meeting_another_call_on_its_vm_runs_after_it(redis_client: redis.Redis) -> None:
    """A snapshot asked for while the VM's disk is being added must not be lost."""
    import threading

    release, entered = threading.Event(), threading.Event()
    config = make_config([pool("a", 1)])

    class SlowDisk(DummyProvider):
        def create_disk(self, pool_name: str, vm_name: str, size_gb: int) -> bool:
            entered.set()
            release.wait(10)
            return super().create_disk(pool_name, vm_name, size_gb)

    provider = SlowDisk(context_for(config), rng=random.Random(3), sleep=lambda _s: None)
    try:
        with started(redis_client, config, provider=provider) as h:
            (vm,) = h.wait_full("a", 1)
            h.checkout("a", vm)
            redis_client.sadd(schema.tasks_disk(), f"{vm}:8")
            h.system.notify_tasks()
            assert entered.wait(10)
            redis_client.sadd(schema.tasks_snapshot(), f"{vm}:snap1")
            h.system.notify_tasks()
            # The snapshot met the running disk call and was queued again, not dropped.
            wait_until(lambda: redis_client.sismember(schema.tasks_snapshot(), f"{vm}:snap1"))
            release.set()
            wait_until(lambda: redis_client.hexists(schema.vm(vm), "snapshot:snap1"))
            assert redis_client.hget(schema.vm(vm), "disk") == "+8gb"
    finally:
        release.set()


def test_a_taken_name_is_counted_as_a_duplicate_hostname_and_another_drawn(
        redis_client: redis.Redis) -> None:
    """The name generator's first draw already has a VM hash (a VM of another pool, or one
    whose hash outlived it): the clone is not made under it, vmpooler's
    ``vmpooler_errors.duplicatehostname`` is counted, and the next draw is used."""
    # started(...) seeds the system's generator with 7; the one pool actor draws from its child
    taken = HostnameGenerator(rng=random.Random(7)).spawn().candidate()
    redis_client.hset(schema.vm(taken), mapping={"pool": "elsewhere", "template": "t"})
    config = make_config([pool("a", 1)])
    with started(redis_client, config, seed=7) as h:
        wait_until(lambda: redis_client.scard(schema.ready("a")) == 1)
        assert h.metrics.counts("vmpooler_errors.duplicatehostname", pool="a") == 1
        assert taken not in redis_client.smembers(schema.ready("a"))
        assert redis_client.hget(schema.vm(taken), "pool") == "elsewhere"  # left alone
