"""Dead letters written by a pool actor (vmpooler's ``vmpooler__dlq__<queue>``, reference §4.11).

An entry is recorded once the move it describes has applied: after a failed clone
(``clone``), a pending timeout, a purge or a pending VM gone from the inventory
(``pending``), and a ready VM failing its check (``ready``). A request's VM carries its
request's id, alias and retry count. Used only on the pool actor's thread.
"""

from __future__ import annotations

import logging

import redis

from vmpooler.actors.pool.context import PoolIO, PoolSettings
from vmpooler.actors.pool.request_vms import OnDemandVms
from vmpooler.actors.storage.dlq_store import DeadLetter

__all__ = ["DeadLetters"]

log = logging.getLogger(__name__)


class DeadLetters:
    """Writes one pool's dead letters (only with ``dlq_enabled``)."""

    def __init__(self, policy: PoolSettings, io: PoolIO, ondemand: OnDemandVms) -> None:
        self.policy, self.io = policy, io
        self.ondemand = ondemand

    def add(self, queue: str, vm: str, error_class: str, message: str, *,
            count: bool = True) -> None:
        """Record a dead letter for ``vm`` (when ``dlq_enabled``), with its request's id,
        alias and retry count if it was cloned for one; ``count`` the
        ``vmpooler_dlq.<queue>.count`` metric (not for purges, as vmpooler). A Redis
        failure is logged, never raised: the transition it records has happened."""
        settings = self.policy.settings
        if not settings.dlq_enabled:
            return
        request_id, alias = self.ondemand.owner(vm) or (None, None)
        try:
            retries = self.io.upkeep_store.retry_count(request_id) if request_id else 0
            entry = DeadLetter.now(vm=vm, pool=self.policy.name, queue=queue,
                                   error_class=error_class,
                                   error_message=message, epoch=self.io.clock.now(),
                                   retry_count=retries, request_id=request_id,
                                   pool_alias=alias)
            self.io.store.dlq_add(queue, entry.member(), entry.epoch,
                              ttl=settings.dlq_ttl * 3600,
                              max_entries=settings.dlq_max_entries)
        except redis.RedisError as exc:
            log.error("[!] [dlq] failed to move '%s' to the dead-letter queue: %s", vm, exc)
            return
        if count:
            self.io.metrics.increment(f"vmpooler_dlq.{queue}.count",
                                      tags={"pool": self.policy.name})
        log.debug("[!] [dlq] moved '%s' from '%s' queue to DLQ: %s", vm, queue, message)
