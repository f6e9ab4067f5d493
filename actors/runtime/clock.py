"""Time, injected: a clock and a scheduler that delivers timed ``tell``s.

Only :class:`RealClock` and :class:`ThreadScheduler` read the real time. Tests use
:class:`FakeClock`, which is both clock and scheduler: :meth:`FakeClock.advance` moves time
forward and delivers every timer that fell due, in due order, before it returns.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pykka

__all__ = ["Clock", "FakeClock", "RealClock", "Scheduler", "ThreadScheduler", "Timer"]

log = logging.getLogger(__name__)


class Clock(Protocol):
    """Where actors read the time."""

    def now(self) -> float:
        """Wall-clock time, epoch seconds (for timestamps written to Redis)."""

    def monotonic(self) -> float:
        """A monotonic reading in seconds (for durations and deadlines)."""


class Timer(Protocol):
    """A scheduled delivery that can be cancelled (a no-op once delivered)."""

    def cancel(self) -> None:
        """Do not deliver the message."""


class Scheduler(Protocol):
    """Delivers a message to an actor after a delay."""

    def tell_later(self, delay: float, ref: pykka.ActorRef[Any], message: Any) -> Timer:
        """Tell ``message`` to ``ref`` after ``delay`` seconds.

        Delivery to a dead actor is silently dropped. Order among timers due at the same
        moment is the order they were scheduled in.
        """

    def stop(self) -> None:
        """Drop every pending timer and stop delivering."""


class RealClock:
    """The system's clocks."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


def _deliver(ref: pykka.ActorRef[Any], message: Any) -> None:
    try:
        ref.tell(message)
    except pykka.ActorDeadError:
        log.debug("timer for dead actor %s dropped: %r", ref, message)


@dataclass(order=True)
class _Entry:
    due: float
    seq: int
    ref: pykka.ActorRef[Any] = field(compare=False)
    message: Any = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ThreadScheduler:
    """One thread, one heap of timers, however many timers there are."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or RealClock()
        self._heap: list[_Entry] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="vmpooler-scheduler", daemon=True)
        self._thread.start()

    def tell_later(self, delay: float, ref: pykka.ActorRef[Any], message: Any) -> Timer:
        entry = _Entry(self._clock.monotonic() + max(0.0, delay), next(self._seq), ref, message)
        with self._cond:
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._cond.notify()
        return entry

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    if not self._heap:
                        self._cond.wait()
                        continue
                    wait = self._heap[0].due - self._clock.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(timeout=wait)
                if self._stopped:
                    return
                entry = heapq.heappop(self._heap)
            if not entry.cancelled:
                _deliver(entry.ref, entry.message)


class FakeClock:
    """A clock and scheduler for tests: time moves only when :meth:`advance` is called.

    ``now()`` starts at ``start`` (epoch seconds); ``monotonic()`` starts at 0 and moves with it.
    Messages scheduled with a zero delay are delivered by the next :meth:`advance` (use
    ``advance(0)``), never from inside ``tell_later``.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._start = start
        self._elapsed = 0.0
        self._heap: list[_Entry] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self.delivered: list[tuple[float, Any]] = []

    def now(self) -> float:
        with self._lock:
            return self._start + self._elapsed

    def monotonic(self) -> float:
        with self._lock:
            return self._elapsed

    def tell_later(self, delay: float, ref: pykka.ActorRef[Any], message: Any) -> Timer:
        with self._lock:
            entry = _Entry(self._elapsed + max(0.0, delay), next(self._seq), ref, message)
            heapq.heappush(self._heap, entry)
        return entry

    def pending(self) -> list[tuple[float, Any]]:
        """``(due in seconds from now, message)`` of every live timer, soonest first."""
        with self._lock:
            return [
                (e.due - self._elapsed, e.message)
                for e in sorted(self._heap)
                if not e.cancelled
            ]

    def next_due(self) -> float | None:
        """Seconds from now until the soonest live timer is due (0 when one is already due),
        or None when no timer is pending. Cancelled timers are not counted."""
        with self._lock:
            while self._heap and self._heap[0].cancelled:
                heapq.heappop(self._heap)
            if not self._heap:
                return None
            return max(0.0, self._heap[0].due - self._elapsed)

    def advance(self, seconds: float, *, after_each: Callable[[], None] | None = None) -> None:
        """Move time forward by ``seconds``, delivering due timers in order.

        Timers scheduled by the recipients of delivered messages are delivered too if they
        fall due within the window (``after_each`` runs after each delivery and may be used
        to let the recipient handle its message first, e.g. by draining its mailbox).
        """
        target = self.monotonic() + seconds
        while True:
            with self._lock:
                if not self._heap or self._heap[0].due > target:
                    self._elapsed = max(self._elapsed, target)
                    return
                entry = heapq.heappop(self._heap)
                self._elapsed = max(self._elapsed, entry.due)
            if entry.cancelled:
                continue
            self.delivered.append((entry.due, entry.message))
            _deliver(entry.ref, entry.message)
            if after_each is not None:
                after_each()

    def stop(self) -> None:
        with self._lock:
            self._heap.clear()
