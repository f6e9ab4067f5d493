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
provider's state are reported by :mod:`~vmpooler.actors.provider.reports`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import pykka

from vmpooler.actors.messages import (
    CallProvider,
    ProviderCallFinished,
    ProviderFailure,
    ProviderOp,
)
from vmpooler.actors.messages.address import Address
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.provider.reports import ProviderHealthReporter
from vmpooler.actors.provider.runtime import (
    CallCounts,
    CallDone,
    CallQueued,
    CallRunning,
    CallTimedOut,
    InFlight,
    MonitorTick,
    ProviderRuntime,
    WorkerProgress,
)
from vmpooler.actors.provider.work import ProviderWork, StaleDnsError, resolves
from vmpooler.actors.runtime.adaptive_timeout import CallTimeouts
from vmpooler.actors.runtime.breaker import CircuitBreaker
from vmpooler.actors.runtime.clock import Clock, Scheduler, Timer
from vmpooler.actors.runtime.supervisor import SupervisedActor
from vmpooler.actors.storage.provider_store import ProviderHealth
from vmpooler.actors.tracing import NULL_SPAN, NULL_TRACER, Tracer
from vmpooler.providers import progress
from vmpooler.providers.base import Provider
from vmpooler.providers.dns import DnsPlugin
from vmpooler.providers.errors import TaskLostError, is_permanent

__all__ = ["ProviderActor", "ProviderRuntime", "StaleDnsError", "resolves"]

log = logging.getLogger(__name__)


# Calls guarded by the circuit breaker (vmpooler's vSphere provider wraps the same ones; the
# standby calls, ours, are the platform's health as much as a destroy is).
# Readiness probes are not: a VM that is still booting says nothing about the provider.
_BREAKER_OPS = frozenset({
    ProviderOp.LIST_VMS, ProviderOp.CLONE, ProviderOp.DESTROY, ProviderOp.CHECK_READY,
    ProviderOp.CHECK_RUNNING, ProviderOp.SUSPEND, ProviderOp.RESUME,
})


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
        tracer: Tracer = NULL_TRACER,
    ) -> None:
        """``timeouts`` (adaptive, per kind of call) replaces the fixed ``call_timeout``
        (without it, every call gets ``call_timeout``);
        ``publish_health`` receives the provider's state on every breaker change and every
        ``monitor_interval`` seconds (None: on changes only), when ``monitor_gauges`` also
        emitting the connection-pool monitor's gauges. A call that carries a trace context
        runs in a ``provider.<op>`` span of ``tracer``, the provider's
        :func:`~vmpooler.actors.tracing.current_span` meanwhile."""
        super().__init__(name=Address.provider(name).name, supervisor=supervisor)
        self.provider = provider
        self.work = ProviderWork(provider, dns_plugins, resolver, monotonic=clock.monotonic)
        self.clock = clock
        self.scheduler = scheduler
        self.metrics = metrics
        self.tracer = tracer
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
    def handle(self, message: object) -> None:
        match message:
            case CallProvider():
                self._submit(message)
            case CallDone():
                self._done(message)
            case CallTimedOut(token=token):
                self._timed_out(token)
            case CallQueued(token=token):
                self._queued(token)
            case CallRunning():
                self._running(message)
            case MonitorTick():
                self._tick()

    def setup(self) -> None:
        now = self.clock.monotonic()
        for token, entry in self._calls.items():  # a predecessor's calls: re-arm timeouts
            if not entry.answered:
                entry.timer = self.scheduler.tell_later(
                    max(0.0, entry.armed + entry.timeout - now),
                    self.actor_ref, CallTimedOut(token))
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
                                                  MonitorTick())

    def _timeout_for(self, op: ProviderOp) -> float:
        if op is ProviderOp.PURGE_UNCONFIGURED:  # once per start, may walk a whole vCenter
            return self.timeouts.cap
        return self.timeouts.for_op(op)

    def in_flight(self) -> int:
        """Calls currently running or queued (for tests and status)."""
        return len(self._busy)

    def call_counts(self) -> CallCounts:
        """The calls in flight by worker pool, for a driver of a fake clock: calls beyond a
        pool's workers wait in its queue for one to free up."""
        ops = [entry.call.op for token in self._busy.values()
               if (entry := self._calls.get(token)) is not None]
        clones = sum(1 for op in ops if op is ProviderOp.CLONE)
        listings = sum(1 for op in ops if op is ProviderOp.LIST_VMS)
        return CallCounts(len(self._busy), clones, self.runtime.clone_pool.size,
                          len(self._busy) - clones - listings, self.runtime.call_pool.size)

    # -- submission -------------------------------------------------------------------------
    def _submit(self, call: CallProvider) -> None:
        key = (call.pool, call.vm)
        if key in self._busy:
            self._reply(call, 0.0, failure=ProviderFailure(
                "another call for this VM is still running", "Busy", busy=True))
            return
        if call.op in _BREAKER_OPS and not self.breaker.allow():
            retry_after = self.breaker.retry_after()
            self._reply(call, 0.0, failure=ProviderFailure(
                f"circuit breaker open for provider {self.provider.name}; retry in "
                f"{retry_after:.0f}s", "CircuitOpenError", circuit_open=True,
                retry_after=retry_after))
            return
        token = next(self.runtime.tokens)
        now = self.clock.monotonic()
        entry = self._calls[token] = InFlight(call, None, submitted=now)
        self._arm(token, entry, self._timeout_for(call.op))
        self._busy[key] = token
        executor = {
            ProviderOp.CLONE: self.runtime.clone_pool, ProviderOp.LIST_VMS: self.runtime.list_pool,
        }.get(call.op, self.runtime.call_pool)
        deliver = self.runtime.deliver
        work = self.work.for_call(call)
        monotonic = self.clock.monotonic
        listener = WorkerProgress(self.runtime, token)
        tracer, name = self.tracer, self.provider.name

        def run() -> None:
            span = tracer.start(f"provider.{call.op.value}", parent=call.traceparent,
                                kind="client", attributes={
                                    "vmpooler.provider": name, "vmpooler.pool": call.pool,
                                    "vmpooler.vm": call.vm or ""},
                                ) if call.traceparent else NULL_SPAN
            started = monotonic()
            result: Any = None
            error: BaseException | None = None
            try:
                with span, progress.reporting(listener):
                    result = work()
            except BaseException as exc:  # reported as a failure, never lost
                error = exc
            seconds = monotonic() - started
            deliver(CallDone(token, result, error, seconds))

        executor.submit(run)

    def _arm(self, token: int, entry: InFlight, timeout: float) -> None:
        """(Re)start the call's timer: ``timeout`` seconds from now."""
        if entry.timer is not None:
            entry.timer.cancel()
        entry.armed, entry.timeout = self.clock.monotonic(), timeout
        entry.timer = self.scheduler.tell_later(timeout, self.actor_ref, CallTimedOut(token))

    # -- progress ---------------------------------------------------------------------------
    def _queued(self, token: int) -> None:
        """The provider queued the call's work (vCenter's task queue): not a slow call. Its
        timer restarts with ``provider_call_timeout``, the longest wait in that queue."""
        entry = self._calls.get(token)
        if entry is None or entry.answered:
            return
        entry.queued = True
        self._arm(token, entry, self.timeouts.cap)

    def _running(self, message: CallRunning) -> None:
        """The call's work runs: its timeout counts from now, and the time it was queued
        is measured (``task.queue_wait``) and left out of the call's duration."""
        entry = self._calls.get(message.token)
        if entry is None or entry.answered:
            return
        entry.queued_seconds = message.queued_seconds
        self.metrics.timing("task.queue_wait", message.queued_seconds, tags={
            "provider": self.provider.name, "op": entry.call.op.value})
        if entry.queued or message.queued_seconds > 0:
            log.info("[%s] %s of '%s' runs after %.1fs in %s's queue", entry.call.pool,
                     entry.call.op.value, entry.call.vm, message.queued_seconds,
                     self.provider.name)
        self._arm(message.token, entry, self._timeout_for(entry.call.op))

    # -- completion -------------------------------------------------------------------------
    def _done(self, done: CallDone) -> None:
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
            # Late ones too, and from submission (the time spent queued for a worker counts,
            # the time the provider queued the work does not).
            waited = max(done.seconds, self.clock.monotonic() - entry.submitted)
            self.timeouts.record(entry.call.op, max(0.0, waited - entry.queued_seconds))
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
        if self.clock.monotonic() < entry.armed + entry.timeout:
            return  # a timer the call's progress replaced, fired before it was cancelled
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
