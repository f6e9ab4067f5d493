"""Dead-letter entries (reference §2.1, §4.11): what vmpooler writes, and reading it back.

An entry records one VM that left its queue because something went wrong: its clone failed
(queue ``clone``), it never became ready or was purged as stale (``pending``), or a ready VM
stopped answering (``ready``). Each entry is a member of the sorted set
``vmpooler__dlq__<queue>`` scored by its epoch, spelled exactly as vmpooler spells it:
``"<vm>:<epoch>:<json>"``, the JSON compact with the fields ``vm, pool, queue_from,
error_class, error_message, failed_at`` (RFC 3339, local zone), ``retry_count``, and
``request_id``, ``pool_alias`` when known.

What callers may rely on: :meth:`DeadLetter.member` and :func:`parse_member` are inverse for
every entry this module writes, and :func:`parse_member` never raises (a member it cannot
read gives an entry with only the raw text and what it could split off).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vmpooler.actors.storage import timefmt

__all__ = ["QUEUES", "DeadLetter", "parse_member"]

QUEUES = ("clone", "pending", "ready")
"""The dead-letter queues vmpooler writes, in the order they are listed."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead-letter entry. ``raw`` is the sorted-set member it was read from ("" when
    built here); ``epoch`` is its score."""

    vm: str
    pool: str
    queue: str
    error_class: str
    error_message: str
    epoch: int
    failed_at: str = ""
    retry_count: int = 0
    request_id: str | None = None
    pool_alias: str | None = None
    raw: str = ""

    @classmethod
    def now(cls, *, vm: str, pool: str, queue: str, error_class: str, error_message: str,
            epoch: float, retry_count: int = 0, request_id: str | None = None,
            pool_alias: str | None = None) -> DeadLetter:
        """An entry failing at ``epoch`` (``failed_at`` in the local zone, as vmpooler)."""
        stamp = timefmt.rfc3339(datetime.fromtimestamp(int(epoch)).astimezone())
        return cls(vm=vm, pool=pool, queue=queue, error_class=error_class,
                   error_message=error_message, epoch=int(epoch), failed_at=stamp,
                   retry_count=retry_count, request_id=request_id or None,
                   pool_alias=pool_alias or None)

    def body(self) -> dict[str, Any]:
        """The JSON object of the entry, in vmpooler's field order (nil fields left out)."""
        body: dict[str, Any] = {
            "vm": self.vm, "pool": self.pool, "queue_from": self.queue,
            "error_class": self.error_class, "error_message": self.error_message,
            "failed_at": self.failed_at, "retry_count": self.retry_count,
        }
        if self.request_id is not None:
            body["request_id"] = self.request_id
        if self.pool_alias is not None:
            body["pool_alias"] = self.pool_alias
        return body

    def member(self) -> str:
        """The sorted-set member: ``"<vm>:<epoch>:<json>"`` with Ruby's compact JSON."""
        if self.raw:
            return self.raw
        text = json.dumps(self.body(), separators=(",", ":"), ensure_ascii=False)
        return f"{self.vm}:{self.epoch}:{text}"


def parse_member(queue: str, member: str, score: float | None = None) -> DeadLetter:
    """Read one member of ``vmpooler__dlq__<queue>``; never raises."""
    vm, _, rest = member.partition(":")
    epoch_text, _, text = rest.partition(":")
    try:
        epoch = int(epoch_text)
    except ValueError:
        epoch = int(score or 0)
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return DeadLetter(vm=vm, pool="", queue=queue, error_class="", error_message=text,
                          epoch=epoch, raw=member)

    def text_of(key: str) -> str:
        value = body.get(key)
        return "" if value is None else str(value)

    try:
        retries = int(body.get("retry_count") or 0)
    except (TypeError, ValueError):
        retries = 0
    return DeadLetter(
        vm=text_of("vm") or vm, pool=text_of("pool"), queue=queue,
        error_class=text_of("error_class"), error_message=text_of("error_message"),
        epoch=epoch, failed_at=text_of("failed_at"), retry_count=retries,
        request_id=text_of("request_id") or None, pool_alias=text_of("pool_alias") or None,
        raw=member,
    )
