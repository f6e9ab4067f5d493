"""``Ending``: the writes that end one on-demand request (ready, failed, its VMs still
booting retired), with their metrics and log lines. Used by the request's actor only."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import redis

from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.ondemand.ledger import EntryKey
from vmpooler.actors.ondemand.lifecycle import OUTCOMES
from vmpooler.actors.runtime.clock import Clock
from vmpooler.actors.storage.lease_store import Fenced
from vmpooler.actors.storage.redis_errors import redis_failure
from vmpooler.actors.storage.request_store import Entry, RequestStore

__all__ = ["Ending"]

log = logging.getLogger(__name__)


class Ending:
    """Ends request ``request_id`` in Redis through ``store`` (the request actor's view,
    behind the request's fence: :meth:`RequestStore.with_fence`). Every method but
    :meth:`retire` lets a Redis error or :class:`Fenced` through, nothing written."""

    def __init__(self, *, request_id: str, store: RequestStore, metrics: Metrics,
                 clock: Clock, data_ttl: int) -> None:
        self.request_id = request_id
        self.store = store
        self.metrics = metrics
        self.clock = clock
        self.data_ttl = data_ttl

    def fulfil(self, entries: Sequence[Entry], created: float | None) -> str | None:
        """Mark the request ``ready`` if every entry is full. Returns its final status if
        it is finished (``ready``, or what it had become), None if still in flight."""
        ready, status = self.store.fulfil(self.request_id, list(entries))
        if ready:
            self.metrics.increment("vmpooler_ondemand.ready")
            if created is not None:
                self.metrics.timing("ondemand.time_to_ready",
                                    max(0.0, self.clock.now() - created))
            log.info("[*] request '%s' is ready", self.request_id)
            return "ready"
        return status

    def fail(self, entries: Sequence[Entry], reason: str) -> str:
        """Fail the request unless it finished already. Returns its final status (``""``:
        it is gone)."""
        failed, status = self.store.fail(self.request_id, list(entries), reason=reason,
                                         ttl=self.data_ttl)
        if failed:
            self.metrics.increment("vmpooler_ondemand.failed")
            log.error("[!] request '%s' failed: %s", self.request_id, reason)
        return "failed" if failed else status or ""

    def lost(self, pool: str) -> None:
        """Count a VM of the request retired before it was delivered (``vm.lost``)."""
        self.metrics.increment("vm.lost", tags={"pool": pool, "reason": "abandoned"})

    def retire(self, in_flight: dict[str, EntryKey]) -> None:
        """Move the finished request's VMs still booting to completed. Never raises: VMs
        left behind (lease lost, Redis away) are settled by their pools (``SETTLE_ORPHAN``)
        or the request's new holder."""
        try:
            for vm, (_alias, pool) in in_flight.items():
                if self.store.retire_pending(pool, vm):
                    self.lost(pool)
                    log.info("[>] [%s] '%s' of finished request '%s' moved to 'completed'",
                             pool, vm, self.request_id)
        except Fenced as exc:  # the request's new holder has taken its VMs over
            log.debug("request '%s': VMs not retired: %s", self.request_id, exc)
        except redis.RedisError as exc:
            log.warning("[!] request '%s': %s; its VMs still booting are left to their "
                        "pools: %s", self.request_id, redis_failure(exc), exc)

    def finished(self, status: str) -> None:
        """Log and count (``ondemand.outcome``) the status the request ended with."""
        log.debug("request '%s' finished: %s", self.request_id, status or "gone")
        if status in OUTCOMES:
            self.metrics.increment("ondemand.outcome", tags={"result": status})
