"""The manager's end of the API's command stream: :class:`CommandConsumer`.

``vmpooler api`` processes append commands (:class:`~vmpooler.actors.messages.Command`) to
the stream ``vmpooler__commands`` (:class:`vmpooler.web.commands.StreamCommands`); managers
read it through one consumer group,
so each command reaches one manager, which calls ``notify(pool, reason)`` (the pool actor is
told ``PoolChanged``), ``notify_tasks()`` or ``notify_request(request_id, reason)`` (an
on-demand request was created or deleted; with ``traceparent=`` the command's trace
context when it carries one, docs/tracing.md). A caller may rely on:

* **Durability.** The group's last-delivered id lives in Redis: commands sent while no
  manager runs are delivered when one starts. An entry is acknowledged (XACK) after it was
  dispatched; entries a dead manager read but never acknowledged are claimed once idle
  :data:`CLAIM_IDLE_MS` (XAUTOCLAIM at start and every :data:`CLAIM_EVERY` s), and a
  consumer restarted under its old name replays its own unacknowledged entries at once.
* **Idempotency.** A command id seen recently (:class:`SeenIds`) is acknowledged only.
* **A free mailbox, no crash on Redis.** The blocking ``XREADGROUP`` (≤ :data:`BLOCK_MS`)
  runs on a reader thread over its own connection
  (:class:`~vmpooler.actors.storage.stream_reader.StreamReader`) and hands batches to the
  actor as messages; stopping unblocks it (``CLIENT UNBLOCK``). Redis errors are logged and
  retried with back-off.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import pykka
import redis

from vmpooler.actors.messages import Command, CommandKind
from vmpooler.actors.runtime.clock import Clock, RealClock
from vmpooler.actors.runtime.supervisor import SupervisedActor
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.replies import stream_reply
from vmpooler.actors.storage.stream_reader import StreamReader

__all__ = ["BLOCK_MS", "CLAIM_EVERY", "CLAIM_IDLE_MS", "GROUP", "STREAM", "CommandConsumer",
           "SeenIds", "StreamOptions", "consumer_factory", "consumer_name", "ensure_group"]

log = logging.getLogger(__name__)

STREAM = schema.commands()
GROUP = "vmpooler-managers"
BLOCK_MS = 1000  # longest a read blocks (bounds how often claims are looked for)
CLAIM_IDLE_MS = 60_000  # entries held unacknowledged this long by another consumer
CLAIM_EVERY = 30.0  # seconds between claim rounds, on the injected clock
BATCH = 100
BACKOFF = (0.5, 30.0)  # seconds: first and longest wait after a failed read
_STALE_CONSUMER_MS = 3_600_000  # idle consumers with nothing pending are forgotten

Entry = tuple[str, Mapping[str, str] | None]  # id, fields (None: trimmed before it was read)


def ensure_group(client: redis.Redis, stream: str = STREAM, group: str = GROUP) -> bool:
    """Create the consumer group at the stream's end (``$``, MKSTREAM); False if it existed."""
    try:
        client.xgroup_create(stream, group, id="$", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" in str(exc):
            return False
        raise
    return True


def consumer_name() -> str:
    """A consumer name unique to this process: ``<host>-<pid>-<random>``."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class SeenIds:
    """The most recent ``limit`` command ids, thread-safe; the oldest is forgotten first."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit, self._lock = limit, threading.Lock()
        self._ids: OrderedDict[str, None] = OrderedDict()

    def add(self, command_id: str) -> bool:
        """Remember ``command_id``; False if it was already remembered."""
        with self._lock:
            if command_id in self._ids:
                return False
            self._ids[command_id] = None
            while len(self._ids) > self.limit:
                self._ids.popitem(last=False)
            return True


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """Where and how a consumer reads; ``block_ms`` is capped at :data:`BLOCK_MS`."""

    consumer: str = field(default_factory=lambda: consumer_name())
    stream: str = STREAM
    group: str = GROUP
    block_ms: int = BLOCK_MS
    claim_idle_ms: int = CLAIM_IDLE_MS
    claim_every: float = CLAIM_EVERY


@dataclass(frozen=True, slots=True)
class _Delivered:
    """Reader thread → consumer actor: entries to dispatch and acknowledge."""

    entries: tuple[Entry, ...]


class _Reader:
    """The blocking reads, on a :class:`StreamReader`'s thread; hands batches to
    ``deliver``."""

    def __init__(self, control: redis.Redis, deliver: Callable[[list[Entry]], bool],
                 options: StreamOptions, clock: Clock) -> None:
        self.deliver, self.clock, self.o = deliver, clock, options
        self.block_ms = min(max(1, options.block_ms), BLOCK_MS)
        self._replayed = False
        self._next_claim: float | None = None
        self._stream = StreamReader(
            control, self._step, name=f"vmpooler-commands-{options.consumer}",
            label="commands", what="the command stream", block_ms=self.block_ms,
            backoff=BACKOFF, prepare=self._prepare)
        self._client = self._stream.client
        self._stream.start()

    @property
    def errors(self) -> int:
        """Reads of the stream that failed so far."""
        return self._stream.errors

    def stop(self, timeout: float) -> None:
        """Stop reading: unblock a read in progress, wait for the thread, close."""
        self._stream.stop(timeout)

    def _prepare(self, client: redis.Redis) -> None:
        ensure_group(client, self.o.stream, self.o.group)

    def _step(self, client: redis.Redis) -> bool:
        try:
            if not self._replayed:  # what this consumer read before and never acknowledged
                self._replayed = self._fetch([str(row["message_id"]) for row in (
                    client.xpending_range(self.o.stream, self.o.group, "-", "+",
                                          10 * BATCH, self.o.consumer))])
            now = self.clock.monotonic()
            if self._next_claim is None or now >= self._next_claim:
                self._claim()
                self._next_claim = now + self.o.claim_every
            return self._read()
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            log.info("[*] [commands] consumer group gone; creating it again")
            self._prepare(client)
            return True

    def _read(self) -> bool:
        """One blocking read of new entries. False once nobody takes deliveries."""
        reply = stream_reply(self._client.xreadgroup(
            self.o.group, self.o.consumer, {self.o.stream: ">"}, count=BATCH, block=self.block_ms))
        entries: list[Entry] = [
            (eid, fields) for _name, items in reply for eid, fields in items]
        return not entries or self.deliver(entries)

    def _claim(self) -> None:
        """Take over entries other consumers have left unacknowledged too long."""
        o, ids = self.o, [None] * BATCH
        while len(ids) == BATCH:
            ids = self._client.xautoclaim(o.stream, o.group, o.consumer, count=BATCH,
                                          min_idle_time=o.claim_idle_ms, justid=True)
            self._fetch([str(i) for i in ids])
        for info in self._client.xinfo_consumers(o.stream, o.group):
            if (info["name"] != o.consumer and int(info["pending"]) == 0
                    and int(info["idle"]) > _STALE_CONSUMER_MS):
                self._client.xgroup_delconsumer(o.stream, o.group, info["name"])

    def _fetch(self, ids: list[str]) -> bool:
        """Read the entries of ``ids`` and deliver them (trimmed ones with no fields)."""
        if not ids:
            return True
        pipe = self._client.pipeline(transaction=False)
        for eid in ids:
            pipe.xrange(self.o.stream, eid, eid, count=1)
        found = pipe.execute()
        return self.deliver([(eid, rows[0][1] if rows else None)
                             for eid, rows in zip(ids, found, strict=True)])


class CommandConsumer(SupervisedActor):
    """Dispatches the stream's commands to the system. Start with ``CommandConsumer.start``.

    Successive incarnations (the supervisor's restarts) may share ``options`` and ``seen``,
    keeping the consumer name and the idempotency memory across a crash.
    """

    def __init__(
        self, *, client: redis.Redis, notify: Callable[[str, str], bool],
        notify_tasks: Callable[[], bool], options: StreamOptions | None = None,
        notify_request: Callable[..., bool] | None = None,
        seen: SeenIds | None = None, clock: Clock | None = None,
        supervisor: pykka.ActorRef[Any] | None = None,
    ) -> None:
        super().__init__(name="commands", supervisor=supervisor)
        self.client, self.notify, self.notify_tasks = client, notify, notify_tasks
        self.notify_request: Callable[..., bool] = (
            notify_request or (lambda request_id, reason, **_: False))
        self.options = options or StreamOptions()
        self.seen = seen if seen is not None else SeenIds()
        self.clock = clock or RealClock()
        self._reader: _Reader | None = None

    def setup(self) -> None:
        self._reader = _Reader(self.client, self._post, self.options, self.clock)

    def handle(self, message: object) -> None:
        match message:
            case _Delivered(entries=entries):
                self._process(entries)

    def read_errors(self) -> int:
        """How many reads of the stream have failed so far (each one logged)."""
        return int(getattr(self._reader, "errors", 0))

    def on_stop(self) -> None:
        if self._reader is not None:
            self._reader.stop(timeout=BLOCK_MS / 1000 + 1)

    def on_failure(self, exception_type: type[BaseException] | None,
                   exception_value: BaseException | None,
                   traceback: TracebackType | None) -> None:
        self.on_stop()
        super().on_failure(exception_type, exception_value, traceback)

    def _post(self, entries: list[Entry]) -> bool:
        try:
            self.actor_ref.tell(_Delivered(tuple(entries)))
        except pykka.ActorDeadError:
            return False
        return True

    def _process(self, entries: tuple[Entry, ...]) -> None:
        for entry_id, fields in entries:  # trimmed entries and duplicates are only acked
            if fields is None:
                continue
            try:
                command = Command.from_fields(fields, entry_id=entry_id)
            except ValueError as exc:
                log.info("[*] [commands] %s '%s' not delivered: %s", fields.get("kind"),
                         fields.get("pool", ""), exc)
                continue
            if self.seen.add(command.id):
                self._dispatch(command)
        try:
            self.client.xack(self.options.stream, self.options.group,
                             *(eid for eid, _ in entries))
        except redis.RedisError as exc:
            log.warning("[!] [commands] could not acknowledge %d commands: %s",
                        len(entries), exc)

    def _dispatch(self, command: Command) -> None:
        kind, subject, reason = command.kind, command.subject, command.reason
        try:
            match kind:
                case CommandKind.POOL_CHANGED:
                    told = self.notify(subject, reason)
                case CommandKind.TASKS_QUEUED:
                    told = self.notify_tasks()
                case CommandKind.REQUEST_CHANGED:
                    told = (self.notify_request(subject, reason,
                                                traceparent=command.traceparent)
                            if command.traceparent else self.notify_request(subject, reason))
        except Exception:
            log.exception("[!] [commands] could not dispatch %s '%s'", kind, subject)
            return
        if not told:
            log.info("[*] [commands] %s '%s' not delivered: no running actor", kind, subject)


def consumer_factory(
    client: redis.Redis, *, notify: Callable[[str, str], bool],
    notify_tasks: Callable[[], bool], clock: Clock, options: StreamOptions | None = None,
    notify_request: Callable[..., bool] | None = None,
) -> Callable[[pykka.ActorRef[Any]], pykka.ActorRef[Any]]:
    """A supervisor child factory: every incarnation shares one consumer name and memory."""
    options, seen = options or StreamOptions(), SeenIds()

    def factory(supervisor: pykka.ActorRef[Any]) -> pykka.ActorRef[Any]:
        return CommandConsumer.start(
            client=client, notify=notify, notify_tasks=notify_tasks,
            notify_request=notify_request, options=options,
            seen=seen, clock=clock, supervisor=supervisor)

    return factory
