"""Adaptive timeouts for provider calls (reference §4.11), fed with real call durations.

vmpooler 3.9.1 defines an adaptive timeout but never feeds it. Here every provider call's
duration feeds the timeout of its kind of call, and that timeout is the one the provider
actor arms for the next call of that kind:

* after at least 10 of the last 100 durations, the timeout becomes ``round(p95 x 1.5)``
  clamped to ``[minimum, maximum]``, when that differs from the current one by more than
  5 s (vmpooler's rule);
* a failed short call shrinks it by 20 % (not below ``minimum``), so an outage is detected
  faster (vmpooler's rule). Long calls (clones, destroys, disks, snapshots, migrations,
  suspends and resumes) do not shrink: a clone that vCenter merely queued must not be cut off.

Short calls (inventory, readiness and running checks) use ``connection_pool_timeout_min``
/ ``_max`` / ``_initial`` (5 / 60 / 30 s), the three checks never less than the provider's
``probe_timeout`` plus that minimum (a probe that waits for a silent VM must not look like a
stalled provider); long calls range from 60 s to ``provider_call_timeout`` and start at it.
No timeout ever exceeds ``provider_call_timeout``. Durations count from submission, as the
timer does (time spent queued for a worker included), less the time the provider said its
work waited in its own queue (vCenter's task queue), when the timer was paused.
With ``adaptive_timeout_enabled: false`` every call uses ``provider_call_timeout``.

Not thread-safe, by design: it lives inside one provider actor.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from vmpooler.actors.messages import ProviderOp

__all__ = ["CHECK_OPS", "LONG_OPS", "AdaptiveTimeout", "CallTimeouts", "TimeoutReading"]

LONG_OPS = frozenset({
    ProviderOp.CLONE, ProviderOp.DESTROY, ProviderOp.MIGRATE, ProviderOp.CREATE_DISK,
    ProviderOp.CREATE_SNAPSHOT, ProviderOp.REVERT_SNAPSHOT, ProviderOp.PREPARE_TEMPLATE,
    ProviderOp.SUSPEND, ProviderOp.RESUME,
})
CHECK_OPS = frozenset({ProviderOp.CHECK_PENDING, ProviderOp.CHECK_READY,
                       ProviderOp.CHECK_RUNNING})
LONG_MINIMUM = 60.0
"""Seconds: the shortest timeout a long call gets (or ``provider_call_timeout`` if lower)."""


@dataclass(frozen=True, slots=True)
class TimeoutReading:
    """One timeout's state, for metrics: seconds now, p95 of its samples, sample count."""

    current: float
    p95: float
    samples: int


class AdaptiveTimeout:
    """One adaptive timeout; see the module docstring for the rules."""

    WINDOW = 100
    MIN_SAMPLES = 10
    MIN_CHANGE = 5.0

    def __init__(self, *, initial: float, minimum: float, maximum: float,
                 shrink_on_failure: bool = True) -> None:
        if not minimum <= maximum:
            raise ValueError(f"minimum {minimum} exceeds maximum {maximum}")
        self.minimum = float(minimum)
        self.maximum = float(maximum)
        self.current = min(self.maximum, max(self.minimum, float(initial)))
        self.shrink_on_failure = shrink_on_failure
        self._samples: deque[float] = deque(maxlen=self.WINDOW)

    @property
    def p95(self) -> float:
        """The 95th percentile of the recorded durations (vmpooler's index rule); 0 if none."""
        if not self._samples:
            return 0.0
        ordered = sorted(self._samples)
        index = min(len(ordered) - 1, max(0, math.ceil(len(ordered) * 0.95) - 1))
        return ordered[index]

    def record_success(self, seconds: float) -> None:
        """A call finished (in time or late) after ``seconds``."""
        self._samples.append(max(0.0, float(seconds)))
        if len(self._samples) < self.MIN_SAMPLES:
            return
        proposed = min(self.maximum, max(self.minimum, float(round(self.p95 * 1.5))))
        if abs(proposed - self.current) > self.MIN_CHANGE:
            self.current = proposed

    def record_failure(self) -> None:
        """A call failed or timed out: shrink by 20 % unless this timeout never shrinks."""
        if self.shrink_on_failure:
            self.current = max(self.minimum, float(round(self.current * 0.8)))

    def reading(self) -> TimeoutReading:
        return TimeoutReading(self.current, self.p95, len(self._samples))


class CallTimeouts:
    """The timeout of each kind of provider call. ``enabled=False`` gives ``cap`` always."""

    def __init__(self, *, cap: float, enabled: bool = True, minimum: float = 5.0,
                 maximum: float = 60.0, initial: float = 30.0, probe: float = 5.0) -> None:
        self.cap = float(cap)
        self.enabled = enabled
        self._timeouts: dict[ProviderOp, AdaptiveTimeout] = {}
        for op in ProviderOp:
            if op in LONG_OPS:
                timeout = AdaptiveTimeout(initial=self.cap, minimum=min(LONG_MINIMUM, self.cap),
                                          maximum=self.cap, shrink_on_failure=False)
            else:
                low = minimum + probe if op in CHECK_OPS else minimum
                high = min(max(maximum, low), self.cap)
                timeout = AdaptiveTimeout(initial=max(initial, low), minimum=min(low, high),
                                          maximum=high)
            self._timeouts[op] = timeout

    def for_op(self, op: ProviderOp) -> float:
        """Seconds to allow the next call of kind ``op``."""
        return self._timeouts[op].current if self.enabled else self.cap

    def record(self, op: ProviderOp, seconds: float | None) -> None:
        """A call of kind ``op`` finished after ``seconds``, or failed (``None``)."""
        if seconds is None:
            self._timeouts[op].record_failure()
        else:
            self._timeouts[op].record_success(seconds)

    def readings(self) -> dict[ProviderOp, TimeoutReading]:
        """The state of every timeout that has samples (for the monitor's gauges); none
        when adaptive timeouts are off."""
        if not self.enabled:
            return {}
        return {op: t.reading() for op, t in self._timeouts.items() if t.reading().samples}
