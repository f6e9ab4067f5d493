"""Honest waits in Redis: the pools' recent clone and ready times, and each in-flight
on-demand request's place in the clone queue and estimated ready time.

Writers: a pool's owner publishes its times (:meth:`WaitStore.publish_times`, one round
trip, only when they change); the on-demand manager running a request publishes its wait
(:meth:`WaitStore.publish_waits`, one round trip for every entry that changed or went).
Readers: the manager reads every pool's times at once (:meth:`WaitStore.times`), the API one
request's wait (:meth:`WaitStore.wait`). Both hashes expire when nobody writes them
(:data:`WAITS_TTL`, :data:`TIMES_TTL`), so a deployment that stops running managers leaves
nothing behind.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.replies import maybe_text, text_dict

__all__ = ["DEFAULT_TIME", "TIMES_TTL", "WAITS_TTL", "PoolTimes", "Wait", "WaitStore"]

DEFAULT_TIME = 120.0
"""Seconds a clone (and its VM's readiness) is assumed to take in a pool that has published
no times yet (the pool sizing's assumption too)."""

WAITS_TTL = 3600
"""Seconds the waits hash is kept after its last write."""

TIMES_TTL = 24 * 3600
"""Seconds the pools' times are kept after their last write."""


@dataclass(frozen=True, slots=True)
class PoolTimes:
    """A pool's recent times in seconds: ``clone`` (a clone holds its slot that long) and
    ``ready`` (from a clone's start to its VM ready, the clone included)."""

    clone: float
    ready: float


@dataclass(frozen=True, slots=True)
class Wait:
    """One request's wait: ``position`` (VMs granted before its next one; 0 when it has
    none queued or its next one is granted next), ``ready_at`` (epoch seconds, the estimate
    of its last VM ready), ``at`` (epoch seconds the estimate was made)."""

    position: int
    ready_at: float
    at: float

    def encode(self) -> str:
        """The hash field's value."""
        return json.dumps({"position": self.position, "ready_at": round(self.ready_at, 1),
                           "at": round(self.at, 1)}, separators=(",", ":"))

    @classmethod
    def decode(cls, value: str) -> Wait | None:
        """The wait a field holds; None for a value that is not one (written by hand)."""
        try:
            data = json.loads(value)
            return cls(int(data["position"]), float(data["ready_at"]), float(data["at"]))
        except (ValueError, TypeError, KeyError):
            return None


class WaitStore:
    """Reads and writes :func:`schema.wait_times` and :func:`schema.waits`. Every method may
    raise ``redis.RedisError``."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def publish_times(self, pool: str, times: PoolTimes) -> None:
        """Set ``pool``'s times (one round trip)."""
        key = schema.wait_times()
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(key, pool, f"{times.clone:.1f} {times.ready:.1f}")
        pipe.expire(key, TIMES_TTL)
        pipe.execute()

    def times(self) -> dict[str, PoolTimes]:
        """Every pool's published times (one round trip); a malformed field is left out."""
        found: dict[str, PoolTimes] = {}
        for pool, value in text_dict(self.client.hgetall(schema.wait_times())).items():
            parts = value.split()
            try:
                found[pool] = PoolTimes(float(parts[0]), float(parts[1]))
            except (ValueError, IndexError):
                continue
        return found

    def publish_waits(self, changed: Mapping[str, Wait], gone: Sequence[str]) -> None:
        """Write the ``changed`` waits and delete those of the ``gone`` requests (one round
        trip; nothing when both are empty)."""
        if not changed and not gone:
            return
        key = schema.waits()
        pipe = self.client.pipeline(transaction=False)
        if gone:
            pipe.hdel(key, *gone)
        if changed:
            pipe.hset(key, mapping={r: w.encode() for r, w in changed.items()})
            pipe.expire(key, WAITS_TTL)
        pipe.execute()

    def waits(self, request_ids: Sequence[str]) -> dict[str, Wait]:
        """The published waits of ``request_ids`` (one round trip; those without one, or
        with a malformed one, are left out)."""
        if not request_ids:
            return {}
        values = self.client.hmget(schema.waits(), list(request_ids))
        found = {}
        for request_id, value in zip(request_ids, values, strict=True):
            wait = None if value is None else Wait.decode(maybe_text(value) or "")
            if wait is not None:
                found[request_id] = wait
        return found

    def wait(self, request_id: str) -> Wait | None:
        """The published wait of one request, or None."""
        value = maybe_text(self.client.hget(schema.waits(), request_id))
        return None if value is None else Wait.decode(value)
