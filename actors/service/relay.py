"""Messages between managers sharing one Redis: :class:`Relay`.

Several managers may share one Redis (each pool and each in-flight on-demand request is
owned by one of them, through a lease). An actor that must reach an actor of another
manager tells it through the relay (the :class:`~vmpooler.actors.runtime.remote.Remote` it
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
  are retried with back-off; stopping unblocks a read in progress.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import pykka
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from vmpooler.actors.messages import (
    CloneForRequest,
    PoolChanged,
    PoolHandedOver,
    RequestChanged,
    RequestCloneAnswered,
    RequestSlotFreed,
    RequestVmCloning,
    RequestVmFailed,
    RequestVmReady,
)
from vmpooler.actors.runtime.supervisor import ActorDirectory
from vmpooler.actors.storage.connection import sibling
from vmpooler.actors.storage.inbox_store import InboxStore
from vmpooler.actors.storage.lease_store import LeaseStore

__all__ = ["BLOCK_MS", "WIRE_TYPES", "Relay", "decode", "encode"]

log = logging.getLogger(__name__)

BLOCK_MS = 1000  # longest a read blocks (bounds how long stopping takes)
BATCH = 500
MAX_BACKOFF = 10.0

WIRE_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    CloneForRequest, PoolChanged, PoolHandedOver, RequestChanged, RequestCloneAnswered,
    RequestSlotFreed, RequestVmCloning, RequestVmFailed, RequestVmReady)}
"""The messages that may travel between managers, by class name."""


def encode(name: str, message: Any) -> dict[str, str]:
    """The inbox fields carrying ``message`` to the actor ``name``. Raises ``TypeError`` for
    a message not in :data:`WIRE_TYPES`."""
    kind = type(message).__name__
    if WIRE_TYPES.get(kind) is not type(message):
        raise TypeError(f"{kind} does not travel between managers")
    return {"to": name, "type": kind, "body": json.dumps(dataclasses.asdict(message))}


def decode(fields: dict[str, str]) -> tuple[str, Any]:
    """``(actor name, message)`` of inbox fields. Raises ``ValueError`` when they name no
    message of :data:`WIRE_TYPES` or do not fit it."""
    cls = WIRE_TYPES.get(fields.get("type", ""))
    if cls is None or "to" not in fields:
        raise ValueError(f"not a message: {fields!r}")
    try:
        return fields["to"], cls(**json.loads(fields.get("body") or "{}"))
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"bad {cls.__name__}: {exc}") from exc


class Relay:
    """This manager's end of the messages between managers (a ``Remote``). Start it with
    :meth:`start` once the actors it delivers to are registered in ``directory``; ``live``
    returns the live managers (for :meth:`to_others`)."""

    def __init__(self, client: redis.Redis, *, member: str, directory: ActorDirectory,
                 live: Callable[[], set[str]]) -> None:
        self._member = member
        self.directory = directory
        self.live = live
        self.inbox = InboxStore(client)
        self.leases = LeaseStore(client)
        # the reads block: a client of their own, whose timeout outlasts a blocked read
        timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
        # and no retries of its own: stop() ends a blocked read by shutting its connection
        # down, which a retry would only block again (the loop below backs off on errors)
        self._reader = InboxStore(sibling(
            client, max_connections=2, retry=Retry(NoBackoff(), 0),
            socket_timeout=None if timeout is None else max(float(timeout), BLOCK_MS / 1000 + 5)))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.delivered = 0  # messages handed to a local actor (read by tests)

    @property
    def member(self) -> str:
        return self._member

    # -- sending --------------------------------------------------------------------------------
    def to_manager(self, manager: str, name: str, message: Any) -> bool:
        if not manager or manager == self._member:
            return False
        return self._send([(manager, name, message)])

    def to_lease_holder(self, kind: str, thing: str, name: str, message: Any) -> bool:
        try:
            holder = self.leases.holder(kind, thing)
        except redis.RedisError as exc:
            log.debug("[relay] holder of %s '%s' unknown: %s", kind, thing, exc)
            return False
        if holder is None:
            return False
        return self.to_manager(holder.holder, name, message)

    def to_others(self, name: str, message: Any) -> None:
        try:
            others = sorted(self.live() - {self._member})
        except redis.RedisError as exc:
            log.debug("[relay] live managers unknown: %s", exc)
            return
        if others:
            self._send([(m, name, message) for m in others])

    def _send(self, batch: list[tuple[str, str, Any]]) -> bool:
        try:
            entries = [(manager, encode(name, message)) for manager, name, message in batch]
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
        manager's id)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="vmpooler-relay")
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop reading and delete the inbox (nobody reads it any more). Idempotent. Returns
        without waiting out the reader's blocking read: its connection is shut down."""
        self._stop.set()
        with contextlib.suppress(Exception):  # wakes the read blocked for up to BLOCK_MS
            self._reader.client.connection_pool.disconnect()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        with contextlib.suppress(redis.RedisError):
            self.inbox.drop(self._member)
        with contextlib.suppress(Exception):
            self._reader.client.connection_pool.disconnect()

    def _run(self) -> None:
        after, failures = "0-0", 0
        while not self._stop.is_set():
            try:
                entries = self._reader.read(self._member, after, block_ms=BLOCK_MS, count=BATCH)
                if failures:
                    log.info("[*] [relay] reading this manager's inbox again")
                failures = 0
            except redis.RedisError as exc:
                if self._stop.is_set():  # stop() shut the connection down
                    break
                failures += 1
                log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                        "[!] [relay] cannot read this manager's inbox: %s", exc)
                self._stop.wait(min(MAX_BACKOFF, 0.25 * 2 ** min(failures - 1, 8)))
                continue
            if not entries:
                continue
            for _eid, fields in entries:
                self._deliver(fields)
            after = entries[-1][0]
            with contextlib.suppress(redis.RedisError):
                self._reader.trim(self._member, after)

    def _deliver(self, fields: dict[str, str]) -> None:
        try:
            name, message = decode(fields)
        except ValueError as exc:
            log.error("[!] [relay] entry skipped: %s", exc)
            return
        ref = self.directory.get(name)
        if ref is None:
            log.debug("[relay] %s for '%s' dropped: no such actor here", type(message).__name__,
                      name)
            return
        with contextlib.suppress(pykka.ActorDeadError):
            ref.tell(message)
            self.delivered += 1
