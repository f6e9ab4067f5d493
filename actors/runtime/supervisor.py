"""Supervision: a crashed actor is restarted with exponential back-off and a restart budget.

pykka gives no supervision: an actor whose ``tell`` handler raises is logged and stopped,
and a ``BaseException`` (``SystemExit``, ``KeyboardInterrupt``) stops *every* actor.
:class:`SupervisedActor` (a thread of its own) and :class:`PooledSupervisedActor` (a mailbox
on a shared :class:`~vmpooler.actors.runtime.executor.ActorExecutor`) turn the latter into an
ordinary failure of that one actor and report any failure to their supervisor as
:class:`ActorCrashed`.

What happens then is :class:`~vmpooler.actors.runtime.restart_policy.RestartPolicy`'s
decision, one policy for the whole system: the :class:`Supervisor` restarts its children
(a fresh instance from the child's factory) after the policy's back-off, and gives up on a
child that spent its restart budget within the window (logged, counted, removed from the
directory): the rest of the system keeps running. The on-demand manager supervises the
request actors with the same policy object and the same bookkeeping
(:class:`~vmpooler.actors.runtime.restart_policy.Restarts`: histories, metrics, log lines;
there, giving up fails the request).

The Supervisor itself never dies of its own handlers: an exception in one is logged and
the message dropped. ``PoolerSystem.stop`` stops it last.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pykka

from vmpooler.actors.messages import ActorCrashed, Relayed, RestartActor, StopSupervising
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.runtime.clock import Clock, Scheduler
from vmpooler.actors.runtime.executor import ActorExecutor
from vmpooler.actors.runtime.pooled import PooledActor
from vmpooler.actors.runtime.restart_policy import CrashLines, RestartPolicy, Restarts

__all__ = ["ActorDirectory", "ChildSpec", "PooledSupervisedActor", "SupervisedActor",
           "Supervisor"]

log = logging.getLogger(__name__)


class ActorDirectory:
    """Thread-safe name → current ActorRef, kept up to date across restarts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refs: dict[str, pykka.ActorRef[Any]] = {}

    def get(self, name: str) -> pykka.ActorRef[Any] | None:
        """The live actor registered under ``name``, or None."""
        with self._lock:
            ref = self._refs.get(name)
        return ref if ref is not None and ref.is_alive() else None

    def put(self, name: str, ref: pykka.ActorRef[Any]) -> None:
        with self._lock:
            self._refs[name] = ref

    def tell(self, name: str, message: Any) -> bool:
        """Tell the actor registered as ``name`` here; False when none is or it is dead."""
        ref = self.get(name)
        if ref is None:
            return False
        try:
            ref.tell(message)
        except pykka.ActorDeadError:
            return False
        return True

    def remove(self, name: str) -> None:
        with self._lock:
            self._refs.pop(name, None)

    def names(self) -> list[str]:
        with self._lock:
            return list(self._refs)


class _Supervised:
    """The supervision hooks, for either runtime (mixed in before the pykka actor class).

    Subclasses implement :meth:`handle` instead of ``on_receive``.
    """

    supervised_name: str
    supervisor: pykka.ActorRef[Any] | None

    def __init__(self, *, name: str, supervisor: pykka.ActorRef[Any] | None,
                 **runtime: Any) -> None:
        super().__init__(**runtime)
        self.supervised_name = name
        self.supervisor = supervisor

    def handle(self, message: object) -> Any:
        """Handle one message (subclasses ``match`` it on their message types); raising
        stops this actor and reports it to the supervisor."""
        raise NotImplementedError

    def handle_relayed(self, message: object, hops: int) -> Any:
        """Handle a message an actor of another manager sent (it arrived in a
        :class:`~vmpooler.actors.messages.Relayed` envelope, relayed ``hops`` times). By
        default, as any other message."""
        return self.handle(message)

    def setup(self) -> None:
        """Run once on the actor's thread before its first message (instead of
        ``on_start``); raising is reported to the supervisor like a crash."""

    def on_start(self) -> None:
        try:
            self.setup()
        except BaseException as exc:  # pykka skips on_failure for on_start errors
            self.on_failure(type(exc), exc, exc.__traceback__)
            raise

    def on_receive(self, message: object) -> Any:
        try:
            if isinstance(message, Relayed):
                return self.handle_relayed(message.message, message.hops)
            return self.handle(message)
        except Exception:
            raise
        except BaseException as exc:  # SystemExit & co. must not stop every actor
            raise RuntimeError(f"{type(exc).__name__} raised in {self.supervised_name}") from exc

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.supervisor is None:
            return
        with contextlib.suppress(pykka.ActorDeadError):
            self.supervisor.tell(ActorCrashed(
                name=self.supervised_name,
                error=str(exception_value),
                error_class=exception_type.__name__ if exception_type else "Exception",
            ))


class SupervisedActor(_Supervised, pykka.ThreadingActor):
    """A supervised actor with a thread of its own (``pykka.ThreadingActor``)."""

    def __init__(self, *, name: str, supervisor: pykka.ActorRef[Any] | None) -> None:
        super().__init__(name=name, supervisor=supervisor)


class PooledSupervisedActor(_Supervised, PooledActor):
    """A supervised actor whose mailbox runs on a shared executor (see
    :mod:`vmpooler.actors.runtime.pooled`: it must never block on another pooled actor)."""

    def __init__(self, *, name: str, supervisor: pykka.ActorRef[Any] | None,
                 executor: ActorExecutor) -> None:
        super().__init__(name=name, supervisor=supervisor, executor=executor)


@dataclass
class ChildSpec:
    """How to (re)start one child: ``factory(supervisor_ref)`` returns the started ref."""

    name: str
    factory: Callable[[pykka.ActorRef[Any]], pykka.ActorRef[Any]]
    given_up: bool = False


class Supervisor(pykka.ThreadingActor):
    """Starts children, restarts crashed ones. Talk to it with ``ask``/``tell`` of its proxy.

    ``policy`` is the system's :class:`RestartPolicy`; without one, a policy is built from
    ``backoff``, ``max_backoff``, ``intensity`` and ``period``.
    """

    def __init__(
        self,
        *,
        directory: ActorDirectory,
        scheduler: Scheduler,
        clock: Clock,
        metrics: Metrics,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        intensity: int = 5,
        period: float = 300.0,
        policy: RestartPolicy | None = None,
    ) -> None:
        super().__init__()
        self.directory = directory
        self.scheduler = scheduler
        self.clock = clock
        self.metrics = metrics
        self.policy = policy or RestartPolicy(backoff=backoff, max_backoff=max_backoff,
                                              intensity=intensity, period=period)
        self.restarts = Restarts(self.policy, clock=clock, metrics=metrics, log=log,
                                 lines=CrashLines("[supervisor] '%s'", "not restarting it"),
                                 on_given_up=self._given_up)
        self.children: dict[str, ChildSpec] = {}
        self.stopping = False  # after StopSupervising: restart nothing

    def start_child(
        self, name: str, factory: Callable[[pykka.ActorRef[Any]], pykka.ActorRef[Any]]
    ) -> pykka.ActorRef[Any]:
        """Start a child now and supervise it. Call through ``proxy().start_child(...).get()``."""
        spec = ChildSpec(name=name, factory=factory)
        self.children[name] = spec
        self.restarts.forget(name)  # a child started anew starts with no crashes
        ref = factory(self.actor_ref)
        self.directory.put(name, ref)
        return ref

    def given_up(self) -> list[str]:
        """Names of children the supervisor stopped restarting."""
        return sorted(n for n, s in self.children.items() if s.given_up)

    def restart_counts(self) -> dict[str, int]:
        """Restarts of each child within the current period."""
        return {n: self.restarts.count(n) for n in self.children}

    def on_receive(self, message: object) -> Any:
        try:
            self._receive(message)
        except BaseException:  # the supervisor must outlive any of its own mistakes
            log.exception("[!] [supervisor] could not handle %r; carrying on", message)
        return None

    def _receive(self, message: object) -> None:
        match message:
            case StopSupervising():
                self.stopping = True
            case _ if self.stopping:
                return  # after StopSupervising: restart nothing
            case ActorCrashed():
                self._crashed(message)
            case RestartActor():
                self._restart(message)

    def _crashed(self, message: ActorCrashed) -> None:
        spec = self.children.get(message.name)
        if spec is None or spec.given_up:
            return
        delay = self.restarts.crashed(message.name, message)
        if delay is not None:
            self.scheduler.tell_later(delay, self.actor_ref, RestartActor(message.name))

    def _given_up(self, name: str, _crash: ActorCrashed) -> None:
        """The child spent its restart budget: restart it no more."""
        self.children[name].given_up = True
        self.directory.remove(name)

    def _restart(self, message: RestartActor) -> None:
        spec = self.children.get(message.name)
        if spec is None or spec.given_up:
            return
        try:
            ref = spec.factory(self.actor_ref)
        except Exception as exc:
            log.exception("[!] [supervisor] could not restart '%s'", message.name)
            self._crashed(ActorCrashed(message.name, str(exc), type(exc).__name__))
            return
        self.directory.put(message.name, ref)
        self.metrics.increment("vmpooler_actor.restarted", tags={"actor": message.name})
        log.info("[*] [supervisor] '%s' restarted", message.name)
