"""Starting the manager while Redis may not answer yet: retries with back-off.

In a cluster, vmpooler and its Redis start in no particular order, and Redis may restart
under a running vmpooler. Exiting when Redis does not answer at start would only make the
orchestrator restart vmpooler in a loop (vmpooler PR #701), so the commands wait instead:

* ``vmpooler manager`` retries :meth:`PoolerSystem.start` on its main thread
  (:func:`retry_while_unavailable`);
* ``vmpooler run`` serves the API at once (answering 503 where Redis is needed, as
  ``vmpooler api`` does) and its worker starts the manager from a thread once Redis answers
  (:class:`ManagerStarter`).

Each failed attempt is logged once, ``[!] [manager] redis is unavailable (<error>); retrying
in <n>s``; the waits are 1 s, doubling up to a cap, and end at once when the process is told
to stop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import redis

__all__ = ["Backoff", "ManagerStarter", "retry_while_unavailable"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class _Stoppable(Protocol):
    def stop(self) -> None: ...


_S = TypeVar("_S", bound=_Stoppable)


@dataclass
class Backoff:
    """Delays between attempts: ``first`` seconds, doubling, never above ``cap``."""

    first: float = 1.0
    cap: float = 30.0
    _next: float | None = field(default=None, init=False, repr=False)

    def next_delay(self) -> float:
        """The delay before the next attempt; each call doubles the following one."""
        delay = self.first if self._next is None else self._next
        self._next = min(self.cap, delay * 2)
        return min(self.cap, delay)


def _unavailable(error: redis.RedisError, delay: float) -> None:
    log.error("[!] [manager] redis is unavailable (%s); retrying in %.0fs", error, delay)


def retry_while_unavailable(
    attempt: Callable[[], _T],
    stop: threading.Event,
    backoff: Backoff,
    *,
    wait: Callable[[float], bool] | None = None,
) -> _T | None:
    """``attempt()``'s result, calling it again after each ``redis.RedisError`` (logged once
    per failure, then a wait of ``backoff.next_delay()``). None when ``stop`` is set before
    an attempt or during a wait (the wait ends at once). Any other exception propagates.

    ``wait(seconds)`` returns True when told to stop; it defaults to ``stop.wait``.
    """
    wait = stop.wait if wait is None else wait
    while not stop.is_set():
        try:
            return attempt()
        except redis.RedisError as exc:
            delay = backoff.next_delay()
            _unavailable(exc, delay)
            if wait(delay):
                return None
    return None


class ManagerStarter:
    """Starts one system (``vmpooler run``'s :class:`PoolerSystem`) without holding up the
    caller while Redis is unavailable.

    :meth:`begin` tries once on the calling thread: the system is handed to ``on_started``
    at once, or any error other than ``redis.RedisError`` propagates, as it did before
    there were retries. When Redis does not answer, a thread (``vmpooler-manager-start``)
    goes on trying with :func:`retry_while_unavailable`; it calls ``on_started(system)``
    when an attempt succeeds, or ``on_failed(error)`` when one fails otherwise (then it
    tries no more). Both callbacks run on that thread, never after :meth:`stop` returned.
    """

    def __init__(
        self,
        start: Callable[[], _S],
        *,
        on_started: Callable[[_S], None],
        on_failed: Callable[[BaseException], None],
        backoff: Backoff | None = None,
    ) -> None:
        self._start = start
        self._on_started = on_started
        self._on_failed = on_failed
        self._backoff = backoff or Backoff()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def waiting(self) -> bool:
        """True while the thread is still trying (the system is not started yet)."""
        return self._thread is not None and self._thread.is_alive()

    def begin(self) -> None:
        """The first attempt, on this thread; then the thread, if Redis did not answer."""
        try:
            system = self._start()
        except redis.RedisError as exc:
            delay = self._backoff.next_delay()
            _unavailable(exc, delay)
            self._thread = threading.Thread(target=self._retry, args=(delay,),
                                            name="vmpooler-manager-start")
            self._thread.start()
            return
        self._on_started(system)

    def stop(self, timeout: float = 5.0) -> None:
        """Try no more: a wait under way ends at once, and an attempt under way is given up
        to ``timeout`` seconds to end; a system it still starts is stopped by the thread,
        not handed over. Idempotent; callable from any thread but the starter's own."""
        with self._lock:
            self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("[!] [manager] still starting after %.0fs; it stops once started",
                            timeout)

    def _retry(self, first_wait: float) -> None:
        if self._stop.wait(first_wait):
            return
        try:
            system = retry_while_unavailable(self._start, self._stop, self._backoff)
        except BaseException as exc:
            with self._lock:
                if not self._stop.is_set():
                    self._on_failed(exc)
            return
        if system is None:
            return
        with self._lock:
            if not self._stop.is_set():
                self._on_started(system)
                return
        system.stop()  # started after stop(): nobody else will stop it
