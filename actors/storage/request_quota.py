"""The per-user limit on on-demand requests in flight (``max_ondemand_requests_per_user``).

Each user with a limit has a set (``schema.odinflight(user)``, ours) of the ids of the
requests created under it. :meth:`RequestQuota.create` is one script
(``QuotaScripts.CREATE_WITHIN_QUOTA``): it drops the members whose request is no longer in
flight, counts the rest and creates the request only below the limit, so concurrent creates
can never exceed it. A request is in flight from its creation until its status is set
(ready, failed, deleted) or its hash is gone; nothing else has to release it. The set expires
``ttl`` seconds after its last write, so users who stop asking leave nothing behind.

What callers may rely on: the request is written exactly as
:meth:`~vmpooler.actors.storage.request_store.RequestStore.create` writes it; the method is
thread-safe and may raise ``redis.RedisError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import (
    Entry,
    RequestOrigin,
    format_requested,
    origin_args,
)
from vmpooler.actors.storage.schema import QuotaScripts

__all__ = ["QuotaOutcome", "QuotaVerdict", "RequestQuota"]


class QuotaVerdict(Enum):
    """What :meth:`RequestQuota.create` did."""

    CREATED = 1
    ID_TAKEN = 0
    OVER_LIMIT = -1


@dataclass(frozen=True, slots=True)
class QuotaOutcome:
    """The verdict and how many of the user's requests are in flight now (0 when the id was
    taken: not counted)."""

    verdict: QuotaVerdict
    in_flight: int


class RequestQuota:
    """Creates on-demand requests within a per-user limit. Thread-safe (one Redis client)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._create = client.register_script(QuotaScripts.CREATE_WITHIN_QUOTA)

    def create(self, request_id: str, entries: Sequence[Entry], *, created: int, user: str,
               limit: int, ttl: int, token: str | None = None,
               origin: RequestOrigin | None = None) -> QuotaOutcome:
        """Record and queue a new request of ``user`` if the id is free and ``user`` has
        fewer than ``limit`` requests in flight; ``ttl``: seconds the user's set lives."""
        code, count = self._create(
            keys=[schema.odrequest(request_id), schema.provisioning_request(),
                  schema.odinflight(user)],
            args=[request_id, created, format_requested(entries), token or "", user,
                  *origin_args(origin), limit, schema.odrequest(""), ttl],
        )
        return QuotaOutcome(QuotaVerdict(int(code)), int(count))

    def in_flight(self, user: str) -> int:
        """How many ids the user's set holds (finished ones are dropped only by the next
        :meth:`create`)."""
        return int(self.client.scard(schema.odinflight(user)))
