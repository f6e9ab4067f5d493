"""Each pool's recorded history in Redis: ready, running and pending counts and the checkout
and clone counters, one point per interval, kept 24 h (ours; vmpooler read Graphite).

A point lives in the pool's sorted set :func:`~vmpooler.actors.storage.schema.history` as the member
``"<t>:<ready>:<running>:<pending>:<checkouts>:<clones>"`` scored by ``t``, the epoch start of
its interval. ``checkouts`` and ``clones`` are the cumulative counters of
:func:`~vmpooler.actors.storage.schema.history_checkouts` and
:func:`~vmpooler.actors.storage.schema.history_clones` (incremented inside the checkout and
clone-succeeded scripts) as read at that time; a rate is the difference of two points, so
neither a restart nor two managers recording the same interval can make it wrong.

What callers may rely on: one :meth:`HistoryStore.record` is two round trips whatever the
number of pools (a pipeline of reads, a ``MULTI`` of writes); recording an interval again
replaces its point; a set never holds a point older than :data:`RETENTION` before the newest
nor more than ``max_points`` points, so memory is bounded by pools x ``max_points``.
:meth:`HistoryStore.read` is one round trip and skips members it cannot parse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from vmpooler.actors.storage import schema

__all__ = ["MAX_POINTS", "RETENTION", "HistoryStore", "Point", "rates"]

RETENTION = 24 * 3600
"""Seconds of history kept."""

MAX_POINTS = 1440
"""Points kept per pool at most (24 h at the default one-minute interval)."""


@dataclass(frozen=True, slots=True)
class Point:
    """One recorded point; ``checkouts`` and ``clones`` are cumulative counters."""

    t: int
    ready: int
    running: int
    pending: int
    checkouts: int
    clones: int
    target: int | None = None  # a demand-sized pool's target then (None: not one)

    def member(self) -> str:
        """The sorted-set member this point is stored as (a seventh field: the target)."""
        base = (f"{self.t}:{self.ready}:{self.running}:{self.pending}:{self.checkouts}:"
                f"{self.clones}")
        return base if self.target is None else f"{base}:{self.target}"

    @classmethod
    def parse(cls, member: str | bytes) -> Point | None:
        """The point stored as ``member``, or ``None`` when it is not one."""
        text = member.decode() if isinstance(member, bytes) else member
        parts = text.split(":")
        if len(parts) not in (6, 7):
            return None
        try:
            return cls(*(int(part) for part in parts))
        except ValueError:
            return None


def rates(counters: Sequence[int]) -> list[int]:
    """Per-point increments of a cumulative counter: 0 for the first point; a counter that
    went down (reset) counts from zero."""
    out = [0] * len(counters)
    for i in range(1, len(counters)):
        delta = counters[i] - counters[i - 1]
        out[i] = delta if delta >= 0 else counters[i]
    return out


def _int(value: bytes | str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


class HistoryStore:
    """Reads and writes the history sets. Thread-safe as the Redis client is."""

    def __init__(self, client: redis.Redis, *, max_points: int = MAX_POINTS) -> None:
        self._redis = client
        self._max_points = max(1, int(max_points))

    def record(self, pools: Sequence[str], now: float, interval: float,
               demand: frozenset[str] = frozenset()) -> int:
        """Record every pool's point for the interval holding ``now``; returns its start.
        The points of ``demand`` pools carry the target their owner published."""
        step = max(1, int(interval))
        t = int(now) // step * step
        reads = self._redis.pipeline(transaction=False)
        for pool in pools:
            reads.scard(schema.ready(pool))
            reads.scard(schema.running(pool))
            reads.scard(schema.pending(pool))
        sized = [pool for pool in pools if pool in demand]
        for pool in sized:
            reads.hget(schema.sizing(pool), "target")
        reads.hgetall(schema.history_checkouts())
        reads.hgetall(schema.history_clones())
        *counts, checkouts, clones = reads.execute()
        published = counts[3 * len(pools):]
        targets = {pool: _int(value) for pool, value in zip(sized, published, strict=True)
                   if value is not None}
        checkouts = {k.decode() if isinstance(k, bytes) else k: v for k, v in checkouts.items()}
        clones = {k.decode() if isinstance(k, bytes) else k: v for k, v in clones.items()}
        writes = self._redis.pipeline(transaction=True)
        for n, pool in enumerate(pools):
            point = Point(t, counts[3 * n], counts[3 * n + 1], counts[3 * n + 2],
                          _int(checkouts.get(pool)), _int(clones.get(pool)),
                          targets.get(pool))
            key = schema.history(pool)
            writes.zremrangebyscore(key, t, t)
            writes.zadd(key, {point.member(): t})
            writes.zremrangebyscore(key, "-inf", f"({t - RETENTION}")
            writes.zremrangebyrank(key, 0, -(self._max_points + 1))
            writes.expire(key, RETENTION + step)
        writes.execute()
        return t

    def read(self, pools: Sequence[str], since: float) -> dict[str, list[Point]]:
        """Every pool's points from ``since`` (epoch seconds) on, oldest first."""
        pipe = self._redis.pipeline(transaction=False)
        for pool in pools:
            pipe.zrangebyscore(schema.history(pool), int(since), "+inf")
        out: dict[str, list[Point]] = {}
        for pool, members in zip(pools, pipe.execute(), strict=True):
            points = [p for p in map(Point.parse, members) if p is not None]
            out[pool] = points
        return out
