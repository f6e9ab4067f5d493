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

from typing import Protocol

__all__ = ["Commands", "NullCommands"]


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
