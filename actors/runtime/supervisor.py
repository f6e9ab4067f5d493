"""Supervision: a crashed actor is restarted with exponential back-off and a restart budget.

pykka gives no supervision: an actor whose ``tell`` handler raises is logged and stopped,
and a ``BaseException`` (``SystemExit``, ``KeyboardInterrupt``) stops *every* actor.
:class:`SupervisedActor` turns the latter into an ordinary failure of that one actor and
reports any failure to its :class:`Supervisor`, which starts a fresh instance after
``backoff`` seconds (doubling each time, up to ``max_backoff``). More than ``intensity``
restarts within ``period`` seconds and the supervisor gives up on that child (logged,
counted): the rest of the system keeps running.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import pykka

from vmpooler.actors.messages import ActorCrashed, RestartActor, StopSupervising
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.runtime.clock import Clock, Scheduler

__all__ = ["ActorDirectory", "ChildSpec", "SupervisedActor", "Supervisor"]

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

    def remove(self, name: str) -> None:
        with self._lock:
            self._refs.pop(name, None)

    def names(self) -> list[str]:
        with self._lock:
            return list(self._refs)


class SupervisedActor(pykka.ThreadingActor):
    """Base for actors whose failures are reported to a supervisor.

    Subclasses implement :meth:`handle` instead of ``on_receive``.
    """

    def __init__(self, *, name: str, supervisor: pykka.ActorRef[Any] | None) -> None:
        super().__init__()
        self.supervised_name = name
        self.supervisor = supervisor

    def handle(self, message: Any) -> Any:
        """Handle one message; raising stops this actor and reports it to the supervisor."""
        raise NotImplementedError

    def setup(self) -> None:
        """Run once on the actor's thread before its first message (instead of
        ``on_start``); raising is reported to the supervisor like a crash."""

    def on_start(self) -> None:
        try:
            self.setup()
        except BaseException as exc:  # pykka skips on_failure for on_start errors
            self.on_failure(type(exc), exc, exc.__traceback__)
            raise

    def on_receive(self, message: Any) -> Any:
        try:
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


@dataclass
class ChildSpec:
    """How to (re)start one child: ``factory(supervisor_ref)`` returns the started ref."""

    name: str
    factory: Callable[[pykka.ActorRef[Any]], pykka.ActorRef[Any]]
    restarts: list[float] = field(default_factory=list)
    given_up: bool = False


class Supervisor(pykka.ThreadingActor):
    """Starts children, restarts crashed ones. Talk to it with ``ask``/``tell`` of its proxy."""

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
    ) -> None:
        super().__init__()
        self.directory = directory
        self.scheduler = scheduler
        self.clock = clock
        self.metrics = metrics
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.intensity = intensity
        self.period = period
        self.children: dict[str, ChildSpec] = {}
        self.stopping = False  # after StopSupervising: restart nothing

    def start_child(
        self, name: str, factory: Callable[[pykka.ActorRef[Any]], pykka.ActorRef[Any]]
    ) -> pykka.ActorRef[Any]:
        """Start a child now and supervise it. Call through ``proxy().start_child(...).get()``."""
        spec = ChildSpec(name=name, factory=factory)
        self.children[name] = spec
        ref = factory(self.actor_ref)
        self.directory.put(name, ref)
        return ref

    def given_up(self) -> list[str]:
        """Names of children the supervisor stopped restarting."""
        return sorted(n for n, s in self.children.items() if s.given_up)

    def restart_counts(self) -> dict[str, int]:
        """Restarts of each child within the current period."""
        return {n: len(s.restarts) for n, s in self.children.items()}

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, StopSupervising):
            self.stopping = True
        elif self.stopping:
            return None
        elif isinstance(message, ActorCrashed):
            self._crashed(message)
        elif isinstance(message, RestartActor):
            self._restart(message)
        return None

    def _crashed(self, message: ActorCrashed) -> None:
        spec = self.children.get(message.name)
        if spec is None or spec.given_up:
            return
        now = self.clock.monotonic()
        spec.restarts = [t for t in spec.restarts if now - t < self.period]
        self.metrics.increment("vmpooler_actor.crashed", tags={"actor": message.name})
        if len(spec.restarts) >= self.intensity:
            spec.given_up = True
            self.directory.remove(message.name)
            self.metrics.increment("vmpooler_actor.given_up", tags={"actor": message.name})
            log.error(
                "[!] [supervisor] '%s' crashed %d times within %ss (%s: %s); not restarting it",
                message.name, len(spec.restarts) + 1, int(self.period),
                message.error_class, message.error,
            )
            return
        delay = min(self.max_backoff, self.backoff * (2 ** len(spec.restarts)))
        spec.restarts.append(now)
        log.error(
            "[!] [supervisor] '%s' crashed (%s: %s); restarting in %.1fs",
            message.name, message.error_class, message.error, delay,
        )
        self.scheduler.tell_later(delay, self.actor_ref, RestartActor(message.name))

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
