"""``RequestActor``: one in-flight on-demand request (reference §2.4), one mailbox.

Every event that concerns the request arrives here as a message and is handled one at a
time: a VM cloning, ready or failed (from the pool actors), the deadline
(:class:`RequestExpired`, from the scheduler), a deletion through the API
(:class:`RequestChanged`). Whichever of "last VM ready" and "deadline" is first in the
mailbox wins, so a request whose VMs all arrived before its deadline is never failed
(vmpooler's race, seed 002). Its phases and their transitions: :mod:`.lifecycle`.

1. **Claim** (``CLAIMING``). It moves the request to ``provisioning__processing`` (keeping
   its creation time, so the deadline counts from it) and reads what it asks for; an actor
   rebuilt after a restart also reads what was delivered and which of its VMs are still
   pending. A request claimed for the first time has none, and reads nothing more. A Redis
   outage is retried with back-off, the messages meanwhile kept in order.
2. **Ask** (``ACTIVE``). It asks the manager for the VMs it misses (:class:`WantRequestVms`).
3. **Attach.** A ready VM is attached by one compare-and-set script (pending → running,
   recorded, checked out under the request's token); the last one marks the request
   ``ready``.
4. **Retry.** A failed clone, or a VM that left pending unannounced (checked every
   ``check_loop_delay_max``, 5 s to 1 min), is cloned again until ``max_vm_retries``; a
   permanent provider error fails the request at once.
5. **Finish** (``FINISHED``). ``ready``, ``failed`` or ``deleted``: the actor retires its VMs
   still booting, tells the manager (:class:`RequestFinished`) and stops. A VM ready later
   is moved to completed by the pool actor (``SETTLE_ORPHAN``).

With ``ondemand_request_grace`` set, a request with VMs on their way at its deadline enters
``GRACE``: no new clone; one of them ready completes it, the window's end (or its last VM
failing) fails it.

Runtime: a :class:`PooledSupervisedActor` (no thread of its own: its mailbox is served one
message at a time by the system's shared :class:`ActorExecutor`), so it only ever tells.
Its supervisor is the on-demand manager, which restarts it under the system's restart policy.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import pykka
import redis

from vmpooler.actors.config import GlobalSettings
from vmpooler.actors.messages import (
    ClaimRequest,
    RequestChanged,
    RequestExpired,
    RequestFinished,
    RequestPoolBlocked,
    RequestVmCloning,
    RequestVmFailed,
    RequestVmReady,
    ResendWants,
    VerifyInFlight,
    WantRequestVms,
    request_actor_name,
)
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.ondemand.ending import Ending
from vmpooler.actors.ondemand.from_ready import take_ready
from vmpooler.actors.ondemand.impossible import blocked_past_deadline, over_ceiling
from vmpooler.actors.ondemand.ledger import Ledger, TaskMirror
from vmpooler.actors.ondemand.lifecycle import (
    OUTCOMES,
    VERIFY_MIN,
    Phase,
    backoff,
    check_transition,
    verify_interval,
)
from vmpooler.actors.runtime.clock import Clock, Scheduler, Timer
from vmpooler.actors.runtime.executor import ActorExecutor
from vmpooler.actors.runtime.supervisor import PooledSupervisedActor
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.lease_store import Fence, Fenced
from vmpooler.actors.storage.redis_errors import redis_failure
from vmpooler.actors.storage.request_store import (
    AttachOutcome,
    Entry,
    RequestOrigin,
    RequestStore,
)

__all__ = ["OUTCOMES", "VERIFY_MIN", "RequestActor", "verify_interval"]

log = logging.getLogger(__name__)


class RequestActor(PooledSupervisedActor):
    """The single writer of one request's state while it is in flight.

    ``executor`` runs its mailbox; ``manager`` is its supervisor and the party it asks for
    clone slots (both only ever told)."""

    def __init__(
        self,
        *,
        request_id: str,
        store: RequestStore,
        settings: GlobalSettings,
        pools: frozenset[str],
        data_ttl_hours: int,
        manager: pykka.ActorRef[Any],
        clock: Clock,
        scheduler: Scheduler,
        metrics: Metrics,
        executor: ActorExecutor,
        fence: Fence | None = None,
        from_ready: frozenset[str] = frozenset(),
        refill: Callable[[str], None] = lambda _pool: None,
        ceilings: Mapping[str, int] | None = None,  # pool -> max_pool_size
    ) -> None:
        super().__init__(name=request_actor_name(request_id), supervisor=manager,
                         executor=executor)
        self.request_id = request_id
        self.fence = fence  # the request's lease (None: writes unfenced)
        self.store = store
        self.settings = settings
        self.pools, self.ceilings = pools, ceilings or {}
        self.from_ready = from_ready  # pools whose ready VMs it takes first
        self.refill = refill  # wakes a pool actor whose ready VMs it took
        self.ending = Ending(request_id=request_id, store=store, metrics=metrics, clock=clock,
                             fence=fence, data_ttl=int(data_ttl_hours) * 3600)
        self.manager = manager
        self.clock = clock
        self.scheduler = scheduler
        self.metrics = metrics
        self.phase = Phase.CLAIMING
        self.vms = Ledger()
        self.tasks = TaskMirror(store, request_id)
        self.retries = 0
        self.created: float | None = None  # epoch of the request's creation (from Redis)
        self.has_token = False
        self.origin: RequestOrigin | None = None  # who asked (from the claim)
        self.deadline: Timer | None = None  # the TTL, then the grace window
        self.verify_timer: Timer | None = None
        self.outage = 0  # consecutive messages that met a Redis error
        self.waiting: list[object] = []  # messages that came while CLAIMING

    # -- phases ---------------------------------------------------------------------------------
    def _enter(self, phase: Phase) -> None:
        """Move to ``phase``; a move :data:`.lifecycle.TRANSITIONS` does not allow raises
        :class:`.lifecycle.IllegalTransitionError`."""
        self.phase = check_transition(self.request_id, self.phase, phase)

    def _cancel_timers(self) -> None:
        for timer in (self.deadline, self.verify_timer):
            if timer is not None:
                timer.cancel()

    def _retry_later(self, exc: redis.RedisError, what: str, message: object) -> None:
        """A Redis error: tell ``message`` to this actor again after the back-off."""
        self.outage += 1
        delay = backoff(self.outage)
        log.error("[!] request '%s': %s%s: %s; %s in %.0fs", self.request_id,
                  redis_failure(exc), what, exc,
                  "claiming again" if isinstance(message, ClaimRequest) else "retrying", delay)
        self.scheduler.tell_later(delay, self.actor_ref, message)

    # -- start ----------------------------------------------------------------------------------
    def setup(self) -> None:
        self._start()

    def _start(self) -> None:
        """Claim the request and set up from what Redis holds; a Redis outage is retried
        with back-off (the claim is idempotent), the messages meanwhile kept in order."""
        try:
            self._setup()
        except Fenced as exc:
            self._fenced(exc)
        except redis.RedisError as exc:
            self._cancel_timers()
            self._retry_later(exc, " at start", ClaimRequest(self.request_id))
            return
        self.outage = 0
        if self.phase is Phase.CLAIMING:
            self._enter(Phase.ACTIVE)
        waiting, self.waiting = self.waiting, []
        if self.phase is not Phase.FINISHED:
            for message in waiting:
                self.actor_ref.tell(message)

    def _setup(self) -> None:
        claim = self.store.claim(self.request_id, now=self.clock.now(), fence=self.fence)
        if not claim.found or claim.status is not None:
            self._finish(claim.status or "", quiet=True)
            return
        vms = self.vms = Ledger(entries={e.key: e for e in claim.entries})
        self.created = claim.created
        self.retries = claim.retry_count
        self.has_token = claim.has_token
        self.origin = claim.origin
        unknown = sorted({e.pool for e in claim.entries} - self.pools)
        impossible = over_ceiling(claim.entries, self.ceilings)
        if unknown or impossible:
            self._fail(impossible or
                       f"Configuration error: pool '{', '.join(unknown)}' is not configured")
            return
        self.tasks.score = float(int(self.clock.now()))  # vmpooler: the time tasks are queued
        if claim.fresh:
            self._take_ready()
        if not claim.fresh:  # a predecessor may have had VMs delivered or on their way
            vms.delivered.update(self.store.delivered(self.request_id, list(vms.entries.values())))
            pools = [e.pool for e in vms.entries.values()]
            for vm, key in self.store.in_flight(self.request_id, pools).items():
                if key in vms.entries:
                    vms.in_flight[vm] = key
        if vms.complete() and self._fulfil():
            return
        deadline = claim.created + self.settings.ondemand_request_ttl * 60
        self.deadline = self.scheduler.tell_later(
            max(0.0, deadline - self.clock.now()), self.actor_ref,
            RequestExpired(self.request_id))
        self._arm_verify()
        self._ask_for_missing()
        # a predecessor (before a restart) may have left members with any count: replaced
        self._sync_tasks(stale=tuple(vms.entries.values()))

    # -- mailbox --------------------------------------------------------------------------------
    def handle(self, message: object) -> None:
        match self.phase, message:
            case Phase.FINISHED, _:
                return
            case Phase.CLAIMING, ClaimRequest():
                self._start()
                return
            case Phase.CLAIMING, _:
                self.waiting.append(message)
                return
            case _, ClaimRequest():  # claimed already
                return
        try:
            self._dispatch(message)
            self.outage = 0
            self._sync_tasks()
        except Fenced as exc:
            self._fenced(exc)
        except redis.RedisError as exc:
            # Redis is away: handle the message again later (the scripts make that safe).
            self._retry_later(exc, "", message)

    def _dispatch(self, message: object) -> None:
        match message:
            case RequestVmCloning(alias=alias, pool=pool, vm=vm):
                self._cloning(vm, (alias, pool))
            case RequestVmReady():
                self._vm_ready(message)
            case RequestVmFailed():
                self._vm_failed(message)
            case RequestExpired():
                self._expired(message)
            case RequestPoolBlocked() if self.phase is Phase.ACTIVE and self.created:
                deadline = self.created + self.settings.ondemand_request_ttl * 60
                if reason := blocked_past_deadline(message, deadline):
                    self._fail(reason)
            case VerifyInFlight():
                self._verify_in_flight()
            case ResendWants():
                self._resend_wants()
            case RequestChanged():
                status = self.store.status(self.request_id)
                if status is not None:
                    self._finish(status)

    def _cloning(self, vm: str, key: tuple[str, str]) -> None:
        """``vm``'s clone started for ``key``. An outcome heard before (the two may come
        through different managers) is applied now: a failure is counted, a delivered VM is
        not on its way any more."""
        self.vms.cloning(vm, key)
        if vm not in self.vms.early:
            return
        outcome = self.vms.early.pop(vm)
        if outcome is None:
            self.vms.in_flight.pop(vm, None)
        else:
            self._vm_failed(outcome)

    def _vm_ready(self, msg: RequestVmReady) -> None:
        key = (msg.alias, msg.pool)
        announced = self.vms.in_flight.pop(msg.vm, None) is not None
        entry = self.vms.entries.get(key) or Entry(msg.alias, msg.pool, 0)  # 0: refused
        lifetime = self.settings.vm_lifetime_auth if self.has_token else None
        outcome = self.store.attach(self.request_id, entry, msg.vm,
                                    now=timefmt.format_epoch(self.clock.now()),
                                    lifetime=lifetime, fence=self.fence)
        if not announced and outcome is not AttachOutcome.NOT_PENDING:
            self.vms.heard_early(msg.vm, None)  # its clone's start may still be on its way
        if outcome is AttachOutcome.ATTACHED:
            self.vms.delivered[key] += 1
            log.info("[>] [%s] '%s' delivered to request '%s' (%d of %d)", msg.pool, msg.vm,
                     self.request_id, self.vms.delivered[key], entry.count)
            if self.vms.complete():
                self._fulfil()
        elif outcome is AttachOutcome.REFUSED:
            self.ending.lost(msg.pool)
            log.info("[>] [%s] '%s' not needed by request '%s', moved to 'completed'",
                     msg.pool, msg.vm, self.request_id)
            status = self.store.status(self.request_id)
            if status is not None:
                self._finish(status)
        elif outcome is AttachOutcome.NOT_PENDING:
            # It left pending behind our back (retired by someone else): replace it.
            self._vm_failed(RequestVmFailed(self.request_id, msg.alias, msg.pool, msg.vm,
                                            "VM left 'pending' before it was delivered"),
                            tracked=True)

    def _vm_failed(self, msg: RequestVmFailed, *, tracked: bool = False) -> None:
        key = (msg.alias, msg.pool)
        if not tracked and self.vms.in_flight.pop(msg.vm, None) is None:
            # not ours, already counted, or its clone's start is still on its way
            self.vms.heard_early(msg.vm, msg)
            return
        if msg.permanent:
            self.metrics.increment("vmpooler_errors.permanently_failed", tags={"pool": msg.pool})
            self._fail(f"Configuration error: {msg.reason}")
            return
        if msg.refused:  # nothing was tried: no retry spent; asked again at the next check
            log.info("[!] [%s] '%s' of request '%s' not cloned (%s); asking again in %.0fs",
                     msg.pool, msg.vm, self.request_id, msg.reason,
                     verify_interval(self.settings))
            self._grace_over_if_idle()
            return
        if self.retries >= self.settings.max_vm_retries:
            self.metrics.increment("vmpooler_errors.permanently_failed", tags={"pool": msg.pool})
            self._fail("Max retry attempts exceeded")
            return
        self.retries = self.store.record_retry(self.request_id, fence=self.fence)
        log.info("[!] [%s] '%s' of request '%s' failed (%s); retry %d of %d", msg.pool,
                 msg.vm, self.request_id, msg.reason, self.retries,
                 self.settings.max_vm_retries)
        if self.phase is Phase.GRACE:
            self._grace_over_if_idle()
        elif key in self.vms.entries:
            self._ask_for_missing()

    def _grace_over_if_idle(self) -> None:
        """In the grace window, a request with no VM left on its way fails at once."""
        if self.phase is Phase.GRACE and not self.vms.in_flight:
            self._fail(self._ttl_reason())

    def _arm_verify(self) -> None:
        self.verify_timer = self.scheduler.tell_later(
            verify_interval(self.settings), self.actor_ref, VerifyInFlight(self.request_id))

    def _verify_in_flight(self) -> None:
        """A VM on its way that left pending without a word (its pool's message was lost
        with a manager that died) counts as failed, so it is replaced."""
        self._arm_verify()
        if self.phase is Phase.ACTIVE:
            self._ask_for_missing()  # what a refused clone left missing
        in_flight = self.vms.in_flight
        if not in_flight:
            return
        pending = self.store.still_pending({vm: key[1] for vm, key in in_flight.items()})
        for vm, (alias, pool) in list(in_flight.items()):
            if vm not in pending:
                self._vm_failed(RequestVmFailed(self.request_id, alias, pool, vm,
                                                "VM left 'pending' unannounced"))
                if self.phase is Phase.FINISHED:
                    return

    def _expired(self, msg: RequestExpired) -> None:
        grace = self.settings.ondemand_request_grace
        if not msg.grace and grace > 0 and self.vms.in_flight:
            self._enter(Phase.GRACE)
            self.vms.queued.clear()
            self._tell_manager(WantRequestVms(self.request_id, ()))  # withdraw queued clones
            log.info("[*] request '%s' reached its TTL with %d VMs on their way; waiting %ds",
                     self.request_id, len(self.vms.in_flight), grace)
            self.deadline = self.scheduler.tell_later(
                grace, self.actor_ref, RequestExpired(self.request_id, grace=True))
            return
        self._fail(self._ttl_reason())

    def _ttl_reason(self) -> str:
        return (f"The request exceeded ondemand_request_ttl of "
                f"{self.settings.ondemand_request_ttl} minutes")

    # -- outcomes -------------------------------------------------------------------------------
    def _fulfil(self) -> bool:
        """Try the ready transition; True if the request is finished (either way)."""
        status = self.ending.fulfil(list(self.vms.entries.values()), self.created)
        if status is not None:
            self._finish(status)
        return status is not None

    def _fail(self, reason: str) -> None:
        self._finish(self.ending.fail(list(self.vms.entries.values()), reason))

    def _take_ready(self) -> None:
        """``ondemand_from_ready``: a request claimed for the first time takes ready VMs of
        those pools at once; only the rest is cloned."""
        lifetime = self.settings.vm_lifetime_auth if self.has_token else None
        for pool in take_ready(self.store, self.request_id, self.vms, self.from_ready,
                               now=self.clock.now(), lifetime=lifetime,
                               fence=self.fence, metrics=self.metrics):
            self.refill(pool)

    def _ask_for_missing(self) -> None:
        wants = self.vms.take_missing()
        if wants:
            self._tell_manager(self._wants(tuple(wants)))

    def _resend_wants(self) -> None:
        """The granter changed: everything still queued is sent again, replacing what the
        granter had (none while in grace: nothing is queued then)."""
        queued = self.vms.queued_counts()
        self._tell_manager(self._wants(
            tuple(key for key, n in queued.items() for _ in range(n)), whole=True))

    def _wants(self, wants: tuple[tuple[str, str], ...], *, whole: bool = False,
               ) -> WantRequestVms:
        origin = self.origin or RequestOrigin(self.request_id)
        user = "" if origin.user == self.request_id else origin.user  # a user of its own
        return WantRequestVms(self.request_id, wants, user, origin.priority, origin.share,
                              whole=whole)

    def _sync_tasks(self, stale: tuple[Entry, ...] = ()) -> None:
        """Mirror the queued clones in ``vmpooler__odcreate__task`` (none once finished)."""
        finished = self.phase is Phase.FINISHED
        self.tasks.sync({} if finished else self.vms.queued_counts(), stale)

    def _fenced(self, exc: Fenced) -> None:
        """The request's lease was lost (another manager holds it now): nothing was
        written; stop without touching the request (its new holder runs it)."""
        log.warning("[!] request '%s': late write refused by the fence (%s); this manager "
                    "no longer runs it", self.request_id, exc)
        self._enter(Phase.FINISHED)
        self._cancel_timers()
        self.vms.in_flight.clear()
        self.vms.queued.clear()
        self._tell_manager(RequestFinished(self.request_id, ""))
        self.actor_ref.stop(block=False)

    def _tell_manager(self, message: object) -> None:
        with contextlib.suppress(pykka.ActorDeadError):  # it is being restarted
            self.manager.tell(message)

    def _finish(self, status: str, *, quiet: bool = False) -> None:
        self._enter(Phase.FINISHED)
        self._cancel_timers()
        self.ending.retire(self.vms.in_flight)
        self.vms.in_flight.clear()
        self._sync_tasks()
        if not quiet:
            self.ending.finished(status)
        self._tell_manager(RequestFinished(self.request_id, status))
        self.actor_ref.stop(block=False)
