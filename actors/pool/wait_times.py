"""A pool's recent clone and ready times, published for the on-demand manager's estimates
(``GET /ondemandvm/<id>``'s ``estimated_ready_at``; docs/fairness.md, "Honest waits").

:class:`PoolWaitTimes` keeps the last :data:`KEPT` clone times (how long a clone holds its
slot) and the last :data:`KEPT` times from a clone's start to its VM ready (the clone and
the readiness check), of the pool's own VMs and of requests' alike, and publishes their
medians (:class:`~vmpooler.actors.storage.wait_store.PoolTimes`) when they change. Before a
first measure, a pool publishes nothing: the manager then assumes
:data:`~vmpooler.actors.storage.wait_store.DEFAULT_TIME`. Used only on the pool actor's
thread; a Redis error loses one publication (the next change publishes again).
"""

from __future__ import annotations

import logging
import statistics
from collections import deque

import redis

from vmpooler.actors.storage.wait_store import PoolTimes, WaitStore

__all__ = ["KEPT", "PoolWaitTimes"]

log = logging.getLogger(__name__)

KEPT = 20
"""Measures of each kind the medians are taken over."""


class PoolWaitTimes:
    """The times of pool ``pool``; ``store`` None: measured, never published (tests)."""

    def __init__(self, pool: str, store: WaitStore | None) -> None:
        self.pool = pool
        self.store = store
        self.clones: deque[float] = deque(maxlen=KEPT)
        self.readies: deque[float] = deque(maxlen=KEPT)
        self.timed: deque[str] = deque(maxlen=4 * KEPT)  # VMs whose ready time is counted
        self.published: PoolTimes | None = None

    def cloned(self, seconds: float) -> None:
        """A clone of the pool finished in ``seconds``."""
        if seconds > 0:
            self.clones.append(seconds)
            self._publish()

    def ready(self, vm: str, seconds: float) -> None:
        """``vm`` passed its readiness check ``seconds`` after its clone started (a request's
        VM reported again while its request takes it is counted once)."""
        if seconds > 0 and vm not in self.timed:
            self.timed.append(vm)
            self.readies.append(seconds)
            self._publish()

    def times(self) -> PoolTimes | None:
        """The medians; None before any clone finished. Without a ready time yet, a VM is
        taken to be ready when its clone ends."""
        if not self.clones:
            return None
        clone = statistics.median(self.clones)
        ready = statistics.median(self.readies) if self.readies else clone
        return PoolTimes(clone, max(clone, ready))

    def _publish(self) -> None:
        times = self.times()
        if times is None or self.store is None:
            return
        shown = PoolTimes(round(times.clone, 1), round(times.ready, 1))
        if shown == self.published:
            return
        try:
            self.store.publish_times(self.pool, shown)
        except redis.RedisError as exc:
            log.debug("[%s] wait times not published: %s", self.pool, exc)
            return
        self.published = shown
