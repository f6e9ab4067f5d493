"""``RequestActor``: one in-flight on-demand request (reference §2.4), one mailbox.

Every event that concerns the request arrives here as a message and is handled one at a
time: a VM cloning, ready or failed (from the pool actors), the deadline
(:class:`RequestExpired`, from the scheduler), a deletion through the API
(:class:`RequestChanged`). Whichever of "last VM ready" and "deadline" is first in the
mailbox wins; they never interleave, so a request whose VMs all arrived before its deadline
is never failed (vmpooler's race, seed 002).

Life of the actor (its phases and their transitions: :mod:`.lifecycle`):

1. **Claim** (``CLAIMING``). On start it moves the request from ``provisioning__request`` to
   ``provisioning__processing`` (keeping its creation time) and reads what it asks for,
   what was already delivered and which of its VMs are still pending — so an actor rebuilt
   after a manager restart carries on where its predecessor stopped, with the deadline
   still counted from the request's creation. A request claimed for the first time (it
   never had an actor) has no VM yet: nothing more is read, so starting many requests at
   once costs each the same. Messages that arrive meanwhile wait, in order.
2. **Ask** (``ACTIVE``). It asks the on-demand manager for the VMs it still misses
   (:class:`WantRequestVms`); the manager hands out on-demand clone slots fairly.
3. **Attach.** A ready VM is attached by one compare-and-set script: pending → running,
   recorded in the request's set, checked out under the request's token. When every entry
   is full, another script marks the request ``ready``.
4. **Retry.** A failed clone or a VM that never became ready is retried (one new clone per
   failure) until ``max_vm_retries``; a permanent provider error fails the request at once.
   Every ``check_loop_delay_max`` (5 s to 1 min) the actor also checks that its VMs on their
   way are still pending: one that left unannounced (the pool's message was lost with a
   manager that died) counts as failed.
5. **Finish** (``FINISHED``). ``ready``, ``failed`` (deadline, permanent error, retries
   exhausted) or ``deleted`` (the API): the actor retires its VMs still booting, tells the manager
   (:class:`RequestFinished`) and stops. A VM that becomes ready afterwards is moved to
   completed by the pool actor (``SETTLE_ORPHAN``): it never reaches anyone else.

Runtime: a request actor has no thread of its own. It is a :class:`PooledSupervisedActor`,
its mailbox served by the system's shared :class:`ActorExecutor` (a few threads for every
request actor), with the same one-message-at-a-time guarantee as a thread of its own. So it
never waits on another actor: everything it sends is a ``tell``. Its supervisor is the
on-demand manager, which restarts it under the system's restart policy.

Late completion: at the deadline a request with VMs still cloning or booting fails, unless
``ondemand_request_grace`` (seconds, default 0) is set: then it starts no new clone and
waits that long for the VMs already on their way (``GRACE``); one arriving within the
window completes the request, and the window's end fails it.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import pykka
import redis

from vmpooler.actors.config import GlobalSettings
from vmpooler.actors.messages import (
    ClaimRequest,
    RequestChanged,
    RequestExpired,
    RequestFinished,
    RequestVmCloning,
    RequestVmFailed,
    RequestVmReady,
    VerifyInFlight,
    WantRequestVms,
    request_actor_name,
)
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.ondemand.ledger import Ledger, TaskMirror
from vmpooler.actors.ondemand.lifecycle import Phase, backoff, check_transition
from vmpooler.actors.runtime.clock import Clock, Scheduler, Timer
from vmpooler.actors.runtime.executor import ActorExecutor
from vmpooler.actors.runtime.supervisor import PooledSupervisedActor
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.lease_store import Fence, Fenced
from vmpooler.actors.storage.redis_errors import redis_failure
from vmpooler.actors.storage.request_store import AttachOutcome, Entry, RequestStore

__all__ = ["OUTCOMES", "VERIFY_MIN", "RequestActor", "verify_interval"]

log = logging.getLogger(__name__)

VERIFY_MIN = 5.0
"""Seconds between two checks that the VMs on their way are still pending, at least
(``check_loop_delay_max``, at most a minute)."""
OUTCOMES = frozenset({"ready", "failed", "deleted"})
"""The ``result`` tag values of ``ondemand.outcome``: the terminal state this actor saw the
request reach (once per request; a request found already finished at start is not counted)."""


def verify_interval(settings: GlobalSettings) -> float:
    """Seconds between two checks of a request's VMs on their way: ``check_loop_delay_max``,
    between :data:`VERIFY_MIN` and a minute."""
    return min(60.0, max(VERIFY_MIN, float(settings.check_loop_delay_max)))


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
    ) -> None:
        super().__init__(name=request_actor_name(request_id), supervisor=manager,
                         executor=executor)
        self.request_id = request_id
        self.fence = fence  # the request's lease (None: writes unfenced)
        self.store = store
        self.settings = settings
        self.pools = pools
        self.data_ttl = int(data_ttl_hours) * 3600
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
        self.deadline: Timer | None = None  # the TTL, then the grace window
        self.verify_timer: Timer | None = None
        self.outage = 0  # consecutive messages that met a Redis error
        self.waiting: list[Any] = []  # messages that came while CLAIMING

    # -- phases ---------------------------------------------------------------------------------
    def _enter(self, phase: Phase) -> None:
        """Move to ``phase``; a move :data:`.lifecycle.TRANSITIONS` does not allow raises
        :class:`.lifecycle.IllegalTransitionError`."""
        self.phase = check_transition(self.request_id, self.phase, phase)

    def _cancel_timers(self) -> None:
        for timer in (self.deadline, self.verify_timer):
            if timer is not None:
                timer.cancel()

    def _retry_later(self, exc: redis.RedisError, what: str, message: Any) -> None:
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
        unknown = sorted({e.pool for e in claim.entries} - self.pools)
        if unknown:
            self._fail(f"Configuration error: pool '{', '.join(unknown)}' is not configured")
            return
        self.tasks.score = float(int(self.clock.now()))  # vmpooler: the time tasks are queued
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
    def handle(self, message: Any) -> Any:
        match self.phase, message:
            case Phase.FINISHED, _:
                return None
            case Phase.CLAIMING, ClaimRequest():
                self._start()
                return None
            case Phase.CLAIMING, _:
                self.waiting.append(message)
                return None
            case _, ClaimRequest():  # claimed already
                return None
        try:
            self._dispatch(message)
            self.outage = 0
            self._sync_tasks()
        except Fenced as exc:
            self._fenced(exc)
        except redis.RedisError as exc:
            # Redis is away: handle the message again later (the scripts make that safe).
            self._retry_later(exc, "", message)
        return None

    def _dispatch(self, message: Any) -> None:
        match message:
            case RequestVmCloning(alias=alias, pool=pool, vm=vm):
                self.vms.cloning(vm, (alias, pool))
            case RequestVmReady():
                self._vm_ready(message)
            case RequestVmFailed():
                self._vm_failed(message)
            case RequestExpired():
                self._expired(message)
            case VerifyInFlight():
                self._verify_in_flight()
            case RequestChanged():
                status = self.store.status(self.request_id)
                if status is not None:
                    self._finish(status)

    def _vm_ready(self, msg: RequestVmReady) -> None:
        key = (msg.alias, msg.pool)
        self.vms.in_flight.pop(msg.vm, None)
        entry = self.vms.entries.get(key) or Entry(msg.alias, msg.pool, 0)  # 0: refused
        lifetime = self.settings.vm_lifetime_auth if self.has_token else None
        outcome = self.store.attach(self.request_id, entry, msg.vm,
                                    now=timefmt.format_epoch(self.clock.now()),
                                    lifetime=lifetime, fence=self.fence)
        if outcome is AttachOutcome.ATTACHED:
            self.vms.delivered[key] += 1
            log.info("[>] [%s] '%s' delivered to request '%s' (%d of %d)", msg.pool, msg.vm,
                     self.request_id, self.vms.delivered[key], entry.count)
            if self.vms.complete():
                self._fulfil()
        elif outcome is AttachOutcome.REFUSED:
            self._lost(msg.pool)
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
            return  # not ours, or already counted
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
        ready, status = self.store.fulfil(self.request_id, list(self.vms.entries.values()),
                                          fence=self.fence)
        if ready:
            self.metrics.increment("vmpooler_ondemand.ready")
            if self.created is not None:
                self.metrics.timing("ondemand.time_to_ready",
                                    max(0.0, self.clock.now() - self.created))
            log.info("[*] request '%s' is ready", self.request_id)
            self._finish("ready")
            return True
        if status is not None:
            self._finish(status)
            return True
        return False

    def _fail(self, reason: str) -> None:
        failed, status = self.store.fail(self.request_id, list(self.vms.entries.values()),
                                         reason=reason, ttl=self.data_ttl, fence=self.fence)
        if failed:
            self.metrics.increment("vmpooler_ondemand.failed")
            log.error("[!] request '%s' failed: %s", self.request_id, reason)
        self._finish("failed" if failed else status or "")

    def _ask_for_missing(self) -> None:
        wants = self.vms.take_missing()
        if wants:
            self._tell_manager(WantRequestVms(self.request_id, tuple(wants)))

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

    def _tell_manager(self, message: Any) -> None:
        with contextlib.suppress(pykka.ActorDeadError):  # it is being restarted
            self.manager.tell(message)

    def _lost(self, pool: str) -> None:
        """Count a VM of this request retired before it was delivered (``vm.lost``)."""
        self.metrics.increment("vm.lost", tags={"pool": pool, "reason": "abandoned"})

    def _finish(self, status: str, *, quiet: bool = False) -> None:
        self._enter(Phase.FINISHED)
        self._cancel_timers()
        try:
            for vm, (_alias, pool) in self.vms.in_flight.items():
                if self.store.retire_pending(pool, vm, fence=self.fence):
                    self._lost(pool)
                    log.info("[>] [%s] '%s' of finished request '%s' moved to 'completed'",
                             pool, vm, self.request_id)
        except Fenced as exc:  # the request's new holder has taken its VMs over
            log.debug("request '%s': VMs not retired: %s", self.request_id, exc)
        self.vms.in_flight.clear()
        self._sync_tasks()
        if not quiet:
            log.debug("request '%s' finished: %s", self.request_id, status or "gone")
            if status in OUTCOMES:
                self.metrics.increment("ondemand.outcome", tags={"result": status})
        self._tell_manager(RequestFinished(self.request_id, status))
        self.actor_ref.stop(block=False)
