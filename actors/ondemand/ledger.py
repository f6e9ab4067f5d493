"""What one request actor knows of its request's VMs: :class:`Ledger` (asked for, delivered,
on their way, queued for a clone slot) and :class:`TaskMirror` (the request's members of
``vmpooler__odcreate__task``). Both belong to a single actor and are not thread-safe."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import redis

from vmpooler.actors.messages import RequestVmFailed
from vmpooler.actors.storage.request_store import Entry, RequestStore

__all__ = ["EntryKey", "Ledger", "TaskMirror"]

log = logging.getLogger(__name__)

EntryKey = tuple[str, str]
"""``(alias, pool)``: one entry of a request."""

EARLY_KEPT = 1000
"""At most this many outcomes heard before their clone's start are kept (oldest dropped)."""


@dataclass(slots=True)
class Ledger:
    """Where each VM of a request stands.

    ``entries``: what the request asks for; ``delivered``: VMs attached per entry;
    ``in_flight``: ``vm -> entry`` of the VMs cloning or booting for it; ``queued``: VMs
    asked of the manager whose clone has not started; ``early``: ``vm -> outcome`` of VMs
    whose failure (the message) or delivery (None) was heard before their clone's start.
    The pool actor tells a request of its clone's start and of its VM's outcome, but the
    two may come from different managers (the pool changed owner between them, or the
    request its actor), so they may arrive in either order."""

    entries: dict[EntryKey, Entry] = field(default_factory=dict)
    delivered: Counter[EntryKey] = field(default_factory=Counter)
    in_flight: dict[str, EntryKey] = field(default_factory=dict)
    queued: Counter[EntryKey] = field(default_factory=Counter)
    early: dict[str, RequestVmFailed | None] = field(default_factory=dict)

    def complete(self) -> bool:
        """True when every entry has received all its VMs."""
        return all(self.delivered[k] >= e.count for k, e in self.entries.items())

    def cloning(self, vm: str, key: EntryKey) -> None:
        """A queued VM's clone started as ``vm``."""
        if self.queued[key] > 0:
            self.queued[key] -= 1
        self.in_flight[vm] = key

    def heard_early(self, vm: str, outcome: RequestVmFailed | None) -> None:
        """``vm``'s outcome came before its clone's start: kept for :meth:`cloning`'s
        caller (at most :data:`EARLY_KEPT`, the oldest dropped first)."""
        if vm not in self.early and len(self.early) >= EARLY_KEPT:
            del self.early[next(iter(self.early))]
        self.early[vm] = outcome

    def take_missing(self) -> list[EntryKey]:
        """The VMs neither delivered, on their way nor queued, one key per VM; they count as
        queued from now on."""
        wants: list[EntryKey] = []
        on_the_way = Counter(self.in_flight.values())
        for key, entry in self.entries.items():
            missing = entry.count - self.delivered[key] - on_the_way[key] - self.queued[key]
            if missing > 0:
                self.queued[key] += missing
                wants += [key] * missing
        return wants

    def queued_counts(self) -> dict[EntryKey, int]:
        """``entry -> VMs queued`` of the entries with any."""
        return {k: n for k, n in self.queued.items() if n > 0}


class TaskMirror:
    """Mirrors a request's queued clones in ``vmpooler__odcreate__task`` as vmpooler writes
    it (one ``alias:pool:count:id`` member per entry with clones not started), for
    ``/status`` and for tools that read vmpooler's keys."""

    def __init__(self, store: RequestStore, request_id: str) -> None:
        self.store = store
        self.request_id = request_id
        self.written: dict[EntryKey, int] = {}  # what the key holds for this request
        self.score = 0.0  # vmpooler: the time the tasks were queued

    def sync(self, wanted: dict[EntryKey, int], stale: tuple[Entry, ...] = ()) -> None:
        """Make the key hold ``wanted``, replacing members of ``stale`` entries with any
        count. A Redis error leaves the mirror behind until the next call; it never
        raises."""
        if wanted == self.written and not stale:
            return
        try:
            self.store.write_tasks(self.request_id, old=self.written, new=wanted,
                                   score=self.score, stale=stale)
        except redis.RedisError as exc:
            log.debug("request '%s': vmpooler__odcreate__task not updated: %s",
                      self.request_id, exc)
            return
        self.written = wanted
