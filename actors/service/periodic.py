"""The two habits every periodic manager-wide actor shares: one armed timer per kind of tick,
and a Redis outage logged once per outage instead of once per tick.

Both run inside their actor's mailbox (they are not thread-safe and need not be): a tick
message re-arms itself through :class:`Ticks` before it does its work, so a failing tick
never stops the next one, and :class:`OutageLog` turns "failed again" into a debug line.
"""

from __future__ import annotations

import logging
from typing import Any

import pykka

from vmpooler.actors.runtime.clock import Scheduler, Timer
from vmpooler.actors.storage.redis_errors import redis_failure

__all__ = ["OutageLog", "Ticks"]


class Ticks:
    """At most one armed timer per message type for one actor."""

    def __init__(self, scheduler: Scheduler, actor_ref: pykka.ActorRef[Any]) -> None:
        self.scheduler = scheduler
        self.actor_ref = actor_ref
        self._timers: dict[type, Timer] = {}

    def arm(self, delay: float, message: Any) -> None:
        """Deliver ``message`` to the actor after ``delay`` seconds, replacing a timer armed
        earlier for a message of the same type (e.g. by ``setup``)."""
        old = self._timers.pop(type(message), None)
        if old is not None:
            old.cancel()
        self._timers[type(message)] = self.scheduler.tell_later(delay, self.actor_ref, message)

    def cancel_all(self) -> None:
        """Cancel every armed timer (the actor's ``on_stop``)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()


class OutageLog:
    """Logs the first failure of an outage as an error and the first success after it.

    ``what`` names the actor in the log (``[heartbeat]``), ``failed`` and ``recovered`` are
    the phrases of the two lines (``not written`` / ``written again``)."""

    def __init__(self, log: logging.Logger, what: str, *, failed: str, recovered: str,
                 interval: float) -> None:
        self.log = log
        self.what = what
        self.failed_phrase = failed
        self.recovered_phrase = recovered
        self.interval = interval
        self.failing = False

    def failed(self, exc: BaseException) -> None:
        """Record a failed tick: an error line on the first of an outage."""
        if not self.failing:
            self.log.error("[!] [%s] %s: %s: %s; trying again every %gs", self.what,
                           self.failed_phrase, redis_failure(exc), exc, self.interval)
        self.failing = True

    def succeeded(self) -> None:
        """Record a successful tick: an info line if it ends an outage."""
        if self.failing:
            self.log.info("[*] [%s] %s", self.what, self.recovered_phrase)
        self.failing = False
