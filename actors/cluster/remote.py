"""Telling an actor of another manager: the :class:`Remote` an actor is given.

Several managers may share one Redis; each runs its own actors. Where one manager's actor
must reach an actor another manager runs — the pool actor that owns a pool, the actor of an
on-demand request another manager holds, the on-demand manager that granted a clone — it
tells it through a :class:`Remote`. The implementation
(:class:`vmpooler.actors.cluster.relay.Relay`) carries the message through the receiving
manager's inbox in Redis; :class:`LocalOnly` reaches nobody (a manager alone, and tests).

Every method answers at once and never raises: a message that cannot be sent is reported
(False) and dropped. Delivery is at most once, so only messages whose loss is repaired
(sent again, or rebuilt from Redis by the receiver) travel this way. ``hops`` is how many
times the message will have been relayed once it arrives (1 for a message sent from the
actor that made it); the receiver hears it in a
:class:`~vmpooler.actors.messages.Relayed` envelope carrying that count. Actors do not call
a ``Remote`` themselves: they tell an address through the
:class:`~vmpooler.actors.cluster.router.Router`.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["LocalOnly", "Remote"]


class Remote(Protocol):
    """How an actor reaches the actors of other managers."""

    @property
    def member(self) -> str:
        """This manager's id (its heartbeat member)."""
        ...

    def to_manager(self, manager: str, name: str, message: Any, *, hops: int = 1) -> bool:
        """Tell the actor registered as ``name`` in ``manager``. False when ``manager`` is
        this one (tell it locally) or the message could not be sent."""
        ...

    def to_lease_holder(self, kind: str, thing: str, name: str, message: Any, *,
                        hops: int = 1) -> bool:
        """Tell ``name`` in the manager holding the lease of ``kind`` ``thing`` (a pool, a
        request). False when nobody or this manager holds it, or on a Redis error."""
        ...

    def to_others(self, name: str, message: Any, *, hops: int = 1) -> None:
        """Tell ``name`` in every other live manager."""
        ...


class LocalOnly:
    """A :class:`Remote` for a manager with nobody to talk to: nothing is ever sent."""

    def __init__(self, member: str = "") -> None:
        self._member = member

    @property
    def member(self) -> str:
        return self._member

    def to_manager(self, manager: str, name: str, message: Any, *, hops: int = 1) -> bool:
        return False

    def to_lease_holder(self, kind: str, thing: str, name: str, message: Any, *,
                        hops: int = 1) -> bool:
        return False

    def to_others(self, name: str, message: Any, *, hops: int = 1) -> None:
        return None
