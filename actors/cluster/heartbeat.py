"""The heartbeat actor: tells Redis every few seconds that this manager is alive.

At start and then every ``interval`` seconds (a timer of the injected scheduler) it writes
its manager's member of ``vmpooler__manager__heartbeat`` with the clock's time and prunes
members older than ``prune_after`` (:mod:`~vmpooler.actors.storage.heartbeat_store`). A clean stop
removes the member, so readiness sees the manager gone at once; a killed manager's member
ages out instead. A Redis outage is logged once per outage and the next beat tries again;
the actor never blocks on another actor. A restart by the supervisor keeps the manager id.

Given the manager's ``slots`` store, each beat also gives back the clone slots of managers
that are gone (a slot owner whose beat is older than ``stale_after``, or a process of this
host that no longer exists: :meth:`~vmpooler.actors.storage.store.Store.fold_slots`), so a
killed manager's clones in flight do not keep their slots for good.
"""

from __future__ import annotations

import logging
from typing import Any

import pykka
import redis

from vmpooler.actors.cluster.membership import live_managers
from vmpooler.actors.messages import SendHeartbeat
from vmpooler.actors.runtime.clock import Clock, Scheduler
from vmpooler.actors.runtime.supervisor import SupervisedActor
from vmpooler.actors.service.periodic import OutageLog, Ticks
from vmpooler.actors.storage.heartbeat_store import HeartbeatStore
from vmpooler.actors.storage.store import Store

__all__ = ["Heartbeat"]

log = logging.getLogger(__name__)


class Heartbeat(SupervisedActor):
    """See the module docstring. Start with :meth:`pykka.ThreadingActor.start`."""

    def __init__(
        self,
        *,
        manager: str,
        store: HeartbeatStore,
        interval: float,
        prune_after: float,
        clock: Clock,
        scheduler: Scheduler,
        supervisor: pykka.ActorRef[Any] | None = None,
        slots: Store | None = None,
        stale_after: float | None = None,
    ) -> None:
        super().__init__(name="heartbeat", supervisor=supervisor)
        self.manager = manager
        self.slots = slots
        self.stale_after = stale_after if stale_after is not None else 3 * interval
        self.store = store
        self.interval = interval
        self.prune_after = prune_after
        self.clock = clock
        self.scheduler = scheduler
        self.ticks = Ticks(scheduler, self.actor_ref)
        self.outage = OutageLog(log, "heartbeat", failed="not written", recovered="written again",
                                interval=interval)

    def setup(self) -> None:
        self.actor_ref.tell(SendHeartbeat())

    def on_stop(self) -> None:
        self.ticks.cancel_all()
        try:
            self.store.remove(self.manager)
        except redis.RedisError as exc:
            log.warning("[!] [heartbeat] could not remove '%s' at stop: %s", self.manager, exc)
        else:
            log.debug("[*] [heartbeat] '%s' removed", self.manager)

    def handle(self, message: object) -> None:
        match message:
            case SendHeartbeat():
                self.ticks.arm(self.interval, SendHeartbeat())
                self._beat()

    def _beat(self) -> None:
        try:
            pruned = self.store.beat(self.manager, self.clock.now(),
                                     prune_after=self.prune_after)
        except redis.RedisError as exc:
            self.outage.failed(exc)
            return
        self.outage.succeeded()
        if pruned:
            log.info("[*] [heartbeat] pruned %d manager heartbeat(s) older than %gs", pruned,
                     self.prune_after)
        if self.slots is not None:
            try:
                self._fold_slots(self.slots)
            except redis.RedisError as exc:
                log.debug("[heartbeat] clone slots of managers gone not checked: %s", exc)

    def _fold_slots(self, slots: Store) -> None:
        """Give back the clone slots of slot owners that are gone."""
        owners = slots.slot_owners() - {self.manager}
        if not owners:
            return
        gone = owners - live_managers(self.store, self.clock.now(), self.stale_after)
        if not gone:
            return
        pooled, ondemand, forgotten = slots.fold_slots(gone)
        log.warning("[*] [heartbeat] %d clone slot(s) of %d manager(s) gone given back (%s); "
                    "clones in flight now: %d pooled, %d on-demand", forgotten, len(gone),
                    ", ".join(sorted(gone)), pooled, ondemand)

