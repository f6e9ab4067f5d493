"""A pool's standby tier on the fake clock over real Redis, with the dummy provider.

The tier fills after ``ready``; a burst of checkouts is refilled by resumes first (clones
refill the tier); a resume or suspend that fails destroys the VM, which a clone replaces;
``standby_ttl`` recycles; a drain empties the tier; a provider without the capability keeps
the pool as it was; every VM in the provider is in exactly one of the pool's sets.
"""

from __future__ import annotations

from typing import Any

import redis

from tests.harness import Harness, dummy_for, make_config, pool, started, wait_until
from vmpooler.actors.config.model import DemandSizing, StandbyTier
from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.checkout_store import CheckoutStore
from vmpooler.actors.storage.demand_store import DemandStore
from vmpooler.providers.base import Capability


def standby_pool(size: int = 2, count: int = 3, **tier: object) -> object:
    return pool("alpha", size, standby=StandbyTier(count=count, **tier))  # type: ignore[arg-type]


def tiers(h: Harness, name: str = "alpha") -> dict[str, set[str]]:
    c = h.client
    return {"ready": set(c.smembers(schema.ready(name))),
            "standby": set(c.smembers(schema.standby(name))),
            "pending": set(c.smembers(schema.pending(name))),
            "running": set(c.smembers(schema.running(name))),
            "completed": set(c.smembers(schema.completed(name)))}


def states(h: Harness, name: str = "alpha") -> dict[str, str]:
    return {vm: h.client.hget(schema.vm(vm), "standby") or ""
            for vm in h.client.smembers(schema.standby(name))}


def settle(h: Harness, until: object, what: str, step: float = 5.0) -> None:
    """Drive the fake clock until ``until()`` holds (a deadline on the real clock)."""
    def moved() -> bool:
        h.advance(step)
        return bool(until())  # type: ignore[operator]
    wait_until(moved, 30, what)


def full(h: Harness, size: int, count: int) -> bool:
    t = tiers(h)
    return (len(t["ready"]) == size and len(t["standby"]) == count
            and set(states(h).values()) == {"suspended"})


def in_one_set_each(h: Harness) -> None:
    t = tiers(h)
    seen: dict[str, str] = {}
    for name, vms in t.items():
        for vm in vms:
            assert vm not in seen, f"{vm} in {seen[vm]} and {name}"
            seen[vm] = name
    inventory = set(h.provider.vms_in_pool("alpha"))
    assert inventory <= set(seen), f"in the provider, in no set: {inventory - set(seen)}"


def test_the_tier_fills_after_ready_and_every_standby_vm_is_suspended(
        redis_client: redis.Redis) -> None:
    config = make_config([standby_pool(2, 3)])
    with started(redis_client, config) as h:
        settle(h, lambda: full(h, 2, 3), "2 ready and 3 suspended")
        for vm in tiers(h)["standby"]:
            info = h.provider.get_vm("alpha", vm)
            assert info is not None and info.powerstate == "Suspended"
        for vm in tiers(h)["ready"]:
            info = h.provider.get_vm("alpha", vm)
            assert info is not None and info.powerstate == "PoweredOn"
        in_one_set_each(h)


def test_a_burst_is_refilled_by_resumes_and_clones_refill_the_tier(
        redis_client: redis.Redis) -> None:
    config = make_config([standby_pool(2, 3)])
    with started(redis_client, config) as h:
        settle(h, lambda: full(h, 2, 3), "2 ready and 3 suspended")
        was_standby = tiers(h)["standby"]
        for vm in list(tiers(h)["ready"]):
            h.checkout("alpha", vm)
        h.system.notify("alpha", "checkout")
        settle(h, lambda: len(tiers(h)["ready"]) == 2, "ready refilled", step=1)
        assert tiers(h)["ready"] <= was_standby  # resumed, not cloned
        resumed = h.metrics.counts("standby.resume", pool="alpha", result="success")
        assert resumed == 2
        settle(h, lambda: full(h, 2, 3), "the tier refilled by clones")
        in_one_set_each(h)


def test_a_failed_resume_destroys_the_vm_and_a_clone_replaces_it(
        redis_client: redis.Redis) -> None:
    config = make_config([standby_pool(2, 2)])
    with started(redis_client, config, resumevm_fail_percent=100) as h:
        settle(h, lambda: full(h, 2, 2), "2 ready and 2 suspended")
        first = tiers(h)["standby"]
        for vm in list(tiers(h)["ready"]):
            h.checkout("alpha", vm)
        h.system.notify("alpha", "checkout")
        settle(h, lambda: not (tiers(h)["standby"] & first) and full(h, 2, 2)
               and not tiers(h)["completed"], "the failed VMs destroyed and replaced")
        assert h.metrics.counts("vm.lost", pool="alpha", reason="resume_failed") >= 1
        for vm in first:
            assert h.provider.get_vm("alpha", vm) is None  # destroyed, not leaked
        in_one_set_each(h)


def test_a_failed_suspend_destroys_the_vm(redis_client: redis.Redis) -> None:
    config = make_config([standby_pool(1, 1)])
    with started(redis_client, config, suspendvm_fail_percent=100) as h:
        settle(h, lambda: h.metrics.counts("vm.lost", pool="alpha", reason="suspend_failed") >= 2,
               "suspends to fail")
        assert len(tiers(h)["ready"]) == 1
        in_one_set_each(h)


def test_standby_ttl_recycles_suspended_vms(redis_client: redis.Redis) -> None:
    config = make_config([standby_pool(1, 2, ttl=600.0)])
    with started(redis_client, config) as h:
        settle(h, lambda: full(h, 1, 2), "1 ready and 2 suspended")
        first = tiers(h)["standby"]
        h.advance(700, step=20)
        settle(h, lambda: full(h, 1, 2) and not tiers(h)["standby"] & first,
               "recycled and refilled")
        assert h.metrics.counts("vm.lost", pool="alpha", reason="standby_ttl") == 2


def test_a_provider_without_the_capability_keeps_no_standby(
        redis_client: redis.Redis) -> None:
    config = make_config([standby_pool(2, 3)])
    provider = _without_standby(dummy_for(config))  # the dummy declares both modes
    with started(redis_client, config, provider=provider) as h:
        h.wait_full("alpha", 2)
        h.advance(60)
        assert tiers(h)["standby"] == set() and len(tiers(h)["ready"]) == 2


def _without_standby(provider: Any) -> Any:
    class NoStandby(type(provider)):  # type: ignore[misc]
        @property
        def capabilities(self) -> frozenset[Capability]:
            return frozenset()
    provider.__class__ = NoStandby
    return provider


def test_auto_lets_demand_sizing_choose_both_tiers(redis_client: redis.Redis) -> None:
    demand = DemandSizing(size_min=1, size_max=8, target_warm_hit=0.99)
    config = make_config([pool("alpha", 8, demand=demand, standby=StandbyTier(count=None),
                               check_loop_delay_min=5, check_loop_delay_max=5)])
    with started(redis_client, config) as h:
        h.advance(30)
        store = CheckoutStore(h.client)
        for _ in range(6):  # 40 s apart: one within a resume time, three within a clone time
            now = h.clock.now()
            store.checkout([["alpha"]], now=timefmt.format_epoch(now), epoch=now)
            h.system.notify("alpha", "checkout")
            h.advance(40)
        published = DemandStore(h.client).published(["alpha"])["alpha"]
        assert float(published["resume_time"]) > 0
        standby_target = int(published["standby"])
        ready_target = int(published["target"])
        assert standby_target >= 1 and ready_target >= 1
        assert standby_target + ready_target <= 8
        settle(h, lambda: full(h, ready_target, standby_target), "both tiers filled")
        in_one_set_each(h)


def test_a_new_owner_carries_on_where_the_last_one_stopped(redis_client: redis.Redis) -> None:
    """A manager stops with one standby VM being suspended and one being resumed (their
    states in Redis, their calls lost): the next owner suspends the one, resumes and checks
    the other, and loses none."""
    config = make_config([standby_pool(2, 3)])
    provider = dummy_for(config)
    with started(redis_client, config, provider=provider) as h:
        settle(h, lambda: full(h, 2, 3), "2 ready and 3 suspended")
        before = set().union(*tiers(h).values())
        suspending, resuming, _ = sorted(tiers(h)["standby"])
    redis_client.hset(schema.vm(suspending), "standby", "suspending")
    provider.resume_vm("alpha", suspending)  # it was still running when the manager went
    redis_client.hset(schema.vm(resuming), "standby", "resuming")
    with started(redis_client, config, provider=provider) as h:
        settle(h, lambda: full(h, 2, 3), "both tiers whole again")
        assert set().union(*tiers(h).values()) == before, "a VM was lost or added"
        info = provider.get_vm("alpha", suspending)
        assert info is not None and info.powerstate == "Suspended"
        in_one_set_each(h)


def test_a_drain_empties_the_tier(redis_client: redis.Redis) -> None:
    config = make_config([standby_pool(1, 2)])
    with started(redis_client, config) as h:
        settle(h, lambda: full(h, 1, 2), "1 ready and 2 suspended")
        first = tiers(h)["standby"]
        h.client.sadd(schema.poolreset(), "alpha")
        h.system.notify("alpha", "reset")
        settle(h, lambda: full(h, 1, 2) and not tiers(h)["standby"] & first,
               "the tier drained and refilled")
        for vm in first:
            assert h.provider.get_vm("alpha", vm) is None
        assert h.metrics.counts("vm.lost", pool="alpha", reason="drained") >= 2


def test_a_standby_vms_hash_is_no_orphan(redis_client: redis.Redis) -> None:
    from vmpooler.actors.storage.upkeep_store import UpkeepStore

    redis_client.hset(schema.vm("sleepy"), mapping={"pool": "alpha", "standby": "suspended"})
    redis_client.sadd(schema.standby("alpha"), "sleepy")
    assert [o.vm for o in UpkeepStore(redis_client).orphans()] == []
    redis_client.srem(schema.standby("alpha"), "sleepy")
    assert [o.vm for o in UpkeepStore(redis_client).orphans()] == ["sleepy"]


def test_an_ondemand_request_takes_standby_vms_before_it_clones(
        redis_client: redis.Redis) -> None:
    config = make_config([standby_pool(1, 3)])
    with started(redis_client, config) as h:
        settle(h, lambda: full(h, 1, 3), "1 ready and 3 suspended")
        suspended = tiers(h)["standby"]
        rid = h.system.request_ondemand({"alpha": 2})
        assert rid

        def delivered() -> bool:
            record = h.system.ondemand_request(rid)
            return record is not None and record.status == "ready"
        settle(h, delivered, "the request to be ready", step=1)
        record = h.system.ondemand_request(rid)
        vms = set(record.delivered[("alpha", "alpha")])
        assert len(vms) == 2 and vms <= suspended, "taken from standby, not cloned"
        for vm in vms:
            info = h.provider.get_vm("alpha", vm)
            assert info is not None and info.powerstate == "PoweredOn"
            assert redis_client.hget(schema.vm(vm), "standby") is None
        settle(h, lambda: full(h, 1, 3), "the tier refilled")
        in_one_set_each(h)


def test_a_resumed_vm_never_ready_is_checked_once_a_cycle_then_destroyed(
        redis_client: redis.Redis) -> None:
    config = make_config([standby_pool(1, 1)], timeout=2)
    provider = dummy_for(config)
    base = type(provider)
    probes: list[str] = []

    class NeverReadyAfterResume(base):  # type: ignore[misc, valid-type]
        broken = False

        def vm_ready(self, pool_name: str, vm_name: str, *args: Any, **kwargs: Any) -> bool:
            if self.broken:
                probes.append(vm_name)
                return False
            return bool(super().vm_ready(pool_name, vm_name, *args, **kwargs))

    provider.__class__ = NeverReadyAfterResume
    with started(redis_client, config, provider=provider) as h:
        settle(h, lambda: full(h, 1, 1), "1 ready and 1 suspended")
        (sleeper,) = tiers(h)["standby"]
        provider.broken = True  # type: ignore[attr-defined]
        h.checkout("alpha", next(iter(tiers(h)["ready"])))
        h.system.notify("alpha", "checkout")
        h.advance(60, step=5)  # 12 steps of 5 s, the cycle every 5 s
        assert states(h).get(sleeper) == "checking"
        assert 1 <= probes.count(sleeper) <= 14, "checked about once a cycle, not in a loop"
        h.advance(120, step=10)  # past the 2-minute timeout
        assert sleeper not in tiers(h)["standby"]
        assert h.metrics.counts("vm.lost", pool="alpha", reason="resume_failed") == 1


def test_a_permanent_suspend_failure_pauses_the_tier_instead_of_churning_clones(
        redis_client: redis.Redis) -> None:
    from vmpooler.providers.errors import PermanentProviderError

    config = make_config([standby_pool(1, 2)])
    provider = dummy_for(config)

    class NoSuspendPrivilege(type(provider)):  # type: ignore[misc]
        def suspend_vm(self, pool_name: str, vm_name: str, **kwargs: Any) -> bool:
            raise PermanentProviderError("permission denied: lacks VirtualMachine.Interact."
                                         "Suspend")

    provider.__class__ = NoSuspendPrivilege
    with started(redis_client, config, provider=provider) as h:
        h.advance(1800, step=10)  # half an hour of cycles
        failures = h.metrics.counts("vm.lost", pool="alpha", reason="suspend_failed")
        assert 1 <= failures <= 2, f"{failures} clones suspended and destroyed"
        assert len(tiers(h)["ready"]) == 1 and not tiers(h)["standby"]
        h.advance(3600, step=60)  # the pause is over: it tries again, once
        assert failures < h.metrics.counts("vm.lost", pool="alpha",
                                           reason="suspend_failed") <= failures + 2
