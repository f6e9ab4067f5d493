"""What the dashboard lists beside ``/status``: the newest on-demand requests in flight and
the newest dead-letter entries (reads only, two round trips)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.dlq_store import QUEUES, DeadLetter, parse_member
from vmpooler.actors.storage.redis_errors import WrongTypeKeys, tolerant_results

__all__ = ["ActivityStore", "InFlight"]


@dataclass(frozen=True, slots=True)
class InFlight:
    """An on-demand request waiting or being provisioned. ``status`` is None while the
    request hash has none (vmpooler writes ``pending`` only once it is processed); ``user``
    is who asked (ours, docs/fairness.md), else the token's user; ``priority`` None for a
    request written without one."""

    request_id: str
    created: float
    status: str | None
    user: str | None
    requested: str | None
    priority: str | None = None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


class ActivityStore:
    """Reads over one Redis client; thread-safe as the client is."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.wrong_type = WrongTypeKeys("dashboard")

    def read(self, requests: int, errors: int) -> tuple[list[InFlight], list[DeadLetter]]:
        """The ``requests`` newest requests in flight (newest first), and the ``errors``
        newest dead-letter entries of each queue (unsorted across queues). A request whose
        key holds something else than a hash is listed without fields (logged once)."""
        pipe = self.client.pipeline(transaction=False)
        for key in (schema.provisioning_request(), schema.provisioning_processing()):
            pipe.zrevrange(key, 0, requests - 1, withscores=True)
        for queue in QUEUES:
            pipe.zrevrange(schema.dlq(queue), 0, errors - 1, withscores=True)
        waiting, processing, *dead = pipe.execute()
        ids = sorted({_text(m): s for m, s in [*waiting, *processing]}.items(),
                     key=lambda item: -item[1])[:requests]
        letters = [parse_member(queue, _text(member), score)
                   for queue, members in zip(QUEUES, dead, strict=True)
                   for member, score in members]
        if not ids:
            return [], letters
        pipe = self.client.pipeline(transaction=False)
        keys = [schema.odrequest(request_id) for request_id, _ in ids]
        for key in keys:
            pipe.hmget(key, "status", "token:user", "requested", "user", "priority")
        replies = tolerant_results(pipe, keys, "hash", self.wrong_type)
        found = [
            InFlight(request_id, created, _text(status) or None,
                     _text(asker) or _text(user) or None, _text(requested) or None,
                     _text(priority) or None)
            for (request_id, created), (status, user, requested, asker, priority)
            in zip(ids, (r or (None,) * 5 for r in replies), strict=True)
        ]
        return found, letters
