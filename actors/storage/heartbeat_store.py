"""Manager heartbeats in Redis: one member per manager in ``vmpooler__manager__heartbeat``.

The key is a sorted set (:func:`vmpooler.actors.storage.schema.manager_heartbeat`): each member is
one manager's id, its score the epoch seconds of that manager's last beat. Several managers
may share one Redis; each writes only its own member, and every beat also drops the members
nobody refreshed for the prune age, so a manager killed without a clean stop disappears by
itself. Readers (the API's readiness endpoint) take the newest score as "a manager is alive".

Times are the writer's clock (``Clock.now``); readers on other hosts compare them with
their own, so the hosts' clocks are expected to agree to well within the stale age.
"""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.replies import scored

__all__ = ["Beat", "HeartbeatStore", "manager_id", "prune_age", "stale_age"]

STALE_FACTOR = 3
"""By default a heartbeat is stale once it is this many beat intervals old."""

PRUNE_FACTOR = 4
"""A member is pruned once it is this many stale ages old (reported as stale until then)."""


def manager_id(started: float, *, host: str | None = None, pid: int | None = None) -> str:
    """``host:pid:started`` (``started`` in whole epoch seconds): unique per manager run,
    also when a pid is reused after a restart."""
    return f"{host or socket.gethostname()}:{pid or os.getpid()}:{int(started)}"


def stale_age(interval: float, max_age: float | None) -> float:
    """Seconds after which a beat no longer counts: ``max_age``, or by default
    :data:`STALE_FACTOR` beat intervals."""
    return float(max_age) if max_age else STALE_FACTOR * float(interval)


def prune_age(interval: float, max_age: float | None) -> float:
    """Seconds after which a member is removed by any beating manager."""
    return PRUNE_FACTOR * stale_age(interval, max_age)


@dataclass(frozen=True, slots=True)
class Beat:
    """One manager's entry: its id and the epoch seconds of its last beat."""

    manager: str
    at: float


class HeartbeatStore:
    """Reads and writes the heartbeat set. Thread-safe (a redis-py client is); every method
    raises ``redis.RedisError`` when Redis cannot be reached."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def beat(self, manager: str, now: float, *, prune_after: float) -> int:
        """Record ``manager``'s beat at ``now``, drop every member older than
        ``prune_after`` seconds and set the key to expire after ``prune_after`` (one
        transaction). Returns how many members were pruned."""
        key = schema.manager_heartbeat()
        pipe = self.client.pipeline(transaction=True)
        pipe.zadd(key, {manager: now})
        pipe.zremrangebyscore(key, "-inf", f"({now - prune_after}")
        pipe.expire(key, max(1, math.ceil(prune_after)))
        _, pruned, _ = pipe.execute()
        return int(pruned)

    def remove(self, manager: str) -> bool:
        """Remove ``manager``'s member (a clean stop); False if it was not there."""
        return bool(self.client.zrem(schema.manager_heartbeat(), manager))

    def beats(self) -> list[Beat]:
        """Every member, newest beat first."""
        rows = scored(self.client.zrevrange(schema.manager_heartbeat(), 0, -1, withscores=True))
        return [Beat(str(member), float(score)) for member, score in rows]

    def readiness(self) -> tuple[list[Beat], str | None, str | None]:
        """In one round trip, with a ``PING`` first: every member (newest first) and the
        ``status`` and ``last_check`` of the queue health hash (None when never written)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.ping()
        pipe.zrevrange(schema.manager_heartbeat(), 0, -1, withscores=True)
        pipe.hmget(schema.health(), "status", "last_check")
        _, rows, (status, last_check) = pipe.execute()
        return [Beat(str(member), float(score)) for member, score in rows], status, last_check
