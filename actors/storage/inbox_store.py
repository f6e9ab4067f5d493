"""Managers' inboxes: one Redis stream per manager (``schema.manager_inbox``) through which
the actors of one manager tell those of another (a pool actor answering the on-demand
manager that granted a clone, telling a request's actor its VM is ready).

An inbox is read by its manager only, from the id it last read; entries are trimmed once
read. Each send sets the inbox to expire :data:`INBOX_TTL_MS` after it, so the inbox of a
manager that died goes by itself. Delivery is at most once: an entry in the inbox of a
manager that dies is lost, and every message sent this way is one its receiver can do
without (it is sent again, or the receiver rebuilds what it says from Redis).

Methods may raise ``redis.RedisError``; all are thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.replies import fields as as_fields
from vmpooler.actors.storage.replies import stream_reply

__all__ = ["INBOX_MAXLEN", "INBOX_TTL_MS", "InboxEntry", "InboxStore"]

INBOX_MAXLEN = 100_000
"""Entries an inbox keeps at most (approximately): a manager that stopped reading loses
the oldest first."""
INBOX_TTL_MS = 3_600_000
"""An inbox expires this long after its last send."""

InboxEntry = tuple[str, dict[str, str]]
"""``(entry id, fields)``."""


class InboxStore:
    """See the module docstring."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def send(self, batch: Iterable[tuple[str, Mapping[str, str]]]) -> int:
        """Append each ``(manager, fields)`` to that manager's inbox, in one round trip.
        Returns how many were sent."""
        pipe = self.client.pipeline(transaction=False)
        sent = 0
        for manager, fields in batch:
            key = schema.manager_inbox(manager)
            pipe.xadd(key, as_fields(fields), maxlen=INBOX_MAXLEN, approximate=True)
            pipe.pexpire(key, INBOX_TTL_MS)
            sent += 1
        if sent:
            pipe.execute()
        return sent

    def read(self, manager: str, after: str, *, block_ms: int, count: int) -> list[InboxEntry]:
        """Entries of ``manager``'s inbox after id ``after`` (``"0-0"``: from the start),
        waiting up to ``block_ms`` for one."""
        reply = stream_reply(self.client.xread({schema.manager_inbox(manager): after},
                                               count=count, block=block_ms))
        return [(str(eid), dict(fields)) for _key, items in reply for eid, fields in items]

    def trim(self, manager: str, upto: str) -> None:
        """Forget the entries up to and including id ``upto`` (they were read)."""
        key = schema.manager_inbox(manager)
        pipe = self.client.pipeline(transaction=False)
        pipe.xtrim(key, minid=upto, approximate=False)
        pipe.xdel(key, upto)
        pipe.execute()

    def drop(self, manager: str) -> None:
        """Delete ``manager``'s inbox (a clean stop)."""
        self.client.delete(schema.manager_inbox(manager))
