"""What a provider actor reports: breaker changes logged once each and published (for
``/status``), the connection-pool monitor's gauges, and adaptive timeouts fed with real
call durations. Reuses the gated-provider rig of ``test_provider_actor``; the clock is fake."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from tests.harness import wait_until
from tests.test_provider_actor import (  # noqa: F401 (make_rig is a fixture)
    BREAKER_TIMEOUT,
    CALL_TIMEOUT,
    WAIT,
    Rig,
    make_rig,
)
from vmpooler.actors.messages import ProviderOp
from vmpooler.actors.runtime.adaptive_timeout import AdaptiveTimeout, CallTimeouts
from vmpooler.actors.storage.provider_store import ProviderHealth
from vmpooler.providers.base import ConnectionPoolHealth

BREAKER_LOG = "vmpooler.actors.provider.reports"


def breaker_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == BREAKER_LOG and "circuit breaker" in r.getMessage()]


def test_each_breaker_change_is_logged_once_and_published(
    make_rig: Callable[..., Rig], caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=BREAKER_LOG)
    published: list[ProviderHealth] = []
    rig = make_rig(publish_health=published.append)
    rig.settle()
    assert published[-1].breaker == "closed"
    rig.open_breaker()
    for _ in range(20):  # refused calls: no more lines
        rig.call(ProviderOp.LIST_VMS, None)
        assert rig.reply().failure.circuit_open  # type: ignore[union-attr]
    lines = breaker_lines(caplog)
    assert len(lines) == 1
    assert "circuit breaker opened after 3 failures (last: vCenter unreachable)" in lines[0]
    assert published[-1].breaker == "open"
    assert published[-1].last_error == "vCenter unreachable"
    rig.clock.advance(BREAKER_TIMEOUT)
    rig.call(ProviderOp.LIST_VMS, None)  # the trial closes it (half_open_attempts 1)
    assert rig.reply().failure is None
    assert [line.split(":")[0] for line in breaker_lines(caplog)[1:]] == [
        "[*] [gated] circuit breaker half-open", "[*] [gated] circuit breaker closed"]
    assert [p.breaker for p in published[-2:]] == ["half_open", "closed"]
    assert published[-1].last_error is None


def test_monitor_emits_gauges_and_republishes(make_rig: Callable[..., Rig]) -> None:
    published: list[ProviderHealth] = []
    rig = make_rig(publish_health=published.append, monitor_interval=10.0)
    rig.provider.connection_pool_health = lambda: ConnectionPoolHealth(  # type: ignore[method-assign]
        size=10, available=1, in_use=9, waiting=0)
    rig.settle()
    first = len(published)
    rig.clock.advance(10.0)
    wait_until(lambda: len(published) > first, WAIT, "a monitor tick")
    assert published[-1].connections == ConnectionPoolHealth(10, 1, 9, 0)
    assert rig.metrics.last_gauge("connection_pool.utilization", provider="gated") == 90.0
    assert rig.metrics.counts("connection_pool.critical", provider="gated") >= 1
    assert rig.metrics.last_gauge("circuit_breaker.state", provider="gated") == 0.0


def test_adaptive_timeouts_shorten_short_calls_to_what_they_take(
    make_rig: Callable[..., Rig],
) -> None:
    timeouts = CallTimeouts(cap=CALL_TIMEOUT * 10, minimum=5, maximum=60, initial=30)
    rig = make_rig(timeouts=timeouts)
    for _ in range(10):
        rig.call(ProviderOp.LIST_VMS, None)
        assert rig.reply().failure is None
    assert timeouts.for_op(ProviderOp.LIST_VMS) == 5.0  # real calls take ~0 s: the minimum
    assert timeouts.for_op(ProviderOp.CLONE) == CALL_TIMEOUT * 10  # long calls untouched
    rig.provider.hold(None)
    rig.call(ProviderOp.LIST_VMS, None)
    wait_until(lambda: rig.provider.count("vms_in_pool") == 11, WAIT, "the held listing")
    rig.clock.advance(4.9)
    rig.assert_no_reply()
    rig.clock.advance(0.1)
    failure = rig.reply().failure
    assert failure is not None and failure.timed_out
    assert failure.message == "list_vms timed out after 5s"


def test_adaptive_timeout_rules() -> None:
    t = AdaptiveTimeout(initial=30, minimum=5, maximum=60)
    for _ in range(9):
        t.record_success(20.0)
    assert t.current == 30  # fewer than 10 samples: unchanged
    t.record_success(20.0)
    assert t.current == 30  # round(20 x 1.5) = 30: no change
    for _ in range(10):
        t.record_success(38.0)
    assert t.current == 57  # p95 38 x 1.5
    t.record_success(1000.0)
    assert t.current == 57  # p95 of 21 samples is still 38: one slow call is an outlier
    t.record_failure()
    assert t.current == 46  # 57 x 0.8, rounded
    for _ in range(20):
        t.record_failure()
    assert t.current == 5
    long = AdaptiveTimeout(initial=600, minimum=60, maximum=600, shrink_on_failure=False)
    long.record_failure()
    assert long.current == 600
    checks = CallTimeouts(cap=600, minimum=5, maximum=60, initial=30, probe=6)
    for _ in range(10):
        for op in (ProviderOp.LIST_VMS, ProviderOp.CHECK_READY):
            checks.record(op, 0.01)
    assert checks.for_op(ProviderOp.LIST_VMS) == 5
    assert checks.for_op(ProviderOp.CHECK_READY) == 11  # never below minimum + probe time
    disabled = CallTimeouts(cap=99, enabled=False)
    disabled.record(ProviderOp.LIST_VMS, 0.0)
    assert disabled.for_op(ProviderOp.LIST_VMS) == 99
