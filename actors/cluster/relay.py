"""Messages between managers sharing one Redis: :class:`Relay`.

Several managers may share one Redis (each pool and each in-flight on-demand request is
owned by one of them, through a lease). An actor that must reach an actor of another
manager tells it through the relay (the :class:`~vmpooler.actors.cluster.remote.Remote` it
was given): the message goes, as JSON, to the receiving manager's inbox
(:mod:`vmpooler.actors.storage.inbox_store`), whose relay reads it on its own thread and
tells the named actor there.

What a caller may rely on:

* **Only the messages of :data:`WIRE_TYPES`** travel (frozen dataclasses of plain fields);
  anything else is refused (False) and logged, never pickled.
* **At most once, never blocking for long.** A send is one pipelined round trip on the
  caller's thread; a Redis error is logged and reported (False). An entry whose receiver
  died is lost with its inbox, so only messages whose loss is repaired travel here (a
  pool actor reports a request's ready VM again at each check; a request's actor rebuilds
  its VMs in flight from Redis; a lost grant is granted again).
* **The reader never crashes**: undecodable entries are logged and skipped; Redis errors
  are retried with back-off; stopping unblocks a read in progress (``CLIENT UNBLOCK``:
  :class:`~vmpooler.actors.storage.stream_reader.StreamReader`).
* **Hops.** An entry's ``hops`` field says how many times its message has been relayed;
  the receiving actor gets the message in a :class:`~vmpooler.actors.messages.Relayed`
  envelope carrying it, and the :class:`~vmpooler.actors.cluster.router.Router` relays no
  message further that already hopped once. An entry of a manager of the previous release
  has no ``hops`` and marks such a message with ``"forwarded": true`` in its body (read as
  one hop); entries written here still carry that mark for it (:data:`MARKED_FORWARDED`).

An inbox entry's fields: ``to`` (the receiving actor's registry name), ``type`` (a name of
:data:`WIRE_TYPES`), ``body`` (the message's fields as a JSON object), ``hops``, and
``traceparent`` when the message carries a trace context (docs/tracing.md; kept out of the
body, so a manager of an earlier release, which ignores the field, still reads the message).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable
from typing import Any

import pykka
import redis

from vmpooler.actors.messages import (
    CloneForRequest,
    PoolChanged,
    PoolHandedOver,
    Relayed,
    RequestChanged,
    RequestCloneAnswered,
    RequestPoolBlocked,
    RequestSlotFreed,
    RequestVmCloning,
    RequestVmFailed,
    RequestVmReady,
    WantRequestVms,
    WithdrawRequest,
)
from vmpooler.actors.runtime.supervisor import ActorDirectory
from vmpooler.actors.storage.inbox_store import InboxStore
from vmpooler.actors.storage.lease_store import LeaseStore
from vmpooler.actors.storage.stream_reader import StreamReader

__all__ = ["BLOCK_MS", "MARKED_FORWARDED", "WIRE_TYPES", "Relay", "decode", "encode"]

log = logging.getLogger(__name__)

BLOCK_MS = 1000  # longest one read of the inbox blocks (stopping unblocks it)
BATCH = 500
BACKOFF = (0.25, 10.0)  # seconds: first and longest wait after a failed read

WIRE_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    CloneForRequest, PoolChanged, PoolHandedOver, RequestChanged, RequestCloneAnswered,
    RequestPoolBlocked, RequestSlotFreed, RequestVmCloning, RequestVmFailed, RequestVmReady,
    WantRequestVms, WithdrawRequest)}
"""The messages that may travel between managers, by class name."""

_FIELDS: dict[type, frozenset[str]] = {
    cls: frozenset(f.name for f in dataclasses.fields(cls)) for cls in WIRE_TYPES.values()}


MARKED_FORWARDED: frozenset[type] = frozenset(
    {CloneForRequest, PoolChanged, RequestChanged, WantRequestVms})
"""The messages whose body a manager of the previous release marks ``"forwarded": true``
once relayed (its loop stop; here the entry's ``hops``). Written for such a manager to read
and read from one; the messages themselves have no such field."""

_FORWARDED = "forwarded"
_TRACEPARENT = "traceparent"  # a message's trace context (docs/tracing.md): beside the body


def encode(name: str, message: Any, hops: int = 1) -> dict[str, str]:
    """The inbox fields carrying ``message`` to the actor ``name``, relayed ``hops`` times
    once it arrives. Raises ``TypeError`` for a message not in :data:`WIRE_TYPES`."""
    kind = type(message).__name__
    if WIRE_TYPES.get(kind) is not type(message) or not dataclasses.is_dataclass(message) \
            or isinstance(message, type):
        raise TypeError(f"{kind} does not travel between managers")
    body = dataclasses.asdict(message)
    traceparent = body.pop(_TRACEPARENT, "")
    if type(message) in MARKED_FORWARDED and hops >= 1:
        body[_FORWARDED] = True
    fields = {"to": name, "type": kind, "body": json.dumps(body), "hops": str(hops)}
    if traceparent:  # a field of its own: a manager of an earlier release ignores it
        fields[_TRACEPARENT] = traceparent
    return fields


def decode(fields: dict[str, str]) -> tuple[str, Any, int]:
    """``(actor name, message, hops)`` of inbox fields (``hops`` 0 when they do not say,
    at least 1 for a body marked ``forwarded``). Raises ``ValueError`` when they name no
    message of :data:`WIRE_TYPES` or do not fit it."""
    cls = WIRE_TYPES.get(fields.get("type", ""))
    if cls is None or "to" not in fields:
        raise ValueError(f"not a message: {fields!r}")
    try:
        body = json.loads(fields.get("body") or "{}")
        hops = int(fields.get("hops") or 0)
        if not isinstance(body, dict):
            raise TypeError("the body is not an object")
        if cls in MARKED_FORWARDED and body.pop(_FORWARDED, False):
            hops = max(hops, 1)
        if fields.get(_TRACEPARENT) and _TRACEPARENT in _FIELDS[cls]:
            body[_TRACEPARENT] = fields[_TRACEPARENT]
        return fields["to"], cls(**body), max(hops, 0)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad {cls.__name__}: {exc}") from exc


class Relay:
    """This manager's end of the messages between managers (a ``Remote``). Start it with
    :meth:`start` once the actors it delivers to are registered in ``directory``; ``live``
    returns the live managers (for :meth:`to_others`)."""

    def __init__(self, client: redis.Redis, *, member: str, directory: ActorDirectory,
                 live: Callable[[], set[str]], block_ms: int = BLOCK_MS) -> None:
        self._member = member
        self.directory = directory
        self.live = live
        self.inbox = InboxStore(client)
        self.leases = LeaseStore(client)
        self.block_ms = max(1, block_ms)
        self._after = "0-0"  # the last inbox entry read (the reader's thread only)
        self._reader = StreamReader(client, self._read_once, name="vmpooler-relay",
                                    label="relay", what="this manager's inbox",
                                    block_ms=self.block_ms, backoff=BACKOFF)
        self._own_inbox = InboxStore(self._reader.client)  # the reader's connection
        self._started = False
        self.delivered = 0  # messages handed to a local actor (read by tests)

    @property
    def member(self) -> str:
        return self._member

    # -- sending --------------------------------------------------------------------------------
    def to_manager(self, manager: str, name: str, message: Any, *, hops: int = 1) -> bool:
        if not manager or manager == self._member:
            return False
        return self._send([(manager, name, message)], hops)

    def to_lease_holder(self, kind: str, thing: str, name: str, message: Any, *,
                        hops: int = 1) -> bool:
        try:
            holder = self.leases.holder(kind, thing)
        except redis.RedisError as exc:
            log.debug("[relay] holder of %s '%s' unknown: %s", kind, thing, exc)
            return False
        if holder is None:
            return False
        return self.to_manager(holder.holder, name, message, hops=hops)

    def to_others(self, name: str, message: Any, *, hops: int = 1) -> None:
        try:
            others = sorted(self.live() - {self._member})
        except redis.RedisError as exc:
            log.debug("[relay] live managers unknown: %s", exc)
            return
        if others:
            self._send([(m, name, message) for m in others], hops)

    def _send(self, batch: list[tuple[str, str, Any]], hops: int) -> bool:
        try:
            entries = [(manager, encode(name, message, hops))
                       for manager, name, message in batch]
        except TypeError as exc:
            log.error("[!] [relay] not sent: %s", exc)
            return False
        try:
            self.inbox.send(entries)
        except redis.RedisError as exc:
            log.warning("[!] [relay] %s to '%s' not sent: %s", type(batch[0][2]).__name__,
                        batch[0][0], exc)
            return False
        return True

    # -- receiving ------------------------------------------------------------------------------
    def start(self) -> Relay:
        """Start reading this manager's inbox (from its beginning: it is new with this
        manager's id). Later calls do nothing."""
        if not self._started:
            self._started = True
            self._reader.start()
        return self

    @property
    def reading(self) -> bool:
        """Whether the reader's thread is running."""
        return self._reader.alive

    def stop(self, timeout: float = 5.0) -> None:
        """Stop reading and delete the inbox (nobody reads it any more). Idempotent. A read
        in progress is unblocked (``CLIENT UNBLOCK``), never waited out."""
        self._reader.stop(timeout)
        with contextlib.suppress(redis.RedisError):
            self.inbox.drop(self._member)

    def _read_once(self, _client: redis.Redis) -> bool:
        """One blocking read of the inbox on the reader's thread; delivers what it read."""
        entries = self._own_inbox.read(self._member, self._after, block_ms=self.block_ms,
                                          count=BATCH)
        if entries:
            for _eid, fields in entries:
                self._deliver(fields)
            self._after = entries[-1][0]
            with contextlib.suppress(redis.RedisError):
                self._own_inbox.trim(self._member, self._after)
        return True

    def _deliver(self, fields: dict[str, str]) -> None:
        try:
            name, message, hops = decode(fields)
        except ValueError as exc:
            log.error("[!] [relay] entry skipped: %s", exc)
            return
        ref = self.directory.get(name)
        if ref is None:
            log.debug("[relay] %s for '%s' dropped: no such actor here", type(message).__name__,
                      name)
            return
        with contextlib.suppress(pykka.ActorDeadError):
            ref.tell(Relayed(message, hops))
            self.delivered += 1
