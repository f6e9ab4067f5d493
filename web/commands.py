"""``Commands``: how the API tells the actor system that something changed.

The API writes vmpooler's Redis schema itself (so a Ruby manager sharing the Redis sees the
change too) and then sends a command so our manager reacts at once instead of at its next
timed cycle. Commands are wake-ups: losing one delays a reaction, never loses data.

Two transports: :class:`DirectCommands` tells the actors of a :class:`PoolerSystem` living
in the same process; :class:`StreamCommands` appends to a Redis stream that the manager's
consumer group reads (``vmpooler api`` and ``vmpooler manager`` as separate processes).
:class:`NullCommands` sends nothing.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Protocol

import redis

from vmpooler.actors.command_stream import GROUP, STREAM, ensure_group

if TYPE_CHECKING:
    from vmpooler.actors.system import PoolerSystem

__all__ = ["Commands", "DirectCommands", "NullCommands", "StreamCommands"]

log = logging.getLogger(__name__)


class Commands(Protocol):
    """What the API may ask of the manager. Every method returns at once, never raises
    for a manager that is down, and may be called from any thread."""

    def pool_changed(self, pool: str, reason: str) -> None:
        """The pool's queues or overrides changed in Redis (checkout, return, size,
        template, clone target, reset): run a cycle now."""

    def tasks_queued(self) -> None:
        """Disk or snapshot tasks were queued."""


class NullCommands:
    """Sends nothing: the manager notices changes at its next periodic cycle."""

    def pool_changed(self, pool: str, reason: str) -> None:
        return None

    def tasks_queued(self) -> None:
        return None


class DirectCommands:
    """Tells the actors of a :class:`PoolerSystem` in this process (no Redis involved).

    A pool without a running actor (unknown, or being restarted) is skipped: its next
    periodic cycle sees the change.
    """

    def __init__(self, system: PoolerSystem) -> None:
        self.system = system

    def pool_changed(self, pool: str, reason: str) -> None:
        try:
            if not self.system.notify(pool, reason):
                log.debug("[commands] no running actor for pool '%s'", pool)
        except Exception:
            log.exception("[!] [commands] could not notify pool '%s'", pool)

    def tasks_queued(self) -> None:
        try:
            self.system.notify_tasks()
        except Exception:
            log.exception("[!] [commands] could not notify the task actor")


class StreamCommands:
    """Appends commands to the Redis stream the managers' consumer group reads.

    Each entry is ``{"id": <uuid4>, "kind": "pool_changed" | "tasks_queued", "pool": ...,
    "reason": ...}``; the stream is trimmed to about ``maxlen`` entries (``MAXLEN ~``).
    Before its first command it creates the consumer group if no manager has yet (so a
    command sent before any manager ever ran is delivered too). A Redis error is logged
    and the command dropped: commands are wake-ups, the manager's cycle catches up.
    """

    def __init__(self, client: redis.Redis, maxlen: int = 10000, *,
                 stream: str = STREAM, group: str = GROUP) -> None:
        self.client = client
        self.maxlen = maxlen
        self.stream = stream
        self.group = group
        self._group_ready = False

    def pool_changed(self, pool: str, reason: str) -> None:
        self._send("pool_changed", pool, reason)

    def tasks_queued(self) -> None:
        self._send("tasks_queued", "", "")

    def _send(self, kind: str, pool: str, reason: str) -> None:
        fields = {"id": str(uuid.uuid4()), "kind": kind, "pool": pool, "reason": reason}
        try:
            if not self._group_ready:
                ensure_group(self.client, self.stream, self.group)
                self._group_ready = True
            self.client.xadd(self.stream, fields,
                             maxlen=self.maxlen, approximate=True)
        except redis.RedisError as exc:
            log.warning("[!] [commands] could not send %s '%s': %s", kind, pool, exc)
        except Exception:
            log.exception("[!] [commands] could not send %s '%s'", kind, pool)
