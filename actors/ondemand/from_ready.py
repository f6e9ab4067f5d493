"""``ondemand_from_ready`` (ours, docs/fairness.md): an on-demand request takes ready VMs of
its pools before asking for clones.

vmpooler always clones for an on-demand request, even when the pool holds ready VMs of the
same template. With ``ondemand_from_ready: true`` (per pool, or in ``:config:`` as every
pool's default) a request claimed for the first time takes what the pool has ready at once,
each VM handed over exactly as a finished clone is attached (``RequestStore.take_ready``,
one compare-and-set script: a VM checked out or taken by another request meanwhile is
skipped, never shared); only the rest is cloned. The pool actor is woken to refill.
"""

from __future__ import annotations

import logging

from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.ondemand.ledger import Ledger
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.request_store import RequestStore

__all__ = ["take_ready"]

log = logging.getLogger(__name__)


def take_ready(store: RequestStore, request_id: str, vms: Ledger, pools: frozenset[str], *,
               now: float, lifetime: int | None, metrics: Metrics) -> list[str]:
    """Hand the request ready VMs of its entries whose pool is in ``pools``, counting them
    in ``vms.delivered``; returns the pools it took from (each once). ``now`` (epoch seconds,
    the request actor's clock) is each VM's checkout time, and each VM is logged in its
    pool's checkout log at it, so demand sizing sees it as a checkout. ``store`` is the
    request actor's (behind the request's fence). Raises what the store
    raises (``redis.RedisError``, ``Fenced``): VMs taken before that stay counted in Redis
    and are found again by the caller's rebuild."""
    took: list[str] = []
    for key, entry in vms.entries.items():
        if entry.pool not in pools:
            continue
        taken = store.take_ready(request_id, entry, entry.count - vms.delivered[key],
                                 now=timefmt.format_epoch(now), lifetime=lifetime,
                                 epoch=now)
        if not taken:
            continue
        vms.delivered[key] += len(taken)
        metrics.increment("ondemand.from_ready", tags={"pool": entry.pool}, value=len(taken))
        log.info("[>] [%s] %d ready VMs delivered to request '%s' (%d of %d): %s", entry.pool,
                 len(taken), request_id, vms.delivered[key], entry.count, ", ".join(taken))
        if entry.pool not in took:
            took.append(entry.pool)
    return took
