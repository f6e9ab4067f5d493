"""Starting a pool's clones and acting on their answers (reference §4.5, §4.8): refill within
the clone limit, the clone-slot hand-off between pools, back-off after failed clones, clones
for on-demand requests.

:class:`Clones` owns the clone bookkeeping of one pool: whether it waits for a clone slot
(``SlotBroker``), since when, how many clones failed in a row and until when no clone is
started, and the clone-slot releases owed since Redis was away. Used only on the pool
actor's thread.
"""

from __future__ import annotations

import logging

from vmpooler.actors.messages import (
    CheckPending,
    CloneForRequest,
    CloneResult,
    CloneSlotFreed,
    CloneVm,
    ProviderCallFinished,
    WantCloneSlot,
)
from vmpooler.actors.messages.address import Address
from vmpooler.actors.pool.calls import ProviderCalls, log_failure
from vmpooler.actors.pool.config_error import ConfigError
from vmpooler.actors.pool.context import PoolIO, PoolSettings
from vmpooler.actors.pool.dead_letters import DeadLetters
from vmpooler.actors.pool.hostnames import HostnameGenerator
from vmpooler.actors.pool.request_vms import OnDemandVms
from vmpooler.actors.pool.standby_requests import StandbyForRequests
from vmpooler.actors.pool.upkeep import PoolUpkeep
from vmpooler.actors.pool.vm_cache import VmCache
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.queues import Queue
from vmpooler.actors.storage.store import CloneReservation
from vmpooler.actors.tracing import NULL_SPAN

__all__ = ["Clones"]

log = logging.getLogger(__name__)


class Clones:
    """Clone starts and clone answers of one pool."""

    def __init__(self, policy: PoolSettings, io: PoolIO, *, calls: ProviderCalls, vms: VmCache,
                 hostnames: HostnameGenerator, upkeep: PoolUpkeep, ondemand: OnDemandVms,
                 dead_letters: DeadLetters, standby: StandbyForRequests) -> None:
        self.policy, self.io, self.calls, self.vms = policy, io, calls, vms
        self.hostnames = hostnames
        self.upkeep = upkeep
        self.ondemand = ondemand
        self.dead_letters = dead_letters
        self.standby = standby.standby
        self.from_standby = standby
        self.waiting_for_slot = False
        self.slot_wait_since: float | None = None  # monotonic: first NO_SLOT of a shortage
        self.failures = 0  # consecutive failed clones
        self.retry_at = 0.0  # monotonic: no clone starts before this
        self.breaker_until = 0.0  # monotonic: the provider's breaker refuses clones until then
        self.breaker_reason = ""  # the failure that opened it
        self.owed_slots: dict[str, bool] = {}  # vm -> on-demand: releases Redis missed
        self.config_error = ConfigError(policy, io, busy=calls.busy)

    # -- refill -------------------------------------------------------------------------------
    def repay_slots(self) -> None:
        """Give back the clone slots owed since Redis was away (``RELEASE_SLOT`` each: a
        slot already given back, by a fold say, is not given twice)."""
        while self.owed_slots:
            vm, ondemand = next(iter(self.owed_slots.items()))
            self.io.store.release_clone_slot(vm, ondemand=ondemand)
            del self.owed_slots[vm]

    def repopulate(self, ready: int, pending: int) -> bool:
        """Start ``size − ready − pending`` clones, plus what the standby tier lacks (the
        cycle's refill). True if any started."""
        if self.config_error.review(self.upkeep.template, self.upkeep.clone_target):
            self.failures, self.retry_at = 0, 0.0  # a new placement: no back-off from the old
        if self.upkeep.preparing:
            return False
        if self.io.clock.monotonic() < self.retry_at:
            return False  # clones failed just now; the periodic cycle tries again
        want = self.upkeep.size + self.standby.shortfall() - ready - pending
        started = 0
        for _ in range(max(0, want)):
            if not self.start(None):
                break
            started += 1
        else:
            self.slot_wait_since = None  # no clone is waiting for a slot any more
        return started > 0

    def refill(self, *, freed: int = 0) -> None:
        """Start clones if the pool is short. ``freed`` clone slots were just released by
        this pool: those it does not reuse go to pools waiting for one."""
        self.waiting_for_slot = False
        started = 0
        backing_off = self.io.clock.monotonic() < self.retry_at
        if not self.upkeep.preparing and self.upkeep.initialised and not backing_off:
            counts = self.io.store.counts(self.policy.name, (Queue.READY, Queue.PENDING))
            pooled_pending = counts[Queue.PENDING]
            if pooled_pending and len(self.ondemand):
                # a request's VMs are not the pool's: those pending are left out (counting
                # them as len(ondemand) also took off request VMs already delivered, and
                # over-cloned)
                pending = self.io.store.members(self.policy.name, Queue.PENDING)
                pooled_pending = sum(1 for vm in pending if vm not in self.ondemand)
            want = (self.upkeep.size + self.standby.shortfall() - counts[Queue.READY]
                    - len(self.vms.held) - pooled_pending)
            for _ in range(max(0, want)):
                if not self.start(None):
                    break
                started += 1
            else:
                self.slot_wait_since = None  # no clone is waiting for a slot any more
        if freed > started and not self.waiting_for_slot:
            broker = self.io.directory.get(Address.slot_broker().name)
            if broker is not None:
                broker.tell(CloneSlotFreed(freed - started))

    def _want_slot(self) -> None:
        if not self.waiting_for_slot:
            self.waiting_for_slot = True
            broker = self.io.directory.get(Address.slot_broker().name)
            if broker is not None:
                broker.tell(WantCloneSlot(self.policy.name))

    def for_request(self, msg: CloneForRequest) -> None:
        """Give an on-demand request a suspended standby VM (resumed for it), else clone one
        VM for it with an on-demand slot; the on-demand manager that granted it is answered
        whatever happens (``RequestCloneAnswered``; it
        tells the request's actor of a started clone, in the same manager). While the
        provider's breaker refuses clones, none starts: the answer is None and the request
        keeps its place in the manager's queue."""
        vm: str | None = None
        # a traced request's VM: one span from the grant to the VM ready (or failed)
        span = self.io.tracer.start("pool.clone", parent=msg.traceparent, attributes={
            "vmpooler.pool": self.policy.name, "vmpooler.request_id": msg.request_id,
        }) if msg.traceparent else NULL_SPAN
        try:
            left = self.breaker_until - self.io.clock.monotonic()
            request = (msg.request_id, msg.alias)
            vm = self.from_standby.take(request, msg.fence) if left <= 0 else None
            if vm is not None:
                self.ondemand.adopt(vm, request)
                span.set("vmpooler.standby", True)
                self.ondemand.slot_freed()  # no clone slot was taken: another may be granted
            elif left <= 0:
                vm = self.start(request, request_fence=msg.fence, traceparent=span.traceparent)
            else:  # the slot waits; the request learns until when (it may be past its TTL)
                self.ondemand.blocked(msg, self.io.clock.now() + left, self.breaker_reason)
        finally:
            self.ondemand.traced(vm, span)
            self.ondemand.clone_answered(msg, vm)

    def start(self, request: tuple[str, str] | None, *, request_fence: str = "",
              traceparent: str = "") -> str | None:
        """Reserve a name and a clone slot and start a clone; the VM's name, or None.

        ``request`` is ``(request_id, alias)`` for a clone of an on-demand request: it takes
        an on-demand slot, and the VM is the request's (see ``OnDemandVms``). With
        ``request_fence`` (the request's lease value the grant was made under) nothing
        starts once the request's lease holds another value. ``traceparent``: the span the
        provider's clone span hangs under.
        """
        name = self.policy.name
        settings = self.policy.settings
        if request is None and not self.config_error.allows_pool_clone():
            return None
        provider = self.calls.provider()
        if provider is None:
            return None
        limit = settings.task_limit if request is None else settings.ondemand_clone_limit
        for _ in range(3):
            vm = self.hostnames.candidate(settings.prefix)
            now = self.io.clock.now()
            code = self.io.store.reserve_clone(
                name, vm, limit=limit, clone_time=timefmt.format_epoch(now),
                domain=self.policy.pool.domain, request=request, request_fence=request_fence,
            )
            if code == CloneReservation.REQUEST_MOVED:
                log.info("[*] [%s] clone for request '%s' not started: the request moved to "
                         "another manager", name, request[0] if request else "")
                return None
            if code == CloneReservation.NO_SLOT:
                if request is None:
                    if self.slot_wait_since is None:
                        self.slot_wait_since = self.io.clock.monotonic()
                    self._want_slot()
                return None
            if code == CloneReservation.NAME_TAKEN:
                self.io.metrics.increment("vmpooler_errors.duplicatehostname", tags={"pool": name})
                continue
            self.vms.clone_started[vm] = now
            reserved = self.vms.reserved_at[vm] = self.io.clock.monotonic()
            if request is None:  # a request's wait is timed by the on-demand manager
                waited = self.slot_wait_since
                self.io.metrics.timing(
                    "clone.queue_wait", 0.0 if waited is None else max(0.0, reserved - waited),
                    tags={"pool": name, "kind": "pool"})
            if request is not None:
                self.ondemand.adopt(vm, request)
            template, target = self.upkeep.template, self.upkeep.clone_target
            if not self.calls.send(CloneVm(template, target), vm, traceparent=traceparent):
                self.io.store.clone_failed(name, vm, error="provider unavailable",
                                       error_class="ProviderUnavailable", ttl=self.policy.data_ttl,
                                       release_slot=True, ondemand=request is not None)
                self.ondemand.drop(vm)
                return None
            log.info("[*] [%s] '%s' is being cloned from '%s'%s", name, vm, template,
                     f" for request '{request[0]}'" if request else "")
            if request is None:
                self.config_error.started(vm)
            return vm
        log.error("[!] [%s] could not find a free hostname in 3 attempts", name)
        return None

    # -- answers ------------------------------------------------------------------------------
    def cloned(self, msg: ProviderCallFinished) -> None:
        """The answer to ``CLONE``: success → ``CLONE_SUCCEEDED`` and a pending check at
        once; failure → back-off, dead letter, ``CLONE_FAILED``. Either way the slot is
        reused or handed on (a request's to the on-demand manager)."""
        name = self.policy.name
        vm = msg.vm or ""
        ondemand = vm in self.ondemand
        if msg.failure is None:
            result = msg.result_of(CloneResult)
            try:
                self.io.store.clone_succeeded(
                    name, vm, seconds=result.seconds, ip=result.ip,
                    date=timefmt.date_bucket(self.io.clock.now()), ondemand=ondemand,
                )
            except Exception:
                self.owed_slots[vm] = ondemand
                raise
            self.failures = 0
            self.config_error.succeeded(vm)
            self.io.metrics.increment("clone.outcome", tags={
                "pool": name, "provider": self.policy.pool.provider, "result": "success"})
            self.io.metrics.gauge("vmpooler_clone", result.seconds, tags={"pool": name})
            log.info("[+] [%s] '%s' cloned in %.2f seconds", name, vm, result.seconds)
            self.upkeep.cloned(result.seconds)
            self.ondemand.times.cloned(result.seconds)
            self.ondemand.event(vm, "cloned", {"vmpooler.seconds": result.seconds})
            self.calls.send(CheckPending(), vm)
            if ondemand:
                self.ondemand.slot_freed()
            else:
                self.refill(freed=1)
            return
        failure = msg.failure
        self.failures += 1
        backoff = self.policy.backoff
        self.retry_at = self.io.clock.monotonic() + min(
            backoff.max, backoff.min * 2 ** (self.failures - 1))
        if failure.circuit_open:  # no clone is tried before the breaker lets calls through
            self.breaker_until = self.io.clock.monotonic() + failure.retry_after
            self.breaker_reason = (f"provider '{self.policy.pool.provider}' is unavailable: "
                                   f"{failure.message}")
            self.retry_at = max(self.retry_at, self.breaker_until)
        if failure.error_class == "StaleDnsError":
            self.io.metrics.increment("vmpooler_errors.staledns", tags={"pool": name})
        if not failure.circuit_open:  # refused before reaching the provider: nothing died
            self.dead_letters.add("clone", vm, failure.error_class, failure.message)
            self.io.metrics.increment("clone.outcome", tags={
                "pool": name, "provider": self.policy.pool.provider, "result": "failure"})
        try:
            was_pending = self.io.store.clone_failed(name, vm, error=failure.message,
                                                 error_class=failure.error_class,
                                                 ttl=self.policy.data_ttl, release_slot=True,
                                                 ondemand=ondemand)
        except Exception:
            self.owed_slots[vm] = ondemand
            raise
        if was_pending and not failure.circuit_open:
            self.io.lost("clone_failed")
        self.vms.forget(vm)
        explained = self.config_error.failed(vm, failure, template=self.upkeep.template,
                                             clone_target=self.upkeep.clone_target)
        log_failure(failure, "[!] [%s] '%s' clone failed: %s: %s", name, vm,
                    failure.error_class, failure.message,
                    level=logging.DEBUG if explained else logging.ERROR)
        if ondemand:
            self.ondemand.failed(vm, f"clone failed: {failure.error_class}: {failure.message}",
                                 permanent=failure.permanent, refused=failure.circuit_open)
            self.ondemand.slot_freed()
        else:
            self.refill(freed=1)
