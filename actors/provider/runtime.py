"""What outlives one provider actor instance, and the messages its workers send it.

:class:`ProviderRuntime` holds a provider's worker pools and the calls they run; the
``Call*`` messages go from a worker to the actor (its result, and while it runs, whether
the provider queued or runs its work: see :mod:`vmpooler.providers.progress`).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any, NamedTuple

import pykka

from vmpooler.actors.messages import CallProvider
from vmpooler.actors.runtime.clock import Timer
from vmpooler.actors.runtime.workers import WorkerPool

__all__ = ["CallCounts", "CallDone", "CallQueued", "CallRunning", "CallTimedOut", "InFlight",
           "MonitorTick", "ProviderRuntime", "WorkerProgress"]


class CallCounts(NamedTuple):
    """A provider's calls in flight (running or queued), by worker pool, and the pools'
    sizes: for a driver of a fake clock, which tells which calls wait for simulated time."""

    calls: int
    """Every call in flight."""
    clones: int
    """Clones among them (the clone pool's)."""
    clone_workers: int
    """Threads of the clone pool (clones beyond them wait in its queue)."""
    pooled: int
    """Calls on the general call pool (neither clones nor inventory listings)."""
    call_workers: int
    """Threads of the general call pool."""


@dataclass(frozen=True, slots=True)
class CallDone:
    """Worker → actor: call ``token`` returned ``result`` or raised ``error``."""

    token: int
    result: Any
    error: BaseException | None
    seconds: float


@dataclass(frozen=True, slots=True)
class CallQueued:
    """Worker → actor: the provider queued call ``token``'s work (its timeout pauses)."""

    token: int


@dataclass(frozen=True, slots=True)
class CallRunning:
    """Worker → actor: call ``token``'s work runs, after ``queued_seconds`` queued."""

    token: int
    queued_seconds: float


@dataclass(frozen=True, slots=True)
class CallTimedOut:
    """Scheduler → actor: call ``token``'s timer ran out."""

    token: int


@dataclass(frozen=True, slots=True)
class MonitorTick:
    """Scheduler → actor, every ``monitor_interval`` seconds."""


@dataclass(slots=True)
class InFlight:
    """A call submitted to a worker: its timer, armed at ``armed`` for ``timeout`` seconds
    (re-armed when the provider says its work is queued, then running)."""

    call: CallProvider
    timer: Timer | None
    submitted: float = 0.0
    answered: bool = False
    armed: float = 0.0
    timeout: float = 0.0
    queued: bool = False
    queued_seconds: float = 0.0


class WorkerProgress:
    """The :class:`~vmpooler.providers.progress.CallProgress` of one call: tells the actor
    (through the runtime) when the provider queues or runs its work."""

    def __init__(self, runtime: ProviderRuntime, token: int) -> None:
        self._runtime = runtime
        self._token = token
        self._state: str | None = None

    def queued(self) -> None:
        if self._state is None:
            self._state = "queued"
            self._runtime.deliver(CallQueued(self._token))

    def running(self, queued_seconds: float) -> None:
        if self._state != "running":
            self._state = "running"
            self._runtime.deliver(CallRunning(self._token, queued_seconds))


class ProviderRuntime:
    """What outlives one :class:`~vmpooler.actors.provider.provider_actor.ProviderActor` instance:
    its worker pools and the calls they are running.

    The supervisor restarts a crashed provider actor with the same runtime, so the new
    instance still refuses a second call for a VM whose first call is running, and answers
    the calls its predecessor submitted: a worker finishing after the crash hands its result
    to whichever instance is current (or parks it until one starts).
    """

    def __init__(self, name: str, *, clone_workers: int, call_workers: int) -> None:
        self.tokens = itertools.count(1)
        self.calls: dict[int, InFlight] = {}
        self.busy: dict[tuple[str, str | None], int] = {}
        self.clone_pool = WorkerPool(f"{name}-clone", clone_workers)
        self.list_pool = WorkerPool(f"{name}-list", 2)
        self.call_pool = WorkerPool(f"{name}-call", max(2, call_workers))
        self._lock = threading.Lock()
        self._current: pykka.ActorRef[Any] | None = None
        self._parked: list[Any] = []

    def attach(self, ref: pykka.ActorRef[Any]) -> list[Any]:
        """Make ``ref`` the instance messages go to; return those parked meanwhile."""
        with self._lock:
            self._current = ref
            parked, self._parked = self._parked, []
        return parked

    def deliver(self, message: CallDone | CallQueued | CallRunning) -> None:
        """From a worker thread: tell the current instance, or park the message."""
        with self._lock:
            ref = self._current
            try:
                if ref is None:
                    raise pykka.ActorDeadError("no provider actor")
                ref.tell(message)
            except pykka.ActorDeadError:
                self._parked.append(message)

    def shutdown(self) -> None:
        for pool in (self.clone_pool, self.list_pool, self.call_pool):
            pool.shutdown()
