"""An on-demand request's records as vmpooler writes them (reference §2.4), and what the
request store's methods answer: the entries of its ``requested`` field, the members of
``vmpooler__odcreate__task``, the claim, the outcomes of ``ATTACH`` and ``DELETE``, the
request as the API's GET reads it. Values only, no Redis; every name here is also importable
from :mod:`vmpooler.actors.storage.request_store`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from vmpooler.actors.config.overrides import bounded_int
from vmpooler.actors.storage.request_origin import RequestOrigin

__all__ = [
    "MAX_ENTRY_COUNT",
    "AttachOutcome",
    "Claim",
    "DeleteOutcome",
    "Entry",
    "RequestRecord",
    "format_requested",
    "odcreate_member",
    "parse_requested",
]


@dataclass(frozen=True, slots=True)
class Entry:
    """``count`` VMs of ``pool`` asked for under the name ``alias`` (a pool or an alias)."""

    alias: str
    pool: str
    count: int

    @property
    def key(self) -> tuple[str, str]:
        return (self.alias, self.pool)


_COUNT = re.compile(r"\+?(-)?([0-9]+(?:_[0-9]+)*)", re.ASCII)
MAX_ENTRY_COUNT = 10_000
"""The largest count an entry is read with: no API lets a request ask for more VMs of one
pool (``max_ondemand_instances_per_request``), so a larger count was written by someone else
and must not make a request's actor loop without end."""


def parse_requested(requested: str) -> tuple[Entry, ...]:
    """Entries of a ``requested`` field (``"alias:pool:n,alias:pool:n"``); malformed parts are
    skipped, a count that is not a number counts as 0 (as vmpooler), and one above
    :data:`MAX_ENTRY_COUNT` as that."""
    entries = []
    for part in requested.split(","):
        bits = part.split(":")
        if len(bits) != 3 or not bits[0] or not bits[1]:
            continue
        number = _COUNT.fullmatch(bits[2].strip())
        count = 0
        if number and not number.group(1):  # a sign "-" reads as 0
            count = min(MAX_ENTRY_COUNT, bounded_int(number.group(2).replace("_", "")))
        entries.append(Entry(bits[0], bits[1], count))
    return tuple(entries)


def format_requested(entries: Iterable[Entry]) -> str:
    """The ``requested`` field for ``entries``."""
    return ",".join(f"{e.alias}:{e.pool}:{e.count}" for e in entries)


def odcreate_member(request_id: str, alias: str, pool: str, count: int) -> str:
    """A member of ``vmpooler__odcreate__task`` as vmpooler writes it:
    ``"<alias>:<pool>:<count>:<request id>"`` — ``count`` clones of the entry not started yet."""
    return f"{alias}:{pool}:{count}:{request_id}"


@dataclass(frozen=True, slots=True)
class Claim:
    """What a request actor learns when it takes charge of its request.

    ``status`` is None while the request is in flight; then ``created`` is its creation
    epoch and ``entries`` what it asks for. ``found`` is False when no such request exists.
    ``fresh`` is True when this claim took the request from the waiting queue: it was never
    claimed before, so it has no VM delivered or on its way. ``origin`` is who asked
    (:func:`.request_origin.recorded_origin`: never None for a request in flight).
    """

    found: bool
    status: str | None = None
    created: float = 0.0
    entries: tuple[Entry, ...] = ()
    retry_count: int = 0
    has_token: bool = False
    fresh: bool = False
    origin: RequestOrigin | None = None


class AttachOutcome(Enum):
    """Result of :meth:`.request_store.RequestStore.attach`."""

    ATTACHED = 1
    ALREADY = 2
    NOT_PENDING = 0
    REFUSED = -1


class DeleteOutcome(Enum):
    """Result of :meth:`.request_store.RequestStore.delete`."""

    DELETED = 1
    NOT_FOUND = 0
    ALREADY_DELETED = -1
    ALREADY_FAILED = -2


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """A request as the API's GET reads it: status (None in flight), entries and the VMs
    delivered to each entry."""

    request_id: str
    status: str | None
    entries: tuple[Entry, ...]
    delivered: dict[tuple[str, str], tuple[str, ...]]
    failure_reason: str | None = None
