"""Circuit breaker for provider calls (reference §4.11), as pure logic.

A breaker starts ``closed`` and lets every call through.  After ``failure_threshold``
consecutive failures it goes ``open`` and refuses calls until ``timeout`` seconds after the
*last* failure (a failure recorded while open, from a call that started earlier, pushes that
moment back).  The first ``allow()`` after that moves it to ``half_open``: trial calls go
through, any failure re-opens it and ``half_open_attempts`` successes close it.

Divergence from vmpooler: vmpooler does not limit concurrent trial calls in half-open; here
at most ``half_open_attempts`` trials may be outstanding (allowed but not yet recorded).

Every transition emits ``circuit_breaker.opened`` | ``circuit_breaker.half_open`` |
``circuit_breaker.closed`` (increment) and ``circuit_breaker.state`` (gauge: closed 0,
half-open 0.5, open 1), tagged ``{"provider": name}``.

**Not thread-safe, by design**: a breaker lives inside one actor and is only touched from
that actor's thread.  It starts no threads and never sleeps; time comes from ``clock``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TypeVar

from vmpooler.actors.metrics.backends import Metrics, NullMetrics

__all__ = ["STATE_GAUGE", "BreakerState", "CircuitBreaker", "CircuitOpenError"]

T = TypeVar("T")


class BreakerState(enum.Enum):
    """The three breaker states; ``value`` is the name used in logs and status output."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


STATE_GAUGE = {BreakerState.CLOSED: 0.0, BreakerState.HALF_OPEN: 0.5, BreakerState.OPEN: 1.0}
"""The ``circuit_breaker.state`` gauge's value of each state (vmpooler's)."""
_EVENT = {
    BreakerState.CLOSED: "circuit_breaker.closed",
    BreakerState.HALF_OPEN: "circuit_breaker.half_open",
    BreakerState.OPEN: "circuit_breaker.opened",
}


class CircuitOpenError(Exception):
    """A call was refused because the breaker ``name`` is open (or its trials are all busy).

    ``retry_after`` is the number of seconds until a trial call may be allowed.  Callers
    should treat it as a transient error (vmpooler never counts it as permanent).
    """

    def __init__(self, name: str, retry_after: float) -> None:
        super().__init__(f"circuit breaker {name!r} is open; retry in {retry_after:.1f}s")
        self.name = name
        self.retry_after = retry_after


class CircuitBreaker:
    """One provider's breaker.  See the module docstring for the state machine.

    Typical use inside an actor::

        if not breaker.allow():
            raise CircuitOpenError(breaker.name, breaker.retry_after())
        try:
            result = provider_call()
        except Exception:
            breaker.record_failure()
            raise
        breaker.record_success()

    which ``call(fn)`` does for you.  Every ``allow()`` that returned True should be
    followed by exactly one ``record_success()`` or ``record_failure()``.
    ``enabled=False`` makes ``allow()`` always True and the ``record_*`` methods no-ops.
    ``on_change(old, new)`` is called after each transition.
    """

    def __init__(
        self,
        name: str,
        *,
        failure_threshold: int = 5,
        timeout: float = 30.0,
        half_open_attempts: int = 3,
        clock: Callable[[], float],
        metrics: Metrics | None = None,
        enabled: bool = True,
        on_change: Callable[[BreakerState, BreakerState], None] | None = None,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1")
        if half_open_attempts < 1:
            raise ValueError("half_open_attempts must be at least 1")
        if timeout < 0:
            raise ValueError("timeout must not be negative")
        self.name = name
        self.failure_threshold = failure_threshold
        self.timeout = float(timeout)
        self.half_open_attempts = half_open_attempts
        self.enabled = enabled
        self._clock = clock
        self._metrics: Metrics = metrics if metrics is not None else NullMetrics()
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._successes = 0
        self._trials = 0
        self._last_failure: float | None = None
        self.on_change = on_change
        """Called with (old, new) state after every transition, on the caller's thread."""

    @property
    def state(self) -> BreakerState:
        """The current state (an open breaker whose timeout has passed still reads ``OPEN``
        until the next ``allow()``)."""
        return self._state

    @property
    def failure_count(self) -> int:
        """Consecutive failures counted so far (reset when the breaker closes)."""
        return self._failures

    def _transition(self, new: BreakerState) -> None:
        old, self._state = self._state, new
        self._successes = 0
        self._trials = 0
        if new is BreakerState.CLOSED:
            self._failures = 0
        tags = {"provider": self.name}
        self._metrics.increment(_EVENT[new], tags=tags)
        self._metrics.gauge("circuit_breaker.state", STATE_GAUGE[new], tags=tags)
        if self.on_change is not None:
            self.on_change(old, new)

    def _reopen_at(self) -> float:
        return (self._last_failure or 0.0) + self.timeout

    def allow(self) -> bool:
        """May a call go ahead now?  Moves open → half-open once the timeout has passed.

        In half-open, a True answer reserves one of the ``half_open_attempts`` trial slots
        until the call's outcome is recorded.
        """
        if not self.enabled or self._state is BreakerState.CLOSED:
            return True
        if self._state is BreakerState.OPEN:
            if self._clock() < self._reopen_at():
                return False
            self._transition(BreakerState.HALF_OPEN)
        if self._trials >= self.half_open_attempts:
            return False
        self._trials += 1
        return True

    def record_success(self) -> None:
        """A call succeeded: resets the failure count, or counts towards closing in half-open."""
        if not self.enabled:
            return
        if self._state is BreakerState.CLOSED:
            self._failures = 0
        elif self._state is BreakerState.HALF_OPEN:
            self._trials = max(0, self._trials - 1)
            self._successes += 1
            if self._successes >= self.half_open_attempts:
                self._transition(BreakerState.CLOSED)

    def record_failure(self) -> None:
        """A call failed: may open the breaker (closed), re-open it (half-open), or push back
        the end of the open period (open)."""
        if not self.enabled:
            return
        self._failures += 1
        self._last_failure = self._clock()
        if self._state is BreakerState.HALF_OPEN or (
            self._state is BreakerState.CLOSED and self._failures >= self.failure_threshold
        ):
            self._transition(BreakerState.OPEN)

    def retry_after(self) -> float:
        """Seconds until ``allow()`` may return True: 0 when closed or half-open, else the
        rest of the open period.  (In half-open with every trial slot busy this is 0 too: a
        slot frees as soon as an outstanding trial is recorded.)"""
        if not self.enabled or self._state is not BreakerState.OPEN:
            return 0.0
        return max(0.0, self._reopen_at() - self._clock())

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` through the breaker: ``CircuitOpenError`` if refused, else its result.

        Any exception from ``fn`` is recorded as a failure and re-raised.
        """
        if not self.allow():
            raise CircuitOpenError(self.name, self.retry_after())
        try:
            result = fn()
        except Exception:
            self.record_failure()
            raise
        self.record_success()
        return result

    def __repr__(self) -> str:
        return (
            f"CircuitBreaker({self.name!r}, state={self._state.value}, "
            f"failures={self._failures}, enabled={self.enabled})"
        )
