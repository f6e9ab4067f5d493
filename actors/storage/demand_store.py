"""The checkout log and the published sizing of demand-sized pools, in Redis.

The checkout script writes the log (:func:`~vmpooler.actors.storage.schema.demand` for
served checkouts, :func:`~vmpooler.actors.storage.schema.demand_misses` for those that found
no VM); this store reads both, as one, for the pool's owner, and writes and reads the
target the owner publishes (:func:`~vmpooler.actors.storage.schema.sizing`) for
``/status``.

What callers may rely on: :meth:`DemandStore.since` is one round trip and returns entries in
score order; :meth:`DemandStore.publish` is one round trip and the hash expires after
:data:`PUBLISHED_TTL` seconds without an update (a pool no longer sized by demand, or no
longer configured, stops showing a target); :meth:`DemandStore.published` is one round trip
for any number of pools.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.replies import fields as as_fields
from vmpooler.actors.storage.replies import scored, text_dict

__all__ = ["PUBLISHED_TTL", "DemandStore", "Logged"]

PUBLISHED_TTL = 3600
"""Seconds a published target is kept without an update."""


@dataclass(frozen=True, slots=True)
class Logged:
    """One entry of the checkout log: when, and whether a ready VM served it."""

    t: float
    member: str

    @property
    def vm(self) -> str | None:
        """The VM that served it; None for a checkout that found none."""
        tail = self.member.partition(":")[2]
        return None if not tail or tail.startswith("-") else tail

    @property
    def served(self) -> bool:
        """True for a checkout served from a ready VM, False for one that found none."""
        return self.vm is not None


class DemandStore:
    """Reads the checkout log; writes and reads the published targets."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def since(self, pool: str, t: float) -> list[Logged]:
        """The entries of ``pool``'s log, served and missed, scored ``t`` or later, oldest
        first (served before missed at equal times)."""
        with self.client.pipeline(transaction=False) as pipe:
            for key in (schema.demand(pool), schema.demand_misses(pool)):
                pipe.zrangebyscore(key, t, "+inf", withscores=True)
            logs = pipe.execute()
        entries = [Logged(float(score), member) for log in logs for member, score in scored(log)]
        entries.sort(key=lambda e: e.t)
        return entries

    def publish(self, pool: str, fields: Mapping[str, str | int | float]) -> None:
        """Write ``pool``'s target and why (replacing what was there)."""
        key = schema.sizing(pool)
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(key)
        pipe.hset(key, mapping=as_fields(fields))
        pipe.expire(key, PUBLISHED_TTL)
        pipe.execute()

    def published(self, pools: Sequence[str]) -> dict[str, dict[str, str]]:
        """``pool -> fields`` of the pools with a published target."""
        pipe = self.client.pipeline(transaction=False)
        for pool in pools:
            pipe.hgetall(schema.sizing(pool))
        return {pool: text_dict(whole) for pool, whole in zip(pools, pipe.execute(), strict=True)
                if whole}
