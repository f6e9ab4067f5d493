"""``OnDemandManager``: starts an actor per in-flight request and shares out on-demand
clone slots among them.

* **Finding requests.** A request is created in Redis by the API, which then says so
  (:class:`RequestChanged`, directly or through the command stream). A periodic sweep
  (:class:`SweepRequests`, every ``check_loop_delay_min`` seconds, and once at start) also
  reads ``provisioning__request`` and ``provisioning__processing``, so requests written while
  no manager ran, by another writer, or whose command was lost get an actor too; at start
  that rebuilds every request a previous manager left in flight.
* **One actor per request.** Each is a :class:`RequestActor` registered as
  ``request:<id>``, its mailbox on the system's shared actor executor. The manager is its
  supervisor, under the system's one :class:`RestartPolicy` (the Supervisor's): a crashed
  request actor is started again (it rebuilds itself from Redis) after the policy's
  back-off, and once it has spent the policy's restart budget within the window the request
  is failed (``Internal error: …``) rather than left hanging; crashes while Redis is away
  never spend the budget.
* **Never two actors for one request.** A manager that replaces a crashed one finds its
  predecessor's request actors still running (they report to a dead manager): it tells
  each to stop, and starts a request's new actor only once the old one's stop is observed
  (:class:`ActorStopped`, from :func:`notify_when_stopped`). Until then the old one stays
  in the directory, so even a third manager after another crash waits for it. Nothing here
  blocks: the manager never waits for a request actor (one stuck actor would stall the
  grants of every request), it only tells.
* **One manager per request.** When several managers share the Redis, a request is run by
  the one holding its lease (:mod:`vmpooler.actors.cluster.request_leases`): the manager takes it
  before starting the request's actor and hands the actor its fence, renews all its leases
  in one round trip every third of the TTL (an actor whose lease was lost is stopped), and
  releases a lease when its request finishes. A request another manager holds, or should
  take, is not started here: a ``RequestChanged`` for it goes on to that manager.
* **One record per request** (:class:`.tracking.Tracked`): where it stands (running,
  waiting for a predecessor's actors to stop, backing off after a crash), its actor, the
  predecessor's actors being stopped. Its actor's recent crashes are in the manager's
  :class:`~vmpooler.actors.runtime.restart_policy.Restarts`, the Supervisor's bookkeeping.
* **Fair clone slots** (:class:`.slots.CloneGrants`, :class:`.granting.Granting`). One
  manager, the granter (a lease's holder; a manager alone always), queues every manager's
  requests' wants (docs/fairness.md) and grants while ``tasks__ondemandclone`` plus grants
  not yet answered stays under ``ondemand_clone_limit`` (:class:`CloneForRequest`, with
  the request's fence); answers and freed slots (:class:`RequestSlotFreed`) let the next go.
* **Honest waits** (:class:`.waits.WaitBoard`): the granter publishes each request's place.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import pykka
import redis

from vmpooler.actors.cluster.granter import GrantRole, SoleGranter
from vmpooler.actors.cluster.remote import LocalOnly, Remote
from vmpooler.actors.cluster.request_leases import (
    RequestFence,
    RequestLeases,
    RequestOwnership,
    SoleRequests,
)
from vmpooler.actors.cluster.router import Router
from vmpooler.actors.messages import (
    ActorCrashed,
    ActorStopped,
    PublishWaits,
    RenewRequestLeases,
    RequestChanged,
    RequestCloneAnswered,
    RequestFinished,
    RequestSlotFreed,
    SweepRequests,
    WantRequestVms,
    WithdrawRequest,
    request_actor_name,
)
from vmpooler.actors.messages.address import Address
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.ondemand.clone_grants import CloneGrants
from vmpooler.actors.ondemand.granting import Granting
from vmpooler.actors.ondemand.tracking import Standing, Tracker
from vmpooler.actors.ondemand.waits import WaitBoard
from vmpooler.actors.runtime.clock import Clock, Scheduler, Timer
from vmpooler.actors.runtime.pooled import notify_when_stopped
from vmpooler.actors.runtime.restart_policy import CrashLines, RestartPolicy, Restarts
from vmpooler.actors.runtime.supervisor import ActorDirectory, SupervisedActor
from vmpooler.actors.storage.lease_store import Fenced
from vmpooler.actors.storage.redis_errors import redis_failure
from vmpooler.actors.storage.request_store import RequestStore
from vmpooler.actors.storage.wait_store import WaitStore

__all__ = ["OnDemandManager", "RequestFactory"]

log = logging.getLogger(__name__)

_PREFIX = request_actor_name("")
_RESTART = "restart"  # RequestChanged.reason of the manager's own restart timer

RequestFactory = Callable[[str, pykka.ActorRef[Any], RequestFence | None, str],
                          pykka.ActorRef[Any]]
"""``factory(request_id, manager_ref, fence, traceparent)`` starts a request's actor
(writing behind ``fence``, the request's lease; None: unfenced; its span a child of
``traceparent``, the API request's, '' for none) and returns its ref."""


class OnDemandManager(SupervisedActor):
    """Registered as ``ondemand``. Keeps no state Redis does not also hold."""

    def __init__(
        self,
        *,
        store: RequestStore,
        directory: ActorDirectory,
        request_factory: RequestFactory,
        clone_limit: int,
        sweep_interval: float,
        data_ttl_hours: int,
        clock: Clock,
        scheduler: Scheduler,
        metrics: Metrics,
        supervisor: pykka.ActorRef[Any] | None = None,
        policy: RestartPolicy | None = None,
        leases: RequestLeases | None = None,
        remote: Remote | None = None,
        granter: GrantRole | None = None,
    ) -> None:
        super().__init__(name=Address.ondemand().name, supervisor=supervisor)
        self.remote: Remote = remote or LocalOnly()
        self.router = Router(directory, self.remote)
        self.leases: RequestOwnership = (  # without leases, this manager runs every request
            leases if leases is not None else SoleRequests(self.remote.member))
        self.policy = policy or RestartPolicy()
        self.store = store
        self.directory = directory
        self.request_factory = request_factory
        self.clone_limit = clone_limit
        self.sweep_interval = max(1.0, sweep_interval)
        self.data_ttl = int(data_ttl_hours) * 3600
        self.clock = clock
        self.scheduler = scheduler
        self.metrics = metrics
        self.tracked = Tracker()  # one record per request this manager knows of
        self.restarts = Restarts(self.policy, clock=clock, metrics=metrics, log=log,
                                 lines=CrashLines("request '%s'", "failing it", "%.0f"),
                                 on_given_up=self._given_up, actor_tag="request")
        role = granter if granter is not None else SoleGranter(self.remote.member)
        self.slots = CloneGrants(store=store, directory=directory, clone_limit=clone_limit,
                                clock=clock, metrics=metrics, remote=self.remote,
                                granting=lambda: role.granting)
        self.granting = Granting(role=role, slots=self.slots, remote=self.remote,
                                 leases=self.leases, tracked=self.tracked)
        self.waits = WaitBoard(slots=self.slots, store=WaitStore(store.client), clock=clock)
        self.waits_timer: Timer | None = None

    def setup(self) -> None:
        # A predecessor that crashed left its request actors running, reporting to a dead
        # manager: they are told to stop; a request's new actor starts once its old one is
        # observed stopped (see _start). Entries of stopped ones are dropped.
        for name in self.directory.names():
            if not name.startswith(_PREFIX):
                continue
            ref = self.directory.get(name)
            if ref is None:
                self.directory.remove(name)
            else:
                self._retire(name.removeprefix(_PREFIX), ref)
        self.granting.start()
        self.actor_ref.tell(SweepRequests())
        self._arm_renewal()

    def on_stop(self) -> None:
        # Tell, never wait (they share a few threads): PoolerSystem.stop waits for each of
        # them from its own thread, finding them in the directory.
        for ref in self.tracked.refs():
            ref.stop(block=False)
        with contextlib.suppress(redis.RedisError):  # whoever takes them publishes again
            self.waits.store.publish_waits({}, list(self.waits.published))
        try:  # the other managers take the requests (and the grants) at once
            self.granting.role.release()
            self.leases.release_all()
        except redis.RedisError as exc:
            log.warning("[!] [ondemand] request leases not released: %s; they expire in "
                        "%.0fs", exc, self.leases.ttl)

    # -- mailbox --------------------------------------------------------------------------------
    def handle_relayed(self, message: object, hops: int) -> None:
        self.handle(message, hops)

    def handle(self, message: object, hops: int | None = None) -> None:
        """``hops``: None for a message of this manager, else how many times it was relayed."""
        match message:
            case RequestChanged():
                self._changed(message, hops or 0)
            case WantRequestVms():
                if (queued := self.granting.want(message, relayed=hops is not None)) is not None:
                    self.waits.arrived(message.request_id, *queued)  # we grant: learn it
            case WithdrawRequest():
                self.granting.withdrawn(message)
            case RequestCloneAnswered():
                self.slots.answered(message)
            case RequestSlotFreed():
                self.slots.freed()
            case RequestFinished(request_id=request_id):
                self._finished(request_id)
            case ActorCrashed():
                self._crashed(message)
            case ActorStopped():
                self._stopped(message)
            case SweepRequests():
                self._sweep()
            case RenewRequestLeases():
                self._renew()
            case PublishWaits():
                self._publish_waits()
        if isinstance(message, (WantRequestVms, WithdrawRequest, RequestCloneAnswered,
                                RequestFinished, SweepRequests, ActorCrashed)):
            self._waits_changed()

    # -- honest waits ---------------------------------------------------------------------------
    def _waits_changed(self) -> None:
        """The queue changed: publish the waits now, or once a second has passed."""
        self.waits.dirty = True
        if self.waits_timer is not None:
            return
        delay = self.waits.due_in()
        if delay <= 0:
            self._publish_waits()
        else:
            self.waits_timer = self.scheduler.tell_later(delay, self.actor_ref, PublishWaits())

    def _publish_waits(self) -> None:
        self.waits_timer = None
        if not self.waits.dirty or not self.granting.here:  # the granter publishes them
            return
        try:
            self.waits.publish(set(self.slots.known), self.store.ondemand_clones())
        except redis.RedisError as exc:  # the next change (or the sweep) publishes again
            log.debug("[ondemand] waits not published: %s", exc)

    def _changed(self, message: RequestChanged, hops: int = 0) -> None:
        if (message.reason == _RESTART
                and self.tracked.state(message.request_id) is Standing.BACKING_OFF):
            self.tracked.to(message.request_id, Standing.IDLE)  # the back-off is over
        ref = self.tracked.ref(message.request_id)
        if ref is not None and ref.is_alive():
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(message)
            return
        try:
            if self._elsewhere(message, hops):
                return
            self._start(message.request_id, message.traceparent)
        except redis.RedisError as exc:  # the sweep finds it once Redis is back
            log.error("[!] [ondemand] request '%s' not started: %s: %s",
                      message.request_id, redis_failure(exc), exc)

    def _elsewhere(self, message: RequestChanged, hops: int) -> bool:
        """True when another manager runs (or should take) the request: told it there."""
        if self.leases.holds(message.request_id):
            return False
        address = Address.ondemand(message.request_id)
        if self.router.to_holder(address, message, hops=hops):
            return True
        owner = self.leases.owner(message.request_id)
        if owner == self.router.member:
            return False
        return self.router.to_manager(owner, address, message, hops=hops)

    def _sweep(self) -> None:
        try:
            in_flight = self.store.waiting()
            waiting = [r for r in in_flight
                       if (ref := self.tracked.ref(r)) is None or not ref.is_alive()]
            for request_id in self.leases.claimable(waiting):
                self._start(request_id)
            self.store.prune_tasks(keep=self.tracked.running())
            self.slots.prune(set(in_flight))
            self.slots.regrant_lost()
            self.granting.refresh()  # a new granter seen: the wants go to it again
            self.slots.freed()
        except redis.RedisError as exc:
            log.error("[!] [ondemand] %s: %s; retrying in %.0fs", redis_failure(exc), exc,
                      self.sweep_interval)
        finally:
            self.scheduler.tell_later(self.sweep_interval, self.actor_ref, SweepRequests())

    # -- request actors -------------------------------------------------------------------------
    def _start(self, request_id: str, traceparent: str = "") -> None:
        ours = self.tracked.ref(request_id)
        if ((ours is not None and ours.is_alive())
                or self.tracked.state(request_id) is Standing.BACKING_OFF):
            return
        name = request_actor_name(request_id)
        current = self.directory.get(name)
        if current is not None and current is not ours:
            # Another manager's actor for this request is still alive: never run two.
            self._retire(request_id, current)
            self.tracked.to(request_id, Standing.WAITING)
            return
        try:
            if not self.leases.take(request_id):  # another live manager runs it
                return
        except redis.RedisError as exc:  # the sweep tries again
            log.error("[!] [ondemand] request '%s' not started: %s: %s",
                      request_id, redis_failure(exc), exc)
            return
        ref = self.request_factory(request_id, self.actor_ref, self.leases.fence(request_id),
                                   traceparent)
        self.tracked.to(request_id, Standing.RUNNING, ref)
        self.directory.put(name, ref)

    def _retire(self, request_id: str, ref: pykka.ActorRef[Any]) -> None:
        """Tell a predecessor's request actor to stop, and ask to hear when it has."""
        if not self.tracked.retire(request_id, ref.actor_urn):
            return
        notify_when_stopped(ref, self.actor_ref,
                            ActorStopped(request_actor_name(request_id), ref.actor_urn))
        ref.stop(block=False)

    def _stopped(self, message: ActorStopped) -> None:
        request_id = message.name.removeprefix(_PREFIX)
        if not self.tracked.retired(request_id, message.urn):
            return
        if self.tracked.ref(request_id) is None:
            self.directory.remove(message.name)  # the stopped predecessor's entry
        if self.tracked.state(request_id) is Standing.WAITING:
            self._start(request_id)

    def _finished(self, request_id: str) -> None:
        self.granting.withdraw(request_id, self.granting.fence(request_id))
        self.tracked.end(request_id)
        self.restarts.forget(request_id)
        self.directory.remove(request_actor_name(request_id))
        try:
            self.leases.release(request_id)
        except redis.RedisError as exc:
            log.debug("request '%s': lease not released: %s", request_id, exc)
        self.slots.grant()

    def _arm_renewal(self) -> None:
        intervals = [i for i in (self.leases.renew_interval, self.granting.renew_interval)
                     if i is not None]
        if intervals:  # leases to renew (a sole manager has none)
            self.scheduler.tell_later(min(intervals), self.actor_ref, RenewRequestLeases())

    def _renew(self) -> None:
        """Renew every request lease held (a request whose lease was lost stops here) and
        the granter's lease (or see who holds it)."""
        self._arm_renewal()
        self.granting.refresh()
        try:
            lost = self.leases.renew()
        except redis.RedisError as exc:
            log.debug("[ondemand] request leases not renewed: %s", exc)
            return
        for request_id, fence in lost.items():
            self.granting.withdraw(request_id, fence)
            ref = self.tracked.end(request_id)
            if ref is not None:  # its entry goes once it is seen stopped (never two actors)
                self._retire(request_id, ref)

    def _crashed(self, message: ActorCrashed) -> None:
        request_id = message.name.removeprefix(_PREFIX)
        # the restarted actor asks again for what it misses
        self.granting.withdraw(request_id, self.granting.fence(request_id))
        self.directory.remove(message.name)
        delay = self.restarts.crashed(request_id, message)
        if delay is None:
            return
        # not even the sweep starts it before the timer
        self.tracked.to(request_id, Standing.BACKING_OFF)
        self.scheduler.tell_later(delay, self.actor_ref, RequestChanged(request_id, _RESTART))

    def _given_up(self, request_id: str, crash: ActorCrashed) -> None:
        """The request's actor spent its restart budget: forget its crashes and actor."""
        self.restarts.forget(request_id)
        self.tracked.end(request_id)
        self._fail_crashed(request_id, crash.error)

    def _fail_crashed(self, request_id: str, error: str) -> None:
        """Escalation: the request's actor spent its restart budget; fail the request."""
        fence = self.leases.fence(request_id)
        try:
            store = self.store.with_fence(fence)
            claim = store.claim(request_id, now=self.clock.now())
            if claim.found and claim.status is None:
                failed, _ = store.fail(request_id, list(claim.entries),
                                       reason=f"Internal error: {error}", ttl=self.data_ttl)
                if failed:
                    self.metrics.increment("ondemand.outcome", tags={"result": "failed"})
            self.leases.release(request_id)
        except Fenced as exc:
            log.warning("[!] request '%s' not failed here: %s", request_id, exc)
        except redis.RedisError as exc:
            log.error("[!] request '%s' could not be failed: %s", request_id, exc)
