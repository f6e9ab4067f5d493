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
import threading
from typing import TYPE_CHECKING, Protocol

import redis

from vmpooler.actors.messages import Command, CommandKind
from vmpooler.actors.service.command_stream import GROUP, STREAM, ensure_group
from vmpooler.actors.storage.replies import fields as as_fields
from vmpooler.actors.tracing import current_span

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

    def request_changed(self, request_id: str, reason: str) -> None:
        """An on-demand request was created or deleted in Redis: its actor starts (or
        learns of the deletion) now. The trace context of the caller's current span goes
        with it (docs/tracing.md)."""


class NullCommands:
    """Sends nothing: the manager notices changes at its next periodic cycle."""

    def pool_changed(self, pool: str, reason: str) -> None:
        return None

    def tasks_queued(self) -> None:
        return None

    def request_changed(self, request_id: str, reason: str) -> None:
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

    def request_changed(self, request_id: str, reason: str) -> None:
        try:
            self.system.notify_request(request_id, reason,
                                       traceparent=current_span().traceparent)
        except Exception:
            log.exception("[!] [commands] could not notify request '%s'", request_id)


class StreamCommands:
    """Appends commands to the Redis stream the managers' consumer group reads.

    Each entry is a :class:`~vmpooler.actors.messages.Command`'s fields (``id``, ``kind``,
    ``pool``: the pool or request id, ``reason``); the stream is trimmed to about ``maxlen``
    entries (``MAXLEN ~``).
    Before its first command it creates the consumer group if no manager has yet (so a
    command sent before any manager ever ran is delivered too). A Redis error is logged
    and the command dropped: commands are wake-ups, the manager's cycle catches up.
    """

    def __init__(self, client: redis.Redis, maxlen: int = 10000, *,
                 stream: str = STREAM, group: str = GROUP, background: bool = False) -> None:
        """With ``background=True`` commands are sent by a daemon thread, off the request
        path, and a command already waiting for the same (kind, pool) is not queued twice:
        a burst of checkouts from one pool costs one XADD, and each request one round trip
        fewer. Otherwise each call sends at once."""
        self.client = client
        self.maxlen = maxlen
        self.stream = stream
        self.group = group
        self._group_ready = False
        self._background = background
        self._cond = threading.Condition()
        self._waiting: dict[tuple[CommandKind, str], str] = {}
        self._thread: threading.Thread | None = None
        self._sending = False
        self._idle = False  # the sender thread waits for a first command (needs a notify)
        self.coalesce_interval = 0.01  # seconds; bounds the delay a command may get

    def pool_changed(self, pool: str, reason: str) -> None:
        self._submit(CommandKind.POOL_CHANGED, pool, reason)

    def tasks_queued(self) -> None:
        self._submit(CommandKind.TASKS_QUEUED, "", "")

    def request_changed(self, request_id: str, reason: str) -> None:
        # Sent at once, on the caller's thread: every request id is new, so there is
        # nothing to coalesce, and waiting would only delay the request's first clone.
        self._send(Command(CommandKind.REQUEST_CHANGED, request_id, reason,
                           traceparent=current_span().traceparent))

    def _submit(self, kind: CommandKind, subject: str, reason: str) -> None:
        if not self._background:
            self._send(Command(kind, subject, reason))
            return
        with self._cond:
            self._waiting.setdefault((kind, subject), reason)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="vmpooler-commands",
                                                daemon=True)
                self._thread.start()
            elif self._idle:
                # only an idle sender needs waking: a busy one, or one letting a burst
                # gather, takes what is waiting when it is done (notify_all: a flush()
                # may be waiting on the same condition)
                self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting:
                    self._idle = True
                    self._cond.wait()
                self._idle = False
                batch, self._waiting = self._waiting, {}
                self._sending = True
            for (kind, subject), reason in batch.items():
                self._send(Command(kind, subject, reason))
            with self._cond:
                self._sending = False
                self._cond.notify_all()
                # Let a burst gather: at most one XADD per (kind, pool) per interval.
                self._cond.wait_for(lambda: False, self.coalesce_interval)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued command was sent (background mode); True if so."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._waiting and not self._sending,
                                       timeout)

    def _send(self, command: Command) -> None:
        try:
            if not self._group_ready:
                ensure_group(self.client, self.stream, self.group)
                self._group_ready = True
            self.client.xadd(self.stream, as_fields(command.to_fields()),
                             maxlen=self.maxlen, approximate=True)
        except redis.RedisError as exc:
            log.warning("[!] [commands] could not send %s '%s': %s", command.kind,
                        command.subject, exc)
        except Exception:
            log.exception("[!] [commands] could not send %s '%s'", command.kind,
                          command.subject)
