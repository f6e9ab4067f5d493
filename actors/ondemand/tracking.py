"""What the on-demand manager knows of each request: one :class:`Tracked` record per request
in a :class:`Tracker`, where it stands as an explicit state (:class:`Standing`) moved along
one table (:data:`TRANSITIONS`). Owned by the manager's actor; not thread-safe.

::

    IDLE        -> RUNNING, WAITING, BACKING_OFF
    RUNNING     -> RUNNING, IDLE, WAITING, BACKING_OFF
    WAITING     -> WAITING, RUNNING, BACKING_OFF
    BACKING_OFF -> BACKING_OFF, IDLE

* ``IDLE``: no actor of this manager's runs it; the sweep or a ``RequestChanged`` may start
  one.
* ``RUNNING``: this manager's actor runs it (the record holds its ref; a new actor may
  replace one found dead).
* ``WAITING``: a predecessor's actor for it is still alive: its actor starts once that one
  is seen stopped, not before (never two actors for one request).
* ``BACKING_OFF``: its actor crashed; only the restart policy's timer starts it again (not
  the sweep, not a ``RequestChanged``).

A move not in the table raises
:class:`~vmpooler.actors.runtime.transitions.IllegalTransitionError`. Besides its state a
record holds ``retiring``, the urns of a predecessor's actors told to stop and not yet seen
stopped. A record is dropped by the change that leaves it ``IDLE`` with nothing retiring,
so the tracker holds exactly the requests it knows something of.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import pykka

from vmpooler.actors.runtime.transitions import check_transition

__all__ = ["TRANSITIONS", "Standing", "Tracked", "Tracker"]


class Standing(Enum):
    """Where a request stands for its manager (see the module's picture)."""

    IDLE = "idle"
    RUNNING = "running"
    WAITING = "waiting"
    BACKING_OFF = "backing-off"


TRANSITIONS: dict[Standing, frozenset[Standing]] = {
    Standing.IDLE: frozenset({Standing.RUNNING, Standing.WAITING, Standing.BACKING_OFF}),
    # RUNNING -> RUNNING: a new actor replaces one found dead
    Standing.RUNNING: frozenset({Standing.RUNNING, Standing.IDLE, Standing.WAITING,
                                 Standing.BACKING_OFF}),
    # WAITING -> WAITING: asked to start again while the predecessor's actor still lives
    Standing.WAITING: frozenset({Standing.WAITING, Standing.RUNNING, Standing.BACKING_OFF}),
    # BACKING_OFF -> BACKING_OFF: another crash report before the timer
    Standing.BACKING_OFF: frozenset({Standing.BACKING_OFF, Standing.IDLE}),
}
"""Every allowed move: ``TRANSITIONS[old]`` holds the standings ``old`` may become."""


@dataclass(slots=True)
class Tracked:
    """One request as its manager sees it: ``state``; ``ref``, this manager's actor for it
    (set exactly while ``RUNNING``); ``retiring``, urns of a predecessor's actors told to
    stop and not yet seen stopped. Read it; change it through its :class:`Tracker`."""

    state: Standing = Standing.IDLE
    ref: pykka.ActorRef[Any] | None = None
    retiring: set[str] = field(default_factory=set)

    def idle(self) -> bool:
        """True when the record holds nothing worth keeping."""
        return self.state is Standing.IDLE and not self.retiring


class Tracker:
    """The manager's records, by request id: a record exists while it holds anything
    (:meth:`Tracked.idle` is False) after every change made here."""

    def __init__(self) -> None:
        self._records: dict[str, Tracked] = {}

    def get(self, request_id: str) -> Tracked | None:
        """The request's record, if it has one."""
        return self._records.get(request_id)

    def state(self, request_id: str) -> Standing:
        """Where the request stands (``IDLE`` when it has no record)."""
        record = self._records.get(request_id)
        return Standing.IDLE if record is None else record.state

    def to(self, request_id: str, state: Standing,
           ref: pykka.ActorRef[Any] | None = None) -> None:
        """Move the request to ``state`` (``RUNNING`` with ``ref``, its new actor; leaving
        ``RUNNING`` forgets the old one). Raise
        :class:`~vmpooler.actors.runtime.transitions.IllegalTransitionError`, changing
        nothing, if :data:`TRANSITIONS` does not allow it."""
        if (state is Standing.RUNNING) != (ref is not None):
            raise ValueError(f"request '{request_id}': a ref goes with {Standing.RUNNING.value}"
                             f" only (to {state.value})")
        record = self._records.get(request_id) or Tracked()
        record.state = check_transition(TRANSITIONS, f"request '{request_id}'", record.state,
                                        state)
        record.ref = ref
        self._keep(request_id, record)

    def end(self, request_id: str) -> pykka.ActorRef[Any] | None:
        """This manager's actor for the request is no longer its (finished, crashed for
        good, or its lease lost): ``RUNNING`` and ``BACKING_OFF`` become ``IDLE``; a
        ``WAITING`` request still waits for its predecessor. Returns the actor it had."""
        ref = self.ref(request_id)
        if self.state(request_id) in (Standing.RUNNING, Standing.BACKING_OFF):
            self.to(request_id, Standing.IDLE)
        return ref

    def retire(self, request_id: str, urn: str) -> bool:
        """Note a predecessor's actor told to stop; False if it already was."""
        record = self._records.get(request_id) or Tracked()
        if urn in record.retiring:
            return False
        record.retiring.add(urn)
        self._keep(request_id, record)
        return True

    def retired(self, request_id: str, urn: str) -> bool:
        """A predecessor's actor was seen stopped; False if it was not retiring here."""
        record = self._records.get(request_id)
        if record is None or urn not in record.retiring:
            return False
        record.retiring.discard(urn)
        self._keep(request_id, record)
        return True

    def _keep(self, request_id: str, record: Tracked) -> None:
        if record.idle():
            self._records.pop(request_id, None)
        else:
            self._records[request_id] = record

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
