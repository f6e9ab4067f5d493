"""The history recorder: one small actor that writes every pool's point each interval.

At start and then at each interval boundary of the injected clock (a timer of the injected
scheduler, never a thread of its own) it records one point per configured pool (with
``owns``, per pool this manager owns: several managers share the work, and a pool changing
hands is at worst recorded twice for an interval, which writes the same point) through
:class:`~vmpooler.actors.storage.history_store.HistoryStore`. A Redis outage is logged once per
outage; the next interval tries again, and the missed intervals stay gaps. It never talks to
another actor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import pykka
import redis

from vmpooler.actors.messages import RecordHistory
from vmpooler.actors.runtime.clock import Clock, Scheduler
from vmpooler.actors.runtime.supervisor import SupervisedActor
from vmpooler.actors.service.periodic import OutageLog, Ticks
from vmpooler.actors.storage.history_store import HistoryStore

__all__ = ["DEFAULT_INTERVAL", "HistoryRecorder", "next_delay"]

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 60.0
"""Seconds between two points unless configured (``:config: history_interval``)."""


def next_delay(now: float, interval: float) -> float:
    """Seconds from ``now`` to the start of the next interval (never less than 1 % of it)."""
    step = max(1.0, float(interval))
    delay = step - now % step
    return delay if delay >= step / 100 else delay + step


class HistoryRecorder(SupervisedActor):
    """See the module docstring. Start with :meth:`pykka.ThreadingActor.start`."""

    def __init__(
        self,
        *,
        pools: Sequence[str],
        store: HistoryStore,
        interval: float,
        clock: Clock,
        scheduler: Scheduler,
        supervisor: pykka.ActorRef[Any] | None = None,
        owns: Callable[[str], bool] | None = None,
        demand: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(name="history", supervisor=supervisor)
        self.pools = tuple(pools)
        self.demand = demand  # pools sized by demand: their points carry the target
        self.owns = owns  # None: every pool is recorded here
        self.store = store
        self.interval = max(1.0, float(interval))
        self.clock = clock
        self.scheduler = scheduler
        self.ticks = Ticks(scheduler, self.actor_ref)
        self.outage = OutageLog(log, "history", failed="not recorded",
                                recovered="recorded again", interval=self.interval)

    def setup(self) -> None:
        self.actor_ref.tell(RecordHistory())

    def on_stop(self) -> None:
        self.ticks.cancel_all()

    def handle(self, message: object) -> None:
        match message:
            case RecordHistory():
                now = self.clock.now()
                self.ticks.arm(next_delay(now, self.interval), RecordHistory())
                self._record(now)

    def _record(self, now: float) -> None:
        try:
            owns = self.owns
            pools = self.pools if owns is None else tuple(p for p in self.pools if owns(p))
            if pools:
                self.store.record(pools, now, self.interval, self.demand)
        except redis.RedisError as exc:
            self.outage.failed(exc)
            return
        self.outage.succeeded()
