"""Concurrent identical reads that share one run, never answered by a run that began before
the call (:class:`SharedReads`): what lets concurrent ``/status`` requests of one process read
Redis once per batch of callers
(:class:`~vmpooler.actors.storage.status_store.StatusStore`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["SharedReads"]

T = TypeVar("T")


class _Flight(Generic[T]):
    """One read that callers wait on: its result or its exception, once ``done`` is set."""

    __slots__ = ("callers", "done", "error", "result")

    def __init__(self) -> None:
        self.callers = 1  # the calls that will be answered by it
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


class SharedReads(Generic[T]):
    """Concurrent calls of :meth:`read` with equal keys share one run of the read, and no
    call is answered by a run that started before the call.

    Per key at most one run is in progress and at most one waits to start after it. A call
    with nothing in progress runs the read itself; a call while one is in progress joins
    the waiting run (creating it, and then running it once the one in progress is over).
    So a caller waits at most for the end of the run in progress and then one run, and
    every caller of a run asked before that run began.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[Hashable, _Flight[T]] = {}
        self._waiting: dict[Hashable, _Flight[T]] = {}

    def waiting(self, key: Hashable) -> int:
        """How many calls wait for the next run of ``key`` (0 when none is queued)."""
        with self._lock:
            flight = self._waiting.get(key)
            return flight.callers if flight is not None else 0

    def read(self, key: Hashable, run: Callable[[], T]) -> T:
        """``run()``'s result (or its exception) from a run that began after this call."""
        with self._lock:
            flight = self._waiting.get(key)
            if flight is not None:
                joined, before = True, None
                flight.callers += 1
            else:
                joined, flight = False, _Flight()
                before = self._running.get(key)
                if before is None:
                    self._running[key] = flight
                else:
                    self._waiting[key] = flight
        if joined:
            flight.done.wait()
            return flight.outcome()
        if before is not None:
            before.done.wait()
            with self._lock:  # no run of this key in progress now: this one starts
                del self._waiting[key]
                self._running[key] = flight
        try:
            flight.result = run()
        except BaseException as exc:
            flight.error = exc
        finally:
            with self._lock:
                del self._running[key]
            flight.done.set()
        return flight.outcome()
