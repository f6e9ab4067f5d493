"""A site's recorded checkouts, read back as a trace (for ``vmpooler history export``).

The checkout log is two sorted sets per pool, ``vmpooler__demand__<pool>`` (served) and
``vmpooler__demand_misses__<pool>`` (found no VM), read as one: score, the epoch seconds of
the checkout; member ``"<epoch>:<vm>"`` for a checkout that was served, ``"<epoch>:-<n>"``
for one that found no VM (one per pool a refused request named first, bounded per requester:
:func:`~vmpooler.actors.storage.schema.demand_misses`). A served checkout's duration comes from its
VM's hash (``vmpooler__vm__<vm>``): ``destroy`` minus ``checkout`` when both are there
(the hash expires ``data_ttl`` hours after the VM is gone; a VM still out has no
``destroy``), else it is unknown.

What callers may rely on: :meth:`DemandLog.rows` returns the entries of the chosen pools
from ``since`` on, sorted by time (pool order for equal times), in two round trips per
call (one pipeline of ``ZRANGEBYSCORE``, two per pool, one of ``HMGET``); it never writes
(the checkout script does, :mod:`vmpooler.actors.storage.schema.checkout_scripts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.demand_store import Logged
from vmpooler.actors.storage.replies import scored

__all__ = ["DemandLog", "DemandRow"]


@dataclass(frozen=True, slots=True)
class DemandRow:
    """One recorded checkout."""

    t: float
    """When it was asked for, epoch seconds."""
    pool: str
    vm: str | None
    """The VM it got; None for a checkout that found no VM."""
    duration_s: float | None
    """How long the VM was held; None when unknown (a miss, a VM still out, an expired
    hash)."""


class DemandLog:
    """The per-pool checkout logs of one Redis. Thread-safe (the client's pool is)."""

    def __init__(self, client: redis.Redis) -> None:
        """``client`` must decode responses (``decode_responses=True``)."""
        self.client = client

    def rows(self, pools: Sequence[str], *, since: float | None = None) -> list[DemandRow]:
        """Every entry of ``pools`` scored ``since`` or later (all without), by time."""
        low = "-inf" if since is None else since
        with self.client.pipeline(transaction=False) as pipe:
            for pool in pools:
                for key in (schema.demand(pool), schema.demand_misses(pool)):
                    pipe.zrangebyscore(key, low, "+inf", withscores=True)
            logs = pipe.execute()
        found: list[tuple[float, str, str | None]] = []
        for pool, entries in zip([p for p in pools for _ in (0, 1)], logs, strict=True):
            for member, score in scored(entries):
                found.append((float(score), pool, Logged(float(score), member).vm))
        served = sorted({vm for _, _, vm in found if vm is not None})
        with self.client.pipeline(transaction=False) as pipe:
            for vm in served:
                pipe.hmget(schema.vm(vm), ["checkout", "destroy"])
            stamps = dict(zip(served, pipe.execute(), strict=True))
        rows = [DemandRow(t, pool, vm, _held(stamps.get(vm)) if vm else None)
                for t, pool, vm in found]
        rows.sort(key=lambda r: r.t)
        return rows


def _held(stamps: Sequence[str | None] | None) -> float | None:
    if not stamps:
        return None
    start, end = (timefmt.parse_epoch(s) for s in stamps)
    if start is None or end is None or end < start:
        return None
    return end - start
