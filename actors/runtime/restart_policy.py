"""``RestartPolicy``: when a crashed actor is started again, and when its supervisor gives up;
:class:`Restarts`: a supervisor's bookkeeping of its children's crashes under it.

One policy for every supervised actor in the system: the :class:`Supervisor` applies it to
its children (pools, providers, the on-demand manager, ...), and the on-demand manager
applies the very same object to the request actors it starts, each through a
:class:`Restarts` (the same histories, metrics and log lines). Only what "giving up" means
differs by supervisor (the ``on_given_up`` hook): the Supervisor stops restarting the child
and removes it from the directory; the on-demand manager fails the request.

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

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from vmpooler.actors.messages import ActorCrashed
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.runtime.clock import Clock

__all__ = ["OUTAGE_ERRORS", "CrashLines", "RestartHistory", "RestartPolicy", "Restarts"]

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


@dataclass(frozen=True, slots=True)
class CrashLines:
    """How one supervisor's crash lines read: ``who`` names the child (a %-format of its
    key, e.g. ``"[supervisor] '%s'"``), ``giving_up`` ends the line of a give-up (e.g.
    ``"not restarting it"``), ``delay`` formats the back-off's seconds (e.g. ``"%.1f"``)."""

    who: str
    giving_up: str
    delay: str = "%.1f"


class Restarts:
    """One supervisor's restart bookkeeping: each child's recent crashes (a
    :class:`RestartHistory` by key) under the system's :class:`RestartPolicy`, and what a
    crash counts and logs. Owned by the supervisor's actor; not thread-safe.

    Every crash counts ``vmpooler_actor.crashed`` tagged ``actor`` (``actor_tag``, else the
    child's key). A restart logs ``[!] <who> crashed (<class>: <error>); restarting in
    <delay>s``. A give-up counts ``vmpooler_actor.given_up`` (same tag), logs ``[!] <who>
    crashed <n> times within <period>s (<class>: <error>); <giving_up>``, then calls
    ``on_given_up(key, crash)``: what giving up means is the supervisor's. Lines go to
    ``log``, the supervisor's logger, at error level.
    """

    def __init__(self, policy: RestartPolicy, *, clock: Clock, metrics: Metrics,
                 log: logging.Logger, lines: CrashLines,
                 on_given_up: Callable[[str, ActorCrashed], None],
                 actor_tag: str | None = None) -> None:
        self.policy = policy
        self.clock = clock
        self.metrics = metrics
        self.log = log
        self.lines = lines
        self.on_given_up = on_given_up
        self.actor_tag = actor_tag
        self._histories: dict[str, RestartHistory] = {}

    def crashed(self, key: str, crash: ActorCrashed) -> float | None:
        """Count and log the crash of child ``key`` and decide: the seconds before its
        restart (the caller schedules it), or None once ``on_given_up`` has run."""
        tags = {"actor": self.actor_tag if self.actor_tag is not None else key}
        self.metrics.increment("vmpooler_actor.crashed", tags=tags)
        history = self._histories.setdefault(key, RestartHistory())
        delay = self.policy.on_crash(history, self.clock.monotonic(), crash.error_class)
        lines = self.lines
        if delay is None:
            self.metrics.increment("vmpooler_actor.given_up", tags=tags)
            self.log.error(f"[!] {lines.who} crashed %d times within %ds (%s: %s); "
                           f"{lines.giving_up}", key, len(history) + 1,
                           int(self.policy.period), crash.error_class, crash.error)
            self.on_given_up(key, crash)
            return None
        self.log.error(f"[!] {lines.who} crashed (%s: %s); restarting in {lines.delay}s",
                       key, crash.error_class, crash.error, delay)
        return delay

    def count(self, key: str) -> int:
        """Restarts of child ``key`` within the window, as of its last crash."""
        history = self._histories.get(key)
        return 0 if history is None else len(history)

    def forget(self, key: str) -> None:
        """Forget child ``key``'s crashes (its next crash starts a fresh history)."""
        self._histories.pop(key, None)
