"""``ActorExecutor``: a fixed number of threads that run the mailboxes of many actors.

A :class:`~vmpooler.actors.runtime.pooled.PooledActor` has no thread of its own. When a
message reaches an idle one, its mailbox puts the actor on this executor's run queue; a
worker thread takes it, handles up to ``batch`` of its messages, and puts it back at the
end of the run queue if more are waiting, so one busy actor cannot starve the others. The
mailbox makes sure an actor is on the run queue (or running) at most once, so at most one
thread runs a given actor at a time and its messages are handled in order.

Threads: exactly ``threads`` daemon threads named ``<name>-<n>``, started by :meth:`start`,
however many actors there are. They are daemon threads so that a handler stuck on a dead
service cannot keep the process from exiting; :meth:`stop` is the orderly way out.

**Never block a worker on another pooled actor.** A handler running here that waits for a
pooled actor's answer (``ask(...)`` with ``block=True``, ``future.get()``,
``stop(block=True)``) holds one of the few threads while the answer may need a thread
itself: with every worker waiting, nothing runs again (a deadlock). Pooled actors only
``tell``; a blocking ``get()`` of a pooled actor's future on a worker thread raises
:class:`BlockingCallError` instead of hanging.

The executor is owned by whoever builds it (``PoolerSystem`` starts it before the actors
that use it and stops it after them); nothing here is global.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Protocol

__all__ = ["DEFAULT_THREADS", "ActorExecutor", "BlockingCallError", "Schedulable",
           "on_worker_thread"]

log = logging.getLogger(__name__)

DEFAULT_THREADS = 8
"""Threads of the system's executor: under the Redis connection pool's default size (10), as
the pooled actors' handlers are mostly Redis round trips."""

_STOP = object()
_local = threading.local()


class BlockingCallError(RuntimeError):
    """A pooled actor's future was waited on from one of an executor's worker threads."""


class Schedulable(Protocol):
    """What the run queue holds: an actor whose mailbox has messages (or has to start)."""

    def _actor_run_slice(self) -> None:
        """Handle up to a batch of messages; called on a worker thread, never concurrently."""

    def _actor_abandon(self) -> None:
        """The executor stopped before it could run the actor: stop it without running."""


def on_worker_thread() -> bool:
    """True when the calling thread is a worker of some :class:`ActorExecutor`."""
    return getattr(_local, "executor", None) is not None


class ActorExecutor:
    """Runs :class:`PooledActor` mailboxes on ``threads`` threads, ``batch`` messages per turn.

    Thread-safe. :meth:`submit` never blocks.
    """

    def __init__(self, threads: int = DEFAULT_THREADS, *, batch: int = 32,
                 name: str = "vmpooler-actor") -> None:
        self.size = max(1, int(threads))
        self.batch = max(1, int(batch))
        self.name = name
        self._runq: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stopped = False
        self._active = 0  # actors submitted whose turn has not ended
        self._active_lock = threading.Lock()
        self._went_idle = threading.Condition(self._active_lock)

    def start(self) -> ActorExecutor:
        """Start the worker threads (idempotent); returns ``self``."""
        with self._lock:
            if self._stopped:
                raise RuntimeError(f"executor {self.name} is stopped")
            while len(self._threads) < self.size:
                thread = threading.Thread(target=self._work, daemon=True,
                                          name=f"{self.name}-{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
        return self

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stopped

    def threads_alive(self) -> int:
        """Worker threads still running."""
        with self._lock:
            return sum(1 for t in self._threads if t.is_alive())

    def submit(self, actor: Schedulable) -> None:
        """Put ``actor`` on the run queue. After :meth:`stop` the actor is abandoned on the
        caller's thread instead (it is stopped; its pending asks get ``ActorDeadError``)."""
        if self._stopped:
            actor._actor_abandon()
            return
        with self._active_lock:
            self._active += 1
        self._runq.put(actor)

    def idle(self) -> bool:
        """True when no actor is on the run queue or running a turn. An actor with more
        mail is put back before its turn ends, so a busy one never reads as idle; a
        message sent later makes it busy again (for a driver of a fake clock, which reads
        this between moves of time, when nothing else sends)."""
        with self._active_lock:
            return self._active == 0

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for :meth:`idle`; returns it."""
        with self._went_idle:
            return self._went_idle.wait_for(lambda: self._active == 0, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking work and end the threads (idempotent).

        Actors already on the run queue get their turn first; an actor scheduled after the
        stop, or still queued when the threads are gone, is abandoned. Waits up to
        ``timeout`` seconds in all for the threads (a handler that does not return keeps
        its daemon thread)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            threads = list(self._threads)
        for _ in threads:
            self._runq.put(_STOP)
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        while True:
            try:
                item = self._runq.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                item._actor_abandon()  # type: ignore[attr-defined]

    def _work(self) -> None:
        _local.executor = self
        while True:
            item = self._runq.get()
            if item is _STOP:
                return
            try:
                item._actor_run_slice()  # type: ignore[attr-defined]
            except BaseException:  # a worker never dies; the actor's loop has its own net
                log.exception("[!] [%s] an actor's turn raised", self.name)
            finally:
                with self._went_idle:
                    self._active -= 1
                    if self._active == 0:
                        self._went_idle.notify_all()
