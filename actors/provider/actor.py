"""The actor in front of one provider: bounded workers, timeouts, circuit breaker.

Provider calls block (a vSphere clone takes minutes), so they never run on a mailbox
thread. Each :class:`~vmpooler.actors.messages.CallProvider` is submitted to a bounded
thread pool — clones to one sized by the clone limit, inventory listings to their own small
pool so they never queue behind checks, everything else to a pool sized by the provider's
``max_concurrent_calls`` — and its outcome comes back to the caller as one
:class:`~vmpooler.actors.messages.ProviderCallFinished`.

Guarantees: at most one call per ``(pool, vm)`` runs at a time (a second is answered
``busy`` at once); every call is answered exactly once, by its result or by a timeout
failure after its timeout (a timed-out call keeps its worker, and its VM stays
busy, until it really returns; its late result is dropped); while the circuit breaker is
open calls are refused without touching the provider. Permanent errors do not count
against the breaker: a broken template in one pool must not cut off the others. What each
call runs on its worker is :mod:`~vmpooler.actors.provider.work`'s; the breaker's and the
provider's state are reported by :mod:`~vmpooler.actors.provider.health`.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pykka

from vmpooler.actors.messages import (
    CallProvider,
    ProviderCallFinished,
    ProviderFailure,
    ProviderOp,
)
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.provider.health import ProviderHealthReporter
from vmpooler.actors.provider.work import ProviderWork, StaleDnsError, resolves
from vmpooler.actors.runtime.adaptive_timeout import CallTimeouts
from vmpooler.actors.runtime.breaker import CircuitBreaker
from vmpooler.actors.runtime.clock import Clock, Scheduler, Timer
from vmpooler.actors.runtime.supervisor import SupervisedActor
from vmpooler.actors.runtime.workers import WorkerPool
from vmpooler.actors.storage.provider_store import ProviderHealth
from vmpooler.providers.base import Provider
from vmpooler.providers.dns import DnsPlugin
from vmpooler.providers.errors import TaskLostError, is_permanent

__all__ = ["ProviderActor", "StaleDnsError", "resolves"]

log = logging.getLogger(__name__)


# Calls guarded by the circuit breaker (vmpooler's vSphere provider wraps the same ones).
# Readiness probes are not: a VM that is still booting says nothing about the provider.
_BREAKER_OPS = frozenset({
    ProviderOp.LIST_VMS, ProviderOp.CLONE, ProviderOp.DESTROY, ProviderOp.CHECK_READY,
    ProviderOp.CHECK_RUNNING,
})


@dataclass(frozen=True, slots=True)
class _CallDone:
    token: int
    result: Any
    error: BaseException | None
    seconds: float


@dataclass(frozen=True, slots=True)
class _CallTimedOut:
    token: int


@dataclass(frozen=True, slots=True)
class _MonitorTick:
    """Scheduler → itself, every ``monitor_interval`` seconds."""


@dataclass(slots=True)
class _InFlight:
    call: CallProvider
    timer: Timer | None
    submitted: float = 0.0
    answered: bool = False


class ProviderRuntime:
    """What outlives one :class:`ProviderActor` instance: its worker pools and the calls
    they are running.

    The supervisor restarts a crashed provider actor with the same runtime, so the new
    instance still refuses a second call for a VM whose first call is running, and answers
    the calls its predecessor submitted: a worker finishing after the crash hands its result
    to whichever instance is current (or parks it until one starts).
    """

    def __init__(self, name: str, *, clone_workers: int, call_workers: int) -> None:
        self.tokens = itertools.count(1)
        self.calls: dict[int, _InFlight] = {}
        self.busy: dict[tuple[str, str | None], int] = {}
        self.clone_pool = WorkerPool(f"{name}-clone", clone_workers)
        self.list_pool = WorkerPool(f"{name}-list", 2)
        self.call_pool = WorkerPool(f"{name}-call", max(2, call_workers))
        self._lock = threading.Lock()
        self._current: pykka.ActorRef[Any] | None = None
        self._parked: list[_CallDone] = []

    def attach(self, ref: pykka.ActorRef[Any]) -> list[_CallDone]:
        """Make ``ref`` the instance results go to; return results parked meanwhile."""
        with self._lock:
            self._current = ref
            parked, self._parked = self._parked, []
        return parked

    def deliver(self, done: _CallDone) -> None:
        """From a worker thread: tell the current instance, or park the result."""
        with self._lock:
            ref = self._current
            try:
                if ref is None:
                    raise pykka.ActorDeadError("no provider actor")
                ref.tell(done)
            except pykka.ActorDeadError:
                self._parked.append(done)

    def shutdown(self) -> None:
        for pool in (self.clone_pool, self.list_pool, self.call_pool):
            pool.shutdown()


class ProviderActor(SupervisedActor):
    """Fronts one :class:`~vmpooler.providers.base.Provider` instance."""

    def __init__(
        self,
        *,
        name: str,
        provider: Provider,
        dns_plugins: Mapping[str, DnsPlugin],
        clock: Clock,
        scheduler: Scheduler,
        metrics: Metrics,
        breaker: CircuitBreaker,
        clone_workers: int,
        call_timeout: float,
        resolve_reply_to: Callable[[str], pykka.ActorRef[Any] | None],
        resolver: Callable[[str], bool] = resolves,
        supervisor: pykka.ActorRef[Any] | None = None,
        runtime: ProviderRuntime | None = None,
        timeouts: CallTimeouts | None = None,
        publish_health: Callable[[ProviderHealth], None] | None = None,
        monitor_interval: float | None = None,
        monitor_gauges: bool = True,
    ) -> None:
        """``timeouts`` (adaptive, per kind of call) replaces the fixed ``call_timeout``
        (without it, every call gets ``call_timeout``);
        ``publish_health`` receives the provider's state on every breaker change and every
        ``monitor_interval`` seconds (None: on changes only), when ``monitor_gauges`` also
        emitting the connection-pool monitor's gauges."""
        super().__init__(name=f"provider:{name}", supervisor=supervisor)
        self.provider = provider
        self.work = ProviderWork(provider, dns_plugins, resolver, monotonic=clock.monotonic)
        self.clock = clock
        self.scheduler = scheduler
        self.metrics = metrics
        self.breaker = breaker
        self.call_timeout = call_timeout
        self.resolve_reply_to = resolve_reply_to
        self.runtime = runtime or ProviderRuntime(
            name, clone_workers=clone_workers, call_workers=provider.max_concurrent_calls)
        self._calls = self.runtime.calls
        self._busy = self.runtime.busy
        self.timeouts = timeouts or CallTimeouts(cap=call_timeout, enabled=False)
        self.monitor_interval = monitor_interval
        self.monitor_gauges = monitor_gauges
        self.health = ProviderHealthReporter(
            name, breaker=breaker, timeouts=self.timeouts, metrics=metrics, now=clock.now,
            pool_health=lambda: provider.connection_pool_health(), publish=publish_health)
        self._monitor: Timer | None = None

    # -- mailbox ----------------------------------------------------------------------------
    def handle(self, message: Any) -> Any:
        if isinstance(message, CallProvider):
            self._submit(message)
        elif isinstance(message, _CallDone):
            self._done(message)
        elif isinstance(message, _CallTimedOut):
            self._timed_out(message.token)
        elif isinstance(message, _MonitorTick):
            self._tick()
        return None

    def setup(self) -> None:
        now = self.clock.monotonic()
        for token, entry in self._calls.items():  # a predecessor's calls: re-arm timeouts
            if not entry.answered:
                entry.timer = self.scheduler.tell_later(
                    max(0.0, entry.submitted + self._timeout_for(entry.call.op) - now),
                    self.actor_ref, _CallTimedOut(token))
        for done in self.runtime.attach(self.actor_ref):
            self.actor_ref.tell(done)
        self._tick()

    def on_stop(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
        self.runtime.shutdown()

    def _tick(self) -> None:
        if self.monitor_interval is None:
            self.health.tick(gauges=False)  # publish the state once; later only on changes
            return
        self.health.tick(gauges=self.monitor_gauges)
        self._monitor = self.scheduler.tell_later(self.monitor_interval, self.actor_ref,
                                                  _MonitorTick())

    def _timeout_for(self, op: ProviderOp) -> float:
        if op is ProviderOp.PURGE_UNCONFIGURED:  # once per start, may walk a whole vCenter
            return self.timeouts.cap
        return self.timeouts.for_op(op)

    def in_flight(self) -> int:
        """Calls currently running or queued (for tests and status)."""
        return len(self._busy)

    # -- submission -------------------------------------------------------------------------
    def _submit(self, call: CallProvider) -> None:
        key = (call.pool, call.vm)
        if key in self._busy:
            self._reply(call, 0.0, failure=ProviderFailure(
                "another call for this VM is still running", "Busy", busy=True))
            return
        if call.op in _BREAKER_OPS and not self.breaker.allow():
            self._reply(call, 0.0, failure=ProviderFailure(
                f"circuit breaker open for provider {self.provider.name}; retry in "
                f"{self.breaker.retry_after():.0f}s", "CircuitOpenError", circuit_open=True))
            return
        token = next(self.runtime.tokens)
        timer = self.scheduler.tell_later(self._timeout_for(call.op), self.actor_ref,
                                          _CallTimedOut(token))
        self._calls[token] = _InFlight(call, timer, submitted=self.clock.monotonic())
        self._busy[key] = token
        executor = {
            ProviderOp.CLONE: self.runtime.clone_pool, ProviderOp.LIST_VMS: self.runtime.list_pool,
        }.get(call.op, self.runtime.call_pool)
        deliver = self.runtime.deliver
        work = self.work.for_call(call)
        monotonic = self.clock.monotonic

        def run() -> None:
            started = monotonic()
            result: Any = None
            error: BaseException | None = None
            try:
                result = work()
            except BaseException as exc:  # reported as a failure, never lost
                error = exc
            seconds = monotonic() - started
            deliver(_CallDone(token, result, error, seconds))

        executor.submit(run)

    # -- completion -------------------------------------------------------------------------
    def _done(self, done: _CallDone) -> None:
        entry = self._calls.pop(done.token, None)
        if entry is None:
            return
        key = (entry.call.pool, entry.call.vm)
        if self._busy.get(key) == done.token:
            del self._busy[key]
        if entry.timer is not None:
            entry.timer.cancel()
        guarded = entry.call.op in _BREAKER_OPS
        if done.error is None:
            # Late ones too, and from submission: the timer counts time spent queued.
            waited = max(done.seconds, self.clock.monotonic() - entry.submitted)
            self.timeouts.record(entry.call.op, waited)
        if entry.answered:  # timed out: already answered and counted as a failure
            log.info(
                "[%s] late %s result for '%s' dropped after %.1fs",
                entry.call.pool, entry.call.op.value, entry.call.vm, done.seconds,
            )
            return
        failure = None if done.error is None else self._failure(done.error)
        # A task lost with a restarted provider: the (new) provider answered that it no
        # longer knows the task. Neither slow nor down: counted by no timeout nor breaker.
        lost = isinstance(done.error, TaskLostError)
        if failure is not None and not failure.permanent and not lost:
            self.timeouts.record(entry.call.op, None)
        if guarded:
            if (failure is None or failure.permanent or lost
                    or isinstance(done.error, StaleDnsError)):
                self.breaker.record_success()  # the provider answered; it is not down
            else:
                self.health.failure(failure.message)
                self.breaker.record_failure()
        self._reply(entry.call, done.seconds, result=done.result, failure=failure)

    def _timed_out(self, token: int) -> None:
        entry = self._calls.get(token)
        if entry is None or entry.answered:
            return
        entry.answered = True
        waited = self.clock.monotonic() - entry.submitted
        message = f"{entry.call.op.value} timed out after {waited:.0f}s"
        self.timeouts.record(entry.call.op, None)
        if entry.call.op in _BREAKER_OPS:
            self.health.failure(message)
            self.breaker.record_failure()
        self._reply(entry.call, waited, failure=ProviderFailure(
            message, "TimeoutError", timed_out=True))

    @staticmethod
    def _failure(error: BaseException) -> ProviderFailure:
        return ProviderFailure(
            message=str(error) or type(error).__name__,
            error_class=type(error).__name__,
            permanent=is_permanent(error),
        )

    def _reply(
        self,
        call: CallProvider,
        seconds: float,
        *,
        result: Any = None,
        failure: ProviderFailure | None = None,
    ) -> None:
        message = ProviderCallFinished(
            op=call.op, pool=call.pool, vm=call.vm, call_id=call.call_id,
            seconds=seconds, result=result, failure=failure,
        )
        try:
            call.reply_to.tell(message)
            return
        except pykka.ActorDeadError:
            pass
        current = self.resolve_reply_to(call.pool)
        if current is not None:
            try:
                current.tell(message)
                return
            except pykka.ActorDeadError:
                pass
        log.info("[%s] %s result for '%s' had no one to go to", call.pool, call.op.value, call.vm)
