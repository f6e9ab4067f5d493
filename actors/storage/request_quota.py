"""The per-user limit on on-demand requests in flight (``max_ondemand_requests_per_user``).

Each user with a limit has a set (``schema.odinflight(user)``, ours) of the ids of the
requests created under it. :meth:`RequestQuota.create` is one script
(``QuotaScripts.CREATE_WITHIN_QUOTA``): it drops the members whose request is no longer in
flight, counts the rest and creates the request only below the limit, so concurrent creates
can never exceed it. A request is in flight from its creation until its status is set
(ready, failed, deleted) or its hash is gone; nothing else has to release it. The set expires
``ttl`` seconds after its last write, so users who stop asking leave nothing behind.

The verdict (:class:`~vmpooler.actors.fairness.quota.CreateOutcome`) is the one of every
create within a limit; when this limit applies is :mod:`vmpooler.actors.fairness.intake`'s.

What callers may rely on: the request is written exactly as
:meth:`~vmpooler.actors.storage.request_store.RequestStore.create` writes it; the method is
thread-safe and may raise ``redis.RedisError``.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from vmpooler.actors.fairness.quota import (
    PER_USER_REQUESTS,
    CreateOutcome,
    CreateVerdict,
    QuotaRefusal,
)
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import (
    Entry,
    RequestOrigin,
    format_requested,
    origin_args,
)
from vmpooler.actors.storage.schema import QuotaScripts

__all__ = ["RequestQuota"]


class RequestQuota:
    """Creates on-demand requests within a per-user limit. Thread-safe (one Redis client)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._create = client.register_script(QuotaScripts.CREATE_WITHIN_QUOTA)

    def create(self, request_id: str, entries: Sequence[Entry], *, created: int, user: str,
               limit: int, ttl: int, token: str | None = None,
               origin: RequestOrigin | None = None) -> CreateOutcome:
        """Record and queue a new request of ``user`` if the id is free and ``user`` has
        fewer than ``limit`` requests in flight; ``ttl``: seconds the user's set lives.
        ``in_flight`` of the outcome is the user's count (with the new request when
        CREATED, 0 when the id was taken); a refusal's ``quota`` is
        :data:`~vmpooler.actors.fairness.quota.PER_USER_REQUESTS`."""
        code, count = self._create(
            keys=[schema.odrequest(request_id), schema.provisioning_request(),
                  schema.odinflight(user)],
            args=[request_id, created, format_requested(entries), token or "", user,
                  *origin_args(origin), limit, schema.odrequest(""), ttl],
        )
        verdict, in_flight = CreateVerdict(int(code)), int(count)
        refusal = QuotaRefusal(PER_USER_REQUESTS, limit, in_flight) if (
            verdict is CreateVerdict.REFUSED) else None
        return CreateOutcome(verdict, refusal, in_flight=in_flight)

    def in_flight(self, user: str) -> int:
        """How many ids the user's set holds (finished ones are dropped only by the next
        :meth:`create`)."""
        return int(self.client.scard(schema.odinflight(user)))
