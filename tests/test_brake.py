"""The mass-failure brake (``max_unhealthy``): real actors, a real redis-server and the dummy
provider on a fake clock; its rule and its configuration."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest
import redis

from tests.api_harness import api
from tests.harness import (
    Harness,
    assert_no_vm_in_two_queues,
    context_for,
    make_config,
    pool,
    started,
    wait_until,
)
from vmpooler.actors.config import ConfigError, load_config
from vmpooler.actors.config.unacted import unacted_warnings
from vmpooler.actors.pool.brake import BrakeRule, FailureWindow
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.brake_store import BrakeStore
from vmpooler.actors.storage.lease_store import Fenced
from vmpooler.providers.dummy import DummyProvider

WINDOW = 600.0


class SickReadiness(DummyProvider):
    """A dummy whose readiness probe fails for the VMs the test names."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.failing: set[str] = set()
        self.lost: set[str] = set()

    def vm_ready(self, pool: str, vm: str) -> bool:
        return vm not in self.failing and super().vm_ready(pool, vm)

    def get_vm(self, pool: str, vm: str):  # type: ignore[no-untyped-def]
        return None if vm in self.lost else super().get_vm(pool, vm)


def _start(client: redis.Redis, size: int = 5, **brake: object):  # type: ignore[no-untyped-def]
    config = make_config([pool("a", size, **brake)], vm_checktime=1,
                         check_loop_delay_min=30, check_loop_delay_max=30)
    provider = SickReadiness(context_for(config), rng=random.Random(3), sleep=lambda _s: None)
    return started(client, config, provider=provider), provider


def _held(client: redis.Redis) -> set[str]:
    return set(client.smembers(schema.held("a")))


def _destroyed(client: redis.Redis, vms: set[str]) -> set[str]:
    return {vm for vm in vms if client.hget(schema.vm(vm), "destroy") is not None}


def _fail(h: Harness, provider: SickReadiness, vms: set[str]) -> None:
    """Make ``vms`` fail their next ready check and let one check round pass."""
    provider.failing |= vms
    h.advance(90, step=30)


# -- the pool -------------------------------------------------------------------------------
def test_failures_up_to_the_share_are_destroyed_as_before(redis_client: redis.Redis) -> None:
    starter, provider = _start(redis_client, max_unhealthy=0.4, max_unhealthy_window=WINDOW)
    with starter as h:
        first = h.wait_full("a", 5)
        h.quiesce()
        sick = set(sorted(first)[:2])  # 2 of 5 = 40%: not more than the share
        _fail(h, provider, sick)
        wait_until(lambda: _destroyed(redis_client, sick) == sick, 10, "both destroyed")
        now = h.wait_full("a", 5)
        assert not now & sick, "both were replaced"
        assert not _held(redis_client)
        assert h.metrics.counts("vm.lost", pool="a", reason="check_failed") == 2
        assert h.metrics.last_gauge("brake.engaged", pool="a") == 0


def test_above_the_share_failing_vms_are_held_not_destroyed_nor_replaced(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture,
) -> None:
    starter, provider = _start(redis_client, max_unhealthy=0.4, max_unhealthy_window=WINDOW)
    caplog.set_level(logging.INFO, logger="vmpooler.actors.pool.brake")
    with starter as h:
        first = h.wait_full("a", 5)
        h.quiesce()
        ordered = sorted(first)
        sick, healthy = set(ordered[:4]), set(ordered[4:])
        _fail(h, provider, sick)
        h.advance(120, step=30)
        held = _held(redis_client)
        # The first two failures are within the share and destroyed; the rest are held.
        assert len(held) == 2 and held <= sick
        assert not _destroyed(redis_client, held)
        assert len(_destroyed(redis_client, sick)) == 2
        assert h.metrics.last_gauge("brake.engaged", pool="a") == 1
        assert h.metrics.counts("brake.held", pool="a") == 2
        engaged = [r.getMessage() for r in caplog.records if "brake engaged" in r.getMessage()]
        assert len(engaged) == 1 and "'a'" not in engaged[0] and "[a]" in engaged[0]
        assert "3 VMs" in engaged[0] and "40%" in engaged[0] and "600s" in engaged[0]
        # No clone replaces a held VM: ready + pending + held stays at the size.
        sizes = h.sizes("a")
        assert sizes["ready"] + sizes["pending"] + len(held) == 5
        assert not held & set(redis_client.smembers(schema.ready("a")))
        assert_no_vm_in_two_queues(redis_client, "a")
        for vm in held:
            assert not redis_client.sismember(schema.completed("a"), vm)
        # Healthy VMs are still served.
        ready = set(redis_client.smembers(schema.ready("a")))
        assert healthy <= ready
        h.checkout("a", next(iter(healthy)))
        h.system.notify("a")
        h.advance(60, step=30)
        assert _held(redis_client) == held


def test_release_checks_held_vms_again_and_brings_them_back(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture,
) -> None:
    starter, provider = _start(redis_client, max_unhealthy=0.4, max_unhealthy_window=WINDOW)
    caplog.set_level(logging.INFO, logger="vmpooler.actors.pool.brake")
    with starter as h:
        first = h.wait_full("a", 5)
        h.quiesce()
        sick = set(sorted(first)[:4])
        _fail(h, provider, sick)
        h.advance(60, step=30)
        held = _held(redis_client)
        assert len(held) == 2
        provider.failing.clear()  # the provider recovered
        h.advance(WINDOW - 200, step=30)
        assert _held(redis_client) == held, "still engaged within the window"
        h.advance(300, step=30)
        wait_until(lambda: not _held(redis_client), 10, "the held VMs to be released")
        h.quiesce()
        assert held <= set(redis_client.smembers(schema.ready("a")))
        assert not _destroyed(redis_client, held)
        assert h.metrics.last_gauge("brake.engaged", pool="a") == 0
        assert any("brake released" in r.getMessage() for r in caplog.records)
        h.wait_full("a", 5)
        assert_no_vm_in_two_queues(redis_client, "a")


def test_a_held_vm_still_failing_after_release_is_destroyed(redis_client: redis.Redis) -> None:
    starter, provider = _start(redis_client, max_unhealthy=0.4, max_unhealthy_window=WINDOW)
    with starter as h:
        first = h.wait_full("a", 5)
        h.quiesce()
        sick = set(sorted(first)[:4])
        _fail(h, provider, sick)
        h.advance(60, step=30)
        held = _held(redis_client)
        assert len(held) == 2
        provider.failing = set(sorted(held)[:1])  # one of them is really broken
        h.advance(WINDOW + 120, step=30)
        wait_until(lambda: not _held(redis_client), 10, "the held VMs to be released")
        h.quiesce()
        broken = set(sorted(held)[:1])
        assert _destroyed(redis_client, broken) == broken
        assert held - broken <= set(redis_client.smembers(schema.ready("a")))
        h.wait_full("a", 5)


def test_running_vms_the_provider_lost_stay_while_engaged(redis_client: redis.Redis) -> None:
    starter, provider = _start(redis_client, size=4, max_unhealthy=0.25,
                               max_unhealthy_window=WINDOW)
    with starter as h:
        vms = set(h.wait_full("a", 4))
        h.quiesce()
        for vm in vms:
            h.checkout("a", vm)
        h.system.notify("a")
        h.wait_full("a", 4)
        h.quiesce()
        provider.failing |= vms  # listed, but neither ready nor found: "no longer exists"
        provider.lost |= vms
        h.advance(150, step=30)
        running = set(redis_client.smembers(schema.running("a")))
        # 1 of 4 is the share: the first loss is retired, the others stay with their users.
        assert len(vms - running) == 1
        assert len(running & vms) == 3
        assert h.metrics.last_gauge("brake.engaged", pool="a") == 1
        assert not _held(redis_client), "running VMs are not moved"


def test_a_pool_of_one_never_brakes(redis_client: redis.Redis) -> None:
    starter, provider = _start(redis_client, size=1, max_unhealthy=0.0,
                               max_unhealthy_window=WINDOW)
    with starter as h:
        (vm1,) = h.wait_full("a", 1)
        h.quiesce()
        _fail(h, provider, {vm1})
        wait_until(lambda: _destroyed(redis_client, {vm1}), 10, "the first VM destroyed")
        (vm2,) = h.wait_full("a", 1)
        _fail(h, provider, {vm2})
        wait_until(lambda: _destroyed(redis_client, {vm2}), 10, "the second VM destroyed")
        assert not _held(redis_client)


def test_status_shows_the_brake_of_pools_that_have_one(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 5, max_unhealthy=0.4, max_unhealthy_window=WINDOW),
                          pool("b", 1)], vm_checktime=1, check_loop_delay_min=30,
                         check_loop_delay_max=30)
    provider = SickReadiness(context_for(config), rng=random.Random(3), sleep=lambda _s: None)
    with started(redis_client, config, provider=provider) as h:
        first = h.wait_full("a", 5)
        h.wait_full("b", 1)
        h.quiesce()
        client = api(redis_client, config).client
        pools = client.simulate_get("/api/v3/status").json["pools"]
        assert pools["a"]["brake"] == {"engaged": False, "failures": 0, "held": 0}
        assert "brake" not in pools["b"], "no brake configured: vmpooler's entry"
        _fail(h, provider, set(sorted(first)[:4]))
        h.advance(60, step=30)
        body = client.simulate_get("/api/v3/status").json
        assert body["pools"]["a"]["brake"] == {"engaged": True, "failures": 4, "held": 2}
        assert body["pools"]["a"]["ready"] == len(redis_client.smembers(schema.ready("a")))


class _Lease:
    """The fence a pool actor holds: the lease key and the value it believes it holds."""

    key = schema.lease("pool", "a")

    def held(self) -> str | None:
        return "1 me"


def test_held_moves_run_behind_the_pool_lease(redis_client: redis.Redis) -> None:
    store = BrakeStore(redis_client, fence=_Lease())
    redis_client.sadd(schema.ready("a"), "vm1", "vm2")
    redis_client.set(_Lease.key, "1 me")
    assert store.hold("a", "vm1", now="now") and store.hold("a", "vm2", now="now")
    assert store.unhold("a", "vm1", to_ready=True)
    redis_client.set(_Lease.key, "2 another")  # the pool now belongs to another manager
    with pytest.raises(Fenced):
        store.unhold("a", "vm2", to_ready=True)
    assert store.held("a") == {"vm2"}
    assert set(redis_client.smembers(schema.ready("a"))) == {"vm1"}


# -- the rule -------------------------------------------------------------------------------
def test_rule_engages_only_above_the_share_and_from_two_vms() -> None:
    rule = BrakeRule(0.4, WINDOW)
    assert not rule.over(2, 5) and rule.over(3, 5)
    assert not rule.over(1, 2) and rule.over(2, 2)
    zero = BrakeRule(0.0, WINDOW)
    assert not zero.over(1, 10) and zero.over(2, 10)
    assert not zero.over(5, 1), "a pool of one never brakes"


def test_failure_window_counts_vms_within_the_window() -> None:
    window = FailureWindow(10.0)
    window.record("a", 0.0)
    window.record("b", 5.0)
    window.record("a", 6.0)  # the same VM again: one failure, refreshed
    assert window.count(9.0) == 2
    assert window.count(14.5) == 2
    assert window.count(15.5) == 1
    assert window.count(16.0) == 0


# -- configuration ----------------------------------------------------------------------------
def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "vmpooler.yaml"
    path.write_text(text, encoding="utf-8")
    return load_config(str(path), environ={}), path


def test_config_reads_a_percentage_or_a_fraction_with_a_pool_override(tmp_path: Path) -> None:
    config, _ = _load(tmp_path, """
:config:
  max_unhealthy: '40%'
:pools:
  - name: a
    size: 5
  - name: b
    size: 5
    max_unhealthy: 0.25
    max_unhealthy_window: 120
  - name: c
    size: 5
    max_unhealthy: 100%
""")
    assert config.pool("a").brake(config.settings) == (0.4, 600.0)
    assert config.pool("b").brake(config.settings) == (0.25, 120.0)
    assert config.pool("c").brake(config.settings) == (None, 600.0)
    assert not unacted_warnings(config, environ={})


def test_brake_is_off_by_default() -> None:
    config = make_config([pool("a", 5)])
    assert config.pool("a").brake(config.settings)[0] is None


@pytest.mark.parametrize("where,value", [
    ("config", "'140%'"), ("config", "two"), ("pool", "1.5"), ("pool", "true"),
])
def test_a_bad_share_names_file_line_and_key(tmp_path: Path, where: str, value: str) -> None:
    top = f"  max_unhealthy: {value}\n" if where == "config" else ""
    own = f"    max_unhealthy: {value}\n" if where == "pool" else ""
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, f":config:\n{top}:pools:\n  - name: a\n    size: 5\n{own}")
    text = str(caught.value)
    line = 2 if where == "config" else 5
    key = "config.max_unhealthy" if where == "config" else "pools[0].max_unhealthy"
    assert f"vmpooler.yaml:{line}: {key}:" in text, text
    assert "'40%'" in text


def test_a_window_without_the_brake_is_reported_unacted(tmp_path: Path) -> None:
    config, _ = _load(tmp_path, """
:config:
  max_unhealthy_window: 300
:pools:
  - name: a
    size: 5
    max_unhealthy_window: 60
""")
    warnings = [str(w) for w in unacted_warnings(config, environ={})]
    assert any(":3: config.max_unhealthy_window:" in w for w in warnings), warnings
    assert any(":7: pools[0].max_unhealthy_window:" in w for w in warnings), warnings
