"""Where a message goes: :class:`Address`.

An actor is registered in its manager's :class:`~vmpooler.actors.runtime.supervisor.ActorDirectory`
under a name (``pool:<pool>``, ``request:<id>``, ``ondemand``, ``provider:<provider>``,
``tasks`` …); the relay between managers names the receiving actor the same way (the ``to``
field of an inbox entry). An :class:`Address` is that name plus, for an actor that runs in
whichever manager holds a lease, the lease whose holder a message goes to when no such actor
runs here (a pool's lease; a request's lease for the request's actor, and for the on-demand
manager when it is addressed about one request).

What a caller may rely on: ``Address.pool(p).name == f"pool:{p}"``,
``Address.request(r).name == request_actor_name(r)``, ``Address.ondemand().name ==
"ondemand"`` and ``Address.provider(p).name == f"provider:{p}"`` — the names used in the
directory and on the wire, unchanged, so managers of different releases understand each
other. Addresses are frozen, hashable and compare by value.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from vmpooler.actors.messages.request_flow import request_actor_name

__all__ = ["Address", "LeaseKey", "LeaseKind"]


class LeaseKind(StrEnum):
    """The kinds of lease an actor's address may name; the values are the lease kinds of
    :mod:`vmpooler.actors.storage.lease_store` (``POOL``, ``REQUEST``: a test holds them
    equal)."""

    POOL = "pool"
    REQUEST = "request"


POOL, REQUEST = LeaseKind.POOL, LeaseKind.REQUEST

_POOL = "pool:"
_PROVIDER = "provider:"
_REQUEST = request_actor_name("")
_ONDEMAND = "ondemand"
_TASKS = "tasks"
_SLOT_BROKER = "slots"


@dataclass(frozen=True, slots=True)
class LeaseKey:
    """A lease: its ``kind`` (``pool``, ``request``) and the ``thing`` it is of."""

    kind: LeaseKind
    thing: str


@dataclass(frozen=True, slots=True)
class Address:
    """An actor's registry name, and the lease whose holder runs it (None: every manager
    runs its own, or none is meant). Build one with the class methods."""

    name: str
    lease: LeaseKey | None = None

    @classmethod
    def pool(cls, pool: str) -> Address:
        """The actor owning ``pool`` (each manager runs one; the pool's lease holder acts)."""
        return cls(f"{_POOL}{pool}", LeaseKey(POOL, pool))

    @classmethod
    def request(cls, request_id: str) -> Address:
        """The actor of an on-demand request (run by the holder of the request's lease)."""
        return cls(request_actor_name(request_id), LeaseKey(REQUEST, request_id))

    @classmethod
    def ondemand(cls, request_id: str | None = None) -> Address:
        """The on-demand manager; about ``request_id``, the one holding that request's
        lease."""
        return cls(_ONDEMAND, None if request_id is None else LeaseKey(REQUEST, request_id))

    @classmethod
    def provider(cls, provider: str) -> Address:
        """The actor calling ``provider`` (each manager runs its own)."""
        return cls(f"{_PROVIDER}{provider}")

    @classmethod
    def tasks(cls) -> Address:
        """The actor running the queued disk and snapshot tasks (each manager runs one)."""
        return cls(_TASKS)

    @classmethod
    def slot_broker(cls) -> Address:
        """The actor handing freed clone slots (``task_limit``) to the pools waiting for one
        (each manager runs one)."""
        return cls(_SLOT_BROKER)

    @staticmethod
    def is_pool(name: str) -> bool:
        """Whether the registry name ``name`` is a pool actor's."""
        return name.startswith(_POOL)

    @staticmethod
    def is_request(name: str) -> bool:
        """Whether the registry name ``name`` is a request actor's."""
        return name.startswith(_REQUEST)

    @staticmethod
    def is_provider(name: str) -> bool:
        """Whether the registry name ``name`` is a provider actor's."""
        return name.startswith(_PROVIDER)

    def __str__(self) -> str:
        return self.name
