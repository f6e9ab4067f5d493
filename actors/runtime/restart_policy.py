"""``RestartPolicy``: when a crashed actor is started again, and when its supervisor gives up.

One policy for every supervised actor in the system: the :class:`Supervisor` applies it to
its children (pools, providers, the on-demand manager, ...), and the on-demand manager
applies the very same object to the request actors it starts. Only what "giving up" means
differs by supervisor: the Supervisor stops restarting the child and removes it from the
directory; the on-demand manager fails the request.

The rules (OTP's intensity and period, with exponential back-off):

* a crash is restarted after ``backoff * 2**n`` seconds (at most ``max_backoff``), ``n``
  being the child's restarts within the last ``period`` seconds;
* a crash when ``intensity`` restarts already happened within ``period`` seconds is one too
  many: give up;
* a crash whose error class is in ``outage_errors`` (Redis unreachable: not the child's
  fault) is backed off like any other but never counts towards the budget: an outage is
  waited out, however long it lasts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["OUTAGE_ERRORS", "RestartHistory", "RestartPolicy"]

OUTAGE_ERRORS = frozenset({"ConnectionError", "TimeoutError", "BusyLoadingError"})
"""Error class names (redis-py's) that mean Redis is away, not that the actor is broken."""


@dataclass
class RestartHistory:
    """One child's recent restarts: monotonic times, and whether each counted towards the
    budget. Owned by the supervisor's actor; not thread-safe."""

    times: list[float] = field(default_factory=list)
    counted: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.times)

    def forget_before(self, horizon: float) -> None:
        """Drop the restarts that happened at or before ``horizon``."""
        keep = [i for i, t in enumerate(self.times) if t > horizon]
        if len(keep) != len(self.times):
            self.times = [self.times[i] for i in keep]
            self.counted = [self.counted[i] for i in keep]

    def budget_used(self) -> int:
        """Restarts in the history that count towards the budget."""
        return sum(self.counted)


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """Back-off, restart budget within a window, and the errors the budget ignores.

    Immutable and shared; the per-child state is a :class:`RestartHistory`.
    """

    backoff: float = 1.0
    max_backoff: float = 60.0
    intensity: int = 5
    period: float = 300.0
    outage_errors: frozenset[str] = OUTAGE_ERRORS

    def on_crash(self, history: RestartHistory, now: float, error_class: str) -> float | None:
        """Record a crash at ``now`` (monotonic) and decide: the delay in seconds before
        the restart, or None to give up. Restarts older than ``period`` are forgotten
        first; a give-up records nothing."""
        history.forget_before(now - self.period)
        counts = error_class not in self.outage_errors
        if counts and history.budget_used() >= self.intensity:
            return None
        delay: float = min(self.max_backoff, self.backoff * (2 ** min(len(history), 62)))
        history.times.append(now)
        history.counted.append(counts)
        return delay
