"""Circuit breaker state machine, driven by a fake clock."""

from __future__ import annotations

import pytest

from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.runtime.breaker import BreakerState, CircuitBreaker, CircuitOpenError


class FakeClock:
    """A mutable float that the breaker reads as its clock."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(
    clock: FakeClock, metrics: RecordingMetrics | None = None, **kwargs: object
) -> CircuitBreaker:
    options: dict[str, object] = {"failure_threshold": 3, "timeout": 30.0, "half_open_attempts": 2}
    options.update(kwargs)
    return CircuitBreaker("vsphere", clock=clock, metrics=metrics, **options)  # type: ignore[arg-type]


def fail_times(breaker: CircuitBreaker, count: int) -> None:
    for _ in range(count):
        assert breaker.allow()
        breaker.record_failure()


def events(metrics: RecordingMetrics) -> list[tuple[str, str, float]]:
    return [(kind, name, value) for kind, name, value, _ in metrics.records]


def test_state_values() -> None:
    assert [s.value for s in BreakerState] == ["closed", "open", "half_open"]


def test_closed_allows_and_success_resets_count() -> None:
    clock = FakeClock()
    breaker = make(clock)
    assert breaker.state is BreakerState.CLOSED
    fail_times(breaker, 2)
    assert breaker.failure_count == 2
    assert breaker.allow()
    breaker.record_success()
    assert breaker.failure_count == 0
    fail_times(breaker, 2)
    assert breaker.state is BreakerState.CLOSED
    assert breaker.retry_after() == 0.0


def test_opens_after_threshold_consecutive_failures() -> None:
    clock = FakeClock()
    metrics = RecordingMetrics()
    breaker = make(clock, metrics)
    fail_times(breaker, 3)
    assert breaker.state is BreakerState.OPEN
    assert not breaker.allow()
    assert breaker.retry_after() == 30.0
    assert events(metrics) == [
        ("increment", "circuit_breaker.opened", 1),
        ("gauge", "circuit_breaker.state", 1.0),
    ]
    assert all(tags == {"provider": "vsphere"} for *_, tags in metrics.records)


def test_open_until_timeout_after_last_failure_then_half_open() -> None:
    clock = FakeClock()
    metrics = RecordingMetrics()
    breaker = make(clock, metrics)
    fail_times(breaker, 3)
    clock.now += 20.0
    assert not breaker.allow()
    assert breaker.retry_after() == pytest.approx(10.0)
    breaker.record_failure()  # a call started before opening fails late: pushes the timeout
    assert breaker.state is BreakerState.OPEN
    assert breaker.retry_after() == pytest.approx(30.0)
    breaker.record_success()  # a late success while open changes nothing
    assert breaker.state is BreakerState.OPEN
    clock.now += 29.9
    assert not breaker.allow()
    clock.now += 0.1
    assert breaker.allow()
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.retry_after() == 0.0
    assert metrics.counts("circuit_breaker.half_open", provider="vsphere") == 1
    assert metrics.last_gauge("circuit_breaker.state", provider="vsphere") == 0.5


def test_half_open_limits_outstanding_trials() -> None:
    clock = FakeClock()
    breaker = make(clock, half_open_attempts=2)
    fail_times(breaker, 3)
    clock.now += 30.0
    assert breaker.allow()
    assert breaker.allow()
    assert not breaker.allow()  # two trials outstanding
    breaker.record_success()
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.allow()  # a slot freed


def test_half_open_successes_close() -> None:
    clock = FakeClock()
    metrics = RecordingMetrics()
    breaker = make(clock, metrics, half_open_attempts=2)
    fail_times(breaker, 3)
    clock.now += 30.0
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.failure_count == 0
    assert events(metrics) == [
        ("increment", "circuit_breaker.opened", 1),
        ("gauge", "circuit_breaker.state", 1.0),
        ("increment", "circuit_breaker.half_open", 1),
        ("gauge", "circuit_breaker.state", 0.5),
        ("increment", "circuit_breaker.closed", 1),
        ("gauge", "circuit_breaker.state", 0.0),
    ]
    # Closed again: it takes the full threshold to reopen.
    fail_times(breaker, 2)
    assert breaker.state is BreakerState.CLOSED


def test_half_open_failure_reopens() -> None:
    clock = FakeClock()
    metrics = RecordingMetrics()
    breaker = make(clock, metrics)
    fail_times(breaker, 3)
    clock.now += 30.0
    assert breaker.allow()
    breaker.record_success()
    assert breaker.allow()
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    assert not breaker.allow()
    assert breaker.retry_after() == 30.0
    assert metrics.counts("circuit_breaker.opened", provider="vsphere") == 2
    assert metrics.last_gauge("circuit_breaker.state") == 1.0
    clock.now += 30.0
    assert breaker.allow()  # half-open again, with a fresh success count
    breaker.record_success()
    assert breaker.state is BreakerState.HALF_OPEN


def test_disabled_always_allows() -> None:
    clock = FakeClock()
    metrics = RecordingMetrics()
    breaker = make(clock, metrics, enabled=False)
    fail_times(breaker, 50)
    assert breaker.allow()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.retry_after() == 0.0
    assert metrics.records == []


def test_call_wraps_function() -> None:
    clock = FakeClock()
    breaker = make(clock, failure_threshold=1)
    assert breaker.call(lambda: 42) == 42

    def boom() -> int:
        raise RuntimeError("provider down")

    with pytest.raises(RuntimeError):
        breaker.call(boom)
    assert breaker.state is BreakerState.OPEN
    clock.now += 12.5
    with pytest.raises(CircuitOpenError) as info:
        breaker.call(lambda: 1)
    assert info.value.name == "vsphere"
    assert info.value.retry_after == pytest.approx(17.5)
    assert "vsphere" in str(info.value)


def test_defaults_and_validation() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker("p", clock=clock)
    fail_times(breaker, 4)
    assert breaker.state is BreakerState.CLOSED
    fail_times(breaker, 1)
    assert breaker.state is BreakerState.OPEN
    assert breaker.retry_after() == 30.0
    assert "open" in repr(breaker)
    for bad in ({"failure_threshold": 0}, {"half_open_attempts": 0}, {"timeout": -1.0}):
        with pytest.raises(ValueError):
            CircuitBreaker("p", clock=clock, **bad)  # type: ignore[arg-type]
