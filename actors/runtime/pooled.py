"""``PooledActor``: a pykka actor whose mailbox is served by a shared :class:`ActorExecutor`.

A ``pykka.ThreadingActor`` is one OS thread; a ``PooledActor`` is a mailbox and some state,
and borrows one of the executor's few threads only while it has messages. Thousands of them
(one per in-flight on-demand request) cost thousands of small objects, not thousands of
threads.

What callers may rely on, as for a ``ThreadingActor`` (the message semantics of
``pykka.Actor._actor_loop`` are kept, see :meth:`PooledActor._actor_handle`):

* ``tell``/``ask``/proxies work from any thread; replies are ``ThreadingFuture`` s
  (:class:`PooledFuture`), so plain threads and ``ThreadingActor`` s can wait on them.
* **Single writer.** At most one thread runs a given actor at a time, and its messages are
  handled one at a time in the order they were put in its mailbox. ``on_start`` runs
  before the first message, ``on_stop``/``on_failure`` after the last, all under the same
  guarantee (each turn may run on a different worker thread: do not keep thread-locals).
* Registration in ``pykka.ActorRegistry`` at start, unregistration at stop.
* **Stop** (``ref.stop()``, the ``_ActorStop`` message): messages queued before it are
  handled, ``on_stop`` runs, and every message after it is answered with
  ``ActorDeadError`` (asks) or dropped (tells) — also one that races in after the
  mailbox closed; ``tell`` to a stopped actor raises ``ActorDeadError``.
* A ``tell`` whose handler raises an ``Exception`` logs it, stops the actor and calls
  ``on_failure``; an ``ask``'s exception goes back to the caller. A ``BaseException``
  stops this actor and asks every other actor to stop (pykka's rule; here without
  waiting for them, see below). Other actors on the executor never notice a failure.
* :func:`notify_when_stopped`: tell a watcher a message once the actor has stopped and
  handled its last message (how a successor waits for its predecessor without blocking).

Not promised: the thread an actor runs on; fairness beyond "a turn is at most
``executor.batch`` messages, then the actor goes to the back of the run queue".

**Never block in a pooled actor's handler** on another pooled actor (``ask`` with
``block=True``, ``future.get()``, ``stop(block=True)``): a bounded pool deadlocks when all
its threads wait. ``get()`` of an unresolved :class:`PooledFuture` on a worker thread
raises :class:`~vmpooler.actors.runtime.executor.BlockingCallError` rather than hang.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import sys
import threading
from collections import deque
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pykka
from pykka import ActorDeadError, ActorRegistry
from pykka._threading import ThreadingFuture
from pykka.messages import _ActorStop

from vmpooler.actors.runtime.executor import ActorExecutor, BlockingCallError, on_worker_thread

if TYPE_CHECKING:
    from pykka._actor import ActorInbox
    from pykka._envelope import Envelope

__all__ = ["PooledActor", "PooledFuture", "PooledInbox", "notify_when_stopped"]

log = logging.getLogger(__name__)
pykka_log = logging.getLogger("pykka")

T = TypeVar("T")


class PooledFuture(ThreadingFuture[T]):
    """A ``ThreadingFuture`` that refuses to block an executor's worker thread."""

    def __init__(self) -> None:
        super().__init__()
        self._done = False

    def get(self, *, timeout: float | None = None) -> Any:
        if not self._done and on_worker_thread():
            raise BlockingCallError(
                "a pooled actor's future was waited on from an actor executor thread "
                "(this can deadlock the pool): tell, and have the answer told back")
        return super().get(timeout=timeout)

    def set(self, value: Any | None = None) -> None:
        super().set(value)
        self._done = True

    def set_exception(self, exc_info: Any = None) -> None:
        super().set_exception(exc_info)
        self._done = True

    def set_get_hook(self, func: Any) -> None:
        super().set_get_hook(func)
        self._done = False  # the hook (stop's converter) waits on the ask: still unresolved


class PooledInbox:
    """One pooled actor's mailbox: its FIFO of envelopes and its scheduling state.

    ``put`` appends and, if the actor is neither running nor on the run queue, submits it:
    the flag ``_scheduled`` (under ``_lock``) is what makes an actor run on one thread at a
    time. ``get``/``empty``/``qsize`` are pykka's inbox protocol (non-blocking here).
    """

    __slots__ = ("_actor", "_closed", "_executor", "_label", "_lock", "_queue", "_scheduled",
                 "_watchers")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Envelope[Any]] = deque()
        self._scheduled = True  # held until the actor's loop is started
        self._closed = False
        self._actor: PooledActor | None = None
        self._executor: ActorExecutor | None = None
        self._label = "actor"
        self._watchers: list[tuple[pykka.ActorRef[Any], Any]] = []

    def put(self, envelope: Envelope[Any], /) -> None:
        with self._lock:
            closed = self._closed
            if not closed:
                self._queue.append(envelope)
                if self._scheduled:
                    return
                self._scheduled = True
                actor, executor = self._actor, self._executor
        if closed:
            _reply_dead(envelope, self._label)
            return
        assert actor is not None and executor is not None
        executor.submit(actor)

    def get(self) -> Envelope[Any]:
        with self._lock:
            if not self._queue:
                raise queue.Empty
            return self._queue.popleft()

    def empty(self) -> bool:
        with self._lock:
            return not self._queue

    def qsize(self) -> int:
        with self._lock:
            return len(self._queue)

    # -- used by PooledActor ------------------------------------------------------------------
    def _attach(self, actor: PooledActor, executor: ActorExecutor) -> None:
        self._actor, self._executor, self._label = actor, executor, str(actor)

    def _take(self) -> Envelope[Any] | None:
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def _end_turn(self) -> bool:
        """True: messages are waiting, the actor stays scheduled (resubmit it); False: it is
        idle, and the next ``put`` submits it."""
        with self._lock:
            if self._queue:
                return True
            self._scheduled = False
            return False

    def _close(self) -> tuple[list[Envelope[Any]], list[tuple[pykka.ActorRef[Any], Any]]]:
        with self._lock:
            self._closed = True
            left, watchers = list(self._queue), self._watchers
            self._queue.clear()
            self._watchers = []
            self._actor = None  # a stale ref no longer keeps the actor's state alive
        return left, watchers

    def _watch(self, watcher: pykka.ActorRef[Any], message: Any) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._watchers.append((watcher, message))
            return True


def notify_when_stopped(ref: pykka.ActorRef[Any], watcher: pykka.ActorRef[Any],
                        message: Any) -> None:
    """Tell ``watcher`` ``message`` once the pooled actor behind ``ref`` has stopped (or
    crashed) and run its last code — at once if it already has. Never blocks.

    ``TypeError`` if ``ref`` is not a :class:`PooledActor` (a ``ThreadingActor`` offers no
    such notification)."""
    inbox = ref.actor_inbox
    if not isinstance(inbox, PooledInbox):
        raise TypeError(f"{ref} is not a PooledActor")
    if not inbox._watch(watcher, message):
        with contextlib.suppress(ActorDeadError):
            watcher.tell(message)


class PooledActor(pykka.Actor):
    """Base class: construct with ``executor=`` (keyword), start with ``start()`` as usual."""

    actor_executor: ActorExecutor
    """The executor whose threads run this actor's mailbox."""

    def __init__(self, *, executor: ActorExecutor) -> None:
        super().__init__()
        self.actor_executor = executor
        self._actor_mailbox = cast(PooledInbox, self.actor_inbox)
        self._actor_mailbox._attach(self, executor)
        self._actor_started = False

    @staticmethod
    def _create_actor_inbox() -> ActorInbox:
        return PooledInbox()

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        return PooledFuture()

    def _start_actor_loop(self) -> None:
        self.actor_executor.submit(self)  # the mailbox was created scheduled: this first turn

    # -- one turn on a worker thread ----------------------------------------------------------
    def _actor_run_slice(self) -> None:
        try:
            if not self._actor_started:
                self._actor_started = True
                self._actor_loop_setup()
            mailbox = self._actor_mailbox
            for _ in range(self.actor_executor.batch):
                if self.actor_stopped.is_set():
                    break
                envelope = mailbox._take()
                if envelope is None:
                    break
                self._actor_handle(envelope)
        except BaseException:  # only the runtime's own code gets here (hooks raising)
            self._handle_failure(*sys.exc_info())
        if self.actor_stopped.is_set():
            self._actor_teardown()
        elif self._actor_mailbox._end_turn():
            self.actor_executor.submit(self)

    def _actor_handle(self, envelope: Envelope[Any]) -> None:
        """One message, with ``pykka.Actor._actor_loop_running``'s rules."""
        try:
            response = self._handle_receive(envelope.message)
            if envelope.reply_to is not None:
                envelope.reply_to.set(response)
        except Exception:
            if envelope.reply_to is not None:
                pykka_log.info(f"Exception returned from {self} to caller:",
                               exc_info=sys.exc_info())
                envelope.reply_to.set_exception()
            else:
                self._handle_failure(*sys.exc_info())
                try:
                    self.on_failure(*sys.exc_info())
                except Exception:
                    self._handle_failure(*sys.exc_info())
        except BaseException:
            pykka_log.debug(f"{sys.exc_info()[1]!r} in {self}. Stopping all actors.")
            self._stop()
            # pykka waits for them; a worker thread must not (the pool would deadlock).
            ActorRegistry.stop_all(block=False)

    def _actor_teardown(self) -> None:
        """The actor has stopped: answer what is left in the mailbox, close it for good, and
        tell the watchers."""
        left, watchers = self._actor_mailbox._close()
        label = str(self)
        for envelope in left:
            _reply_dead(envelope, label)
        for watcher, message in watchers:
            with contextlib.suppress(ActorDeadError):
                watcher.tell(message)

    def _actor_abandon(self) -> None:
        """Called instead of a turn once the executor is stopped."""
        if not self.actor_stopped.is_set():
            log.warning("[!] %s stopped unhandled: its executor is stopped", self)
            ActorRegistry.unregister(self.actor_ref)
            self.actor_stopped.set()
        self._actor_teardown()


def _reply_dead(envelope: Envelope[Any], label: str) -> None:
    if envelope.reply_to is None:
        return
    if isinstance(envelope.message, _ActorStop):
        envelope.reply_to.set(None)
    else:
        envelope.reply_to.set_exception(exc_info=(
            ActorDeadError,
            ActorDeadError(f"{label} stopped before handling the message"),
            None,
        ))
