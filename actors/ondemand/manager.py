"""``OnDemandManager``: starts an actor per in-flight request and shares out on-demand
clone slots among them.

* **Finding requests.** A request is created in Redis by the API, which then says so
  (:class:`RequestChanged`, directly or through the command stream). A periodic sweep
  (:class:`SweepRequests`, every ``check_loop_delay_min`` seconds, and once at start) also
  reads ``provisioning__request`` and ``provisioning__processing``, so requests written while
  no manager ran, by another writer, or whose command was lost get an actor too; at start
  that rebuilds every request a previous manager left in flight.
* **One actor per request.** Each is a :class:`RequestActor` registered as
  ``request:<id>``; the manager is its supervisor: a crashed request actor is started again
  (it rebuilds itself from Redis) with back-off, and after :data:`MAX_RESTARTS` crashes the
  request is failed rather than left hanging.
* **Fair clone slots.** Wanted VMs queue per request in a :class:`FairQueue` and are handed
  out one per request per turn while ``tasks__ondemandclone`` (counted in Redis by the pool
  actors' clone scripts) plus grants not yet answered stays under ``ondemand_clone_limit``.
  A grant goes to the pool actor as :class:`CloneForRequest`; its answer, and each finished
  clone (:class:`RequestSlotFreed`), lets the next one go.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import pykka
import redis

from vmpooler.actors.messages import (
    ActorCrashed,
    CloneForRequest,
    RequestChanged,
    RequestCloneAnswered,
    RequestFinished,
    RequestSlotFreed,
    SweepRequests,
    WantRequestVms,
)
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.ondemand.request import request_actor_name
from vmpooler.actors.runtime.clock import Clock, Scheduler
from vmpooler.actors.runtime.fair_queue import FairQueue
from vmpooler.actors.runtime.supervisor import ActorDirectory, SupervisedActor
from vmpooler.actors.storage.request_store import RequestStore

__all__ = ["MAX_RESTARTS", "OnDemandManager", "RequestFactory"]

log = logging.getLogger(__name__)

MAX_RESTARTS = 5
GRANT_LOST_AFTER = 30.0  # s without an answer from the pool actor (it answers at once): regrant

_OUTAGE_ERRORS = frozenset({"ConnectionError", "TimeoutError", "BusyLoadingError"})

RequestFactory = Callable[[str, pykka.ActorRef[Any]], pykka.ActorRef[Any]]
"""``factory(request_id, manager_ref)`` starts a request's actor and returns its ref."""


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
    ) -> None:
        super().__init__(name="ondemand", supervisor=supervisor)
        self.store = store
        self.directory = directory
        self.request_factory = request_factory
        self.clone_limit = clone_limit
        self.sweep_interval = max(1.0, sweep_interval)
        self.data_ttl = int(data_ttl_hours) * 3600
        self.clock = clock
        self.scheduler = scheduler
        self.metrics = metrics
        self.requests: dict[str, pykka.ActorRef[Any]] = {}
        self.crashes: dict[str, int] = {}
        # request -> (alias, pool, monotonic time the request asked for it)
        self.wants: FairQueue[str, tuple[str, str, float]] = FairQueue()
        # grant -> id, alias, pool, granted at, wanted at (monotonic)
        self.granted: dict[int, tuple[str, str, str, float, float]] = {}
        self.grants = 0
        self.blocked = False  # the last grant found no free slot: wait for one to be freed

    def setup(self) -> None:
        # A predecessor that crashed left its request actors running, reporting to a dead
        # manager: stop them; the first sweep starts fresh ones, rebuilt from Redis.
        for name in self.directory.names():
            ref = self.directory.get(name) if name.startswith("request:") else None
            if ref is not None:
                with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                    ref.stop(block=True, timeout=5)
            if name.startswith("request:"):
                self.directory.remove(name)
        self.actor_ref.tell(SweepRequests())

    def on_stop(self) -> None:
        for request_id, ref in list(self.requests.items()):
            with contextlib.suppress(pykka.ActorDeadError):
                ref.stop(block=True, timeout=5)
            self.directory.remove(request_actor_name(request_id))

    # -- mailbox --------------------------------------------------------------------------------
    def handle(self, message: Any) -> Any:
        if isinstance(message, RequestChanged):
            self._changed(message)
        elif isinstance(message, WantRequestVms):
            if message.wants:
                at = self.clock.monotonic()
                self.wants.extend(message.request_id,
                                  [(alias, pool, at) for alias, pool in message.wants])
            else:
                self.wants.drop(message.request_id)
            self._grant()
        elif isinstance(message, RequestCloneAnswered):
            self._answered(message)
        elif isinstance(message, RequestSlotFreed):
            self.blocked = False
            self._grant()
        elif isinstance(message, RequestFinished):
            self._finished(message.request_id)
        elif isinstance(message, ActorCrashed):
            self._crashed(message)
        elif isinstance(message, SweepRequests):
            self._sweep()
        return None

    def _changed(self, message: RequestChanged) -> None:
        ref = self.requests.get(message.request_id)
        if ref is not None and ref.is_alive():
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(message)
            return
        self._start(message.request_id)

    def _sweep(self) -> None:
        try:
            for request_id in self.store.waiting():
                ref = self.requests.get(request_id)
                if ref is None or not ref.is_alive():
                    self._start(request_id)
            self.store.prune_tasks(keep=self.requests)
            self._regrant_lost()
            self.blocked = False
            self._grant()
        except redis.RedisError as exc:
            log.error("[!] [ondemand] redis unavailable: %s; retrying in %.0fs", exc,
                      self.sweep_interval)
        finally:
            self.scheduler.tell_later(self.sweep_interval, self.actor_ref, SweepRequests())

    # -- request actors -------------------------------------------------------------------------
    def _start(self, request_id: str) -> None:
        if request_id in self.requests and self.requests[request_id].is_alive():
            return
        ref = self.request_factory(request_id, self.actor_ref)
        self.requests[request_id] = ref
        self.directory.put(request_actor_name(request_id), ref)

    def _finished(self, request_id: str) -> None:
        self.wants.drop(request_id)
        self.requests.pop(request_id, None)
        self.crashes.pop(request_id, None)
        self.directory.remove(request_actor_name(request_id))
        self._grant()

    def _crashed(self, message: ActorCrashed) -> None:
        request_id = message.name.removeprefix("request:")
        self.wants.drop(request_id)  # the restarted actor asks again for what it misses
        self.requests.pop(request_id, None)
        self.directory.remove(message.name)
        crashes = self.crashes.get(request_id, 0) + 1
        if message.error_class in _OUTAGE_ERRORS:
            crashes = min(crashes, MAX_RESTARTS)  # Redis away: keep trying, never give up
        self.crashes[request_id] = crashes
        self.metrics.increment("vmpooler_actor.crashed", tags={"actor": "request"})
        if crashes > MAX_RESTARTS:
            log.error("[!] request '%s' crashed %d times (%s: %s); failing it", request_id,
                      crashes, message.error_class, message.error)
            self.crashes.pop(request_id, None)
            try:
                claim = self.store.claim(request_id, now=self.clock.now())
                if claim.found and claim.status is None:
                    failed, _ = self.store.fail(request_id, list(claim.entries),
                                                reason=f"Internal error: {message.error}",
                                                ttl=self.data_ttl)
                    if failed:
                        self.metrics.increment("ondemand.outcome", tags={"result": "failed"})
            except redis.RedisError as exc:
                log.error("[!] request '%s' could not be failed: %s", request_id, exc)
            return
        delay = min(60.0, 2.0 ** (crashes - 1))
        log.error("[!] request '%s' crashed (%s: %s); restarting in %.0fs", request_id,
                  message.error_class, message.error, delay)
        self.scheduler.tell_later(delay, self.actor_ref, RequestChanged(request_id, "restart"))

    # -- clone slots ----------------------------------------------------------------------------
    def _grant(self) -> None:
        if self.blocked or not self.wants:
            return
        try:
            in_use = self.store.ondemand_clones()
        except redis.RedisError as exc:
            log.error("[!] [ondemand] redis unavailable: %s; clones wait for the next sweep", exc)
            self.blocked = True
            return
        free = self.clone_limit - in_use - len(self.granted)
        while free > 0 and self.wants:
            popped = self.wants.pop()
            if popped is None:
                break
            request_id, (alias, pool, wanted_at) = popped
            ref = self.directory.get(f"pool:{pool}")
            if ref is None:  # the pool actor is restarting: try again at the next sweep
                self.wants.push_front(request_id, (alias, pool, wanted_at))
                self.blocked = True
                return
            self.grants += 1
            self.granted[self.grants] = (request_id, alias, pool, self.clock.monotonic(),
                                         wanted_at)
            try:
                ref.tell(CloneForRequest(request_id, alias, pool, grant=self.grants))
            except pykka.ActorDeadError:
                del self.granted[self.grants]
                self.wants.push_front(request_id, (alias, pool, wanted_at))
                self.blocked = True
                return
            free -= 1

    def _answered(self, message: RequestCloneAnswered) -> None:
        grant = self.granted.pop(message.grant, None)
        if grant is None:
            return  # already given up on and granted again
        wanted_at = grant[4]
        if message.vm is None:
            if message.request_id in self.requests:
                self.wants.push_front(message.request_id,
                                      (message.alias, message.pool, wanted_at))
            self.blocked = True  # no slot (or no name): wait for a freed slot or the sweep
            return
        # the pool actor reserved the slot: the wait ends here, however often it was regranted
        self.metrics.timing("clone.queue_wait", max(0.0, self.clock.monotonic() - wanted_at),
                            tags={"pool": message.pool, "kind": "ondemand"})
        self._grant()

    def _regrant_lost(self) -> None:
        now = self.clock.monotonic()
        for grant, (request_id, alias, pool, at, wanted_at) in list(self.granted.items()):
            if now - at > GRANT_LOST_AFTER:
                del self.granted[grant]
                if request_id in self.requests:
                    self.wants.push_front(request_id, (alias, pool, wanted_at))
