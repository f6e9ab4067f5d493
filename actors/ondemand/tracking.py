"""What the on-demand manager knows of each request: one :class:`Tracked` record per request
in a :class:`Tracker`. Owned by the manager's actor; not thread-safe."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pykka

from vmpooler.actors.runtime.restart_policy import RestartHistory

__all__ = ["Tracked", "Tracker"]


@dataclass(slots=True)
class Tracked:
    """One request as its manager sees it.

    ``ref``: this manager's actor for it (None: none started or it has gone);
    ``restarts``: its actor's recent crashes (None: none lately); ``retiring``: urns of a
    predecessor's actors for it told to stop and not yet seen stopped; ``deferred``: start
    its actor once they have stopped; ``backing_off``: it crashed, and only the restart
    policy's timer starts it again (not the sweep, not a ``RequestChanged``)."""

    ref: pykka.ActorRef[Any] | None = None
    restarts: RestartHistory | None = None
    retiring: set[str] = field(default_factory=set)
    deferred: bool = False
    backing_off: bool = False

    def idle(self) -> bool:
        """True when the record holds nothing worth keeping."""
        return (self.ref is None and self.restarts is None and not self.retiring
                and not self.deferred and not self.backing_off)


class Tracker:
    """The manager's records, by request id. A record exists while it holds anything
    (:meth:`Tracked.idle` is False) once :meth:`tidy` has been called after a change."""

    def __init__(self) -> None:
        self._records: dict[str, Tracked] = {}

    def get(self, request_id: str) -> Tracked | None:
        """The request's record, if it has one."""
        return self._records.get(request_id)

    def of(self, request_id: str) -> Tracked:
        """The request's record, made empty if it had none."""
        record = self._records.get(request_id)
        if record is None:
            record = self._records[request_id] = Tracked()
        return record

    def tidy(self, request_id: str) -> None:
        """Forget the request's record if it holds nothing."""
        record = self._records.get(request_id)
        if record is not None and record.idle():
            del self._records[request_id]

    def ref(self, request_id: str) -> pykka.ActorRef[Any] | None:
        """This manager's actor for the request (alive or not), or None."""
        record = self._records.get(request_id)
        return None if record is None else record.ref

    def runs(self, request_id: str) -> bool:
        """True while this manager has an actor for the request."""
        return self.ref(request_id) is not None

    def running(self) -> set[str]:
        """Ids of the requests this manager has an actor for."""
        return {r for r, record in self._records.items() if record.ref is not None}

    def refs(self) -> Iterator[pykka.ActorRef[Any]]:
        """This manager's request actors."""
        return (record.ref for record in self._records.values() if record.ref is not None)

    def __len__(self) -> int:
        return len(self._records)
