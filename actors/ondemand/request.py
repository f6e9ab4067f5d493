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

Its parts, each used by this actor only: the checks and reads after the claim
(:mod:`.claim`, :mod:`.from_ready`, :mod:`.impossible`), what it knows of its VMs
(:mod:`.ledger`), the pools' news of them (:mod:`.vm_events`), its asks for clone slots
(:mod:`.wants`), and the writes that end it (:mod:`.ending`). This module is the mailbox,
the phases and their timers.

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
    request_actor_name,
)
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.ondemand.claim import recover, refusal
from vmpooler.actors.ondemand.ending import Ending
from vmpooler.actors.ondemand.from_ready import take_ready
from vmpooler.actors.ondemand.impossible import blocked_past_deadline
from vmpooler.actors.ondemand.ledger import Ledger
from vmpooler.actors.ondemand.lifecycle import (
    OUTCOMES,
    VERIFY_MIN,
    Phase,
    backoff,
    check_transition,
    ttl_reason,
    verify_interval,
)
from vmpooler.actors.ondemand.vm_events import VmEvents
from vmpooler.actors.ondemand.wants import Wants
from vmpooler.actors.runtime.clock import Clock, Scheduler, Timer
from vmpooler.actors.runtime.executor import ActorExecutor
from vmpooler.actors.runtime.supervisor import PooledSupervisedActor
from vmpooler.actors.storage.lease_store import Fence, Fenced
from vmpooler.actors.storage.redis_errors import redis_failure
from vmpooler.actors.storage.request_store import Entry, RequestStore
from vmpooler.actors.tracing import NULL_TRACER, Tracer

__all__ = ["OUTCOMES", "VERIFY_MIN", "RequestActor", "verify_interval"]

log = logging.getLogger(__name__)


class RequestActor(PooledSupervisedActor):
    """The single writer of one request's state while it is in flight.

    ``executor`` runs its mailbox; ``manager`` is its supervisor and the party it asks for
    clone slots (both only ever told). :meth:`fail`, :meth:`finish`, :meth:`fulfil` and
    :meth:`ask_for_missing` are for its parts (:class:`VmEvents`), inside its mailbox."""

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
        tracer: Tracer = NULL_TRACER,
        traceparent: str = "",  # the API request's span, when it created the request
    ) -> None:
        super().__init__(name=request_actor_name(request_id), supervisor=manager,
                         executor=executor)
        self.request_id = request_id
        # every write of the request and its parts runs behind its lease (None: unfenced);
        # the fence reads the lease's value held now, and a lease lost stops this actor
        self.store = store.with_fence(fence)
        self.settings = settings
        self.pools, self.ceilings = pools, ceilings or {}
        self.from_ready = from_ready  # pools whose ready VMs it takes first
        self.refill = refill  # wakes a pool actor whose ready VMs it took
        self.ending = Ending(request_id=request_id, store=self.store, metrics=metrics,
                             clock=clock, data_ttl=int(data_ttl_hours) * 3600)
        self.manager = manager
        self.clock = clock
        self.scheduler = scheduler
        self.metrics = metrics
        self.phase = Phase.CLAIMING
        self.vms = Ledger()
        self.wants = Wants(request_id, self.store, self._tell_manager)
        # from its start to its end (ready, failed, gone), under the API request's span
        self.span = tracer.start("ondemand.request", parent=traceparent,
                                 attributes={"vmpooler.request_id": request_id})
        self.wants.traceparent = self.span.traceparent
        self.events = VmEvents(self, request_id=request_id, store=self.store, settings=settings,
                               ending=self.ending, clock=clock, metrics=metrics)
        self.created: float | None = None  # epoch of the request's creation (from Redis)
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
        claim = self.store.claim(self.request_id, now=self.clock.now())
        if not claim.found or claim.status is not None:
            self.finish(claim.status or "", quiet=True)
            return
        vms = self.vms = Ledger(entries={e.key: e for e in claim.entries})
        self.created = claim.created
        self.events.retries = claim.retry_count
        self.events.has_token = claim.has_token
        self.wants.origin = claim.origin
        reason = refusal(claim.entries, self.pools, self.ceilings)
        if reason is not None:
            self.fail(reason)
            return
        self.wants.tasks.score = float(int(self.clock.now()))  # vmpooler: tasks queued
        if claim.fresh:
            self._take_ready()
        if not claim.fresh:  # a predecessor may have had VMs delivered or on their way
            recover(self.store, self.request_id, vms)
        if vms.complete() and self.fulfil():
            return
        deadline = claim.created + self.settings.ondemand_request_ttl * 60
        self.deadline = self.scheduler.tell_later(
            max(0.0, deadline - self.clock.now()), self.actor_ref,
            RequestExpired(self.request_id))
        self._arm_verify()
        self.ask_for_missing()
        # a predecessor (before a restart) may have left members with any count: replaced
        self._sync_tasks(stale=tuple(vms.entries.values()))

    def _take_ready(self) -> None:
        """``ondemand_from_ready``: a request claimed for the first time takes ready VMs of
        those pools at once; only the rest is cloned."""
        lifetime = self.settings.vm_lifetime_auth if self.events.has_token else None
        for pool in take_ready(self.store, self.request_id, self.vms, self.from_ready,
                               now=self.clock.now(), lifetime=lifetime,
                               metrics=self.metrics):
            self.refill(pool)

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
                self.events.cloning(vm, (alias, pool))
            case RequestVmReady():
                self.events.ready(message)
            case RequestVmFailed():
                self.events.failed(message)
            case RequestExpired():
                self._expired(message)
            case RequestPoolBlocked() if self.phase is Phase.ACTIVE and self.created:
                deadline = self.created + self.settings.ondemand_request_ttl * 60
                if reason := blocked_past_deadline(message, deadline):
                    self.fail(reason)
            case VerifyInFlight():
                self._verify_in_flight()
            case ResendWants():
                self.wants.resend(self.vms)
            case RequestChanged():
                status = self.store.status(self.request_id)
                if status is not None:
                    self.finish(status)

    # -- timers ---------------------------------------------------------------------------------
    def _arm_verify(self) -> None:
        self.verify_timer = self.scheduler.tell_later(
            verify_interval(self.settings), self.actor_ref, VerifyInFlight(self.request_id))

    def _verify_in_flight(self) -> None:
        """Every ``verify_interval``: ask again for what a refused clone left missing, and
        replace the VMs on their way that left pending unannounced."""
        self._arm_verify()
        if self.phase is Phase.ACTIVE:
            self.ask_for_missing()  # what a refused clone left missing
        self.events.verify_in_flight()

    def _expired(self, msg: RequestExpired) -> None:
        grace = self.settings.ondemand_request_grace
        if not msg.grace and grace > 0 and self.vms.in_flight:
            self._enter(Phase.GRACE)
            self.wants.withdraw(self.vms)  # withdraw queued clones
            log.info("[*] request '%s' reached its TTL with %d VMs on their way; waiting %ds",
                     self.request_id, len(self.vms.in_flight), grace)
            self.deadline = self.scheduler.tell_later(
                grace, self.actor_ref, RequestExpired(self.request_id, grace=True))
            return
        self.fail(ttl_reason(self.settings))

    # -- for its parts, and the end -------------------------------------------------------------
    def ask_for_missing(self) -> None:
        """Ask the manager for the VMs neither delivered, on their way nor queued."""
        self.wants.ask_for_missing(self.vms)

    def fulfil(self) -> bool:
        """Try the ready transition; True if the request is finished (either way)."""
        status = self.ending.fulfil(list(self.vms.entries.values()), self.created)
        if status is not None:
            self.finish(status)
        return status is not None

    def fail(self, reason: str) -> None:
        """Fail the request unless it finished already, and finish with its final status."""
        self.finish(self.ending.fail(list(self.vms.entries.values()), reason))

    def _sync_tasks(self, stale: tuple[Entry, ...] = ()) -> None:
        """Mirror the queued clones in ``vmpooler__odcreate__task`` (none once finished)."""
        self.wants.sync(self.vms, finished=self.phase is Phase.FINISHED, stale=stale)

    def _fenced(self, exc: Fenced) -> None:
        """The request's lease was lost (another manager holds it now): nothing was
        written; stop without touching the request (its new holder runs it)."""
        log.warning("[!] request '%s': late write refused by the fence (%s); this manager "
                    "no longer runs it", self.request_id, exc)
        self._enter(Phase.FINISHED)
        self._cancel_timers()
        self.vms.in_flight.clear()
        self.vms.queued.clear()
        self._end_span("")
        self._tell_manager(RequestFinished(self.request_id, ""))
        self.actor_ref.stop(block=False)

    def _tell_manager(self, message: object) -> None:
        with contextlib.suppress(pykka.ActorDeadError):  # it is being restarted
            self.manager.tell(message)

    def finish(self, status: str, *, quiet: bool = False) -> None:
        """Finish with ``status`` (``quiet``: found finished at the claim, not counted):
        retire the VMs on their way, clear the task mirror, tell the manager, stop."""
        self._enter(Phase.FINISHED)
        self._cancel_timers()
        self.ending.retire(self.vms.in_flight)
        self.vms.in_flight.clear()
        self._sync_tasks()
        if not quiet:
            self.ending.finished(status)
        self._end_span(status)
        self._tell_manager(RequestFinished(self.request_id, status))
        self.actor_ref.stop(block=False)

    def _end_span(self, status: str) -> None:
        """End the request's span with its final ``status`` ('' when gone or moved)."""
        self.span.set("vmpooler.status", status or "gone")
        self.span.set("vmpooler.vms", len(self.vms.entries))
        if status == "failed":
            self.span.fail("the request failed")
        self.span.end()
