"""To and from the pool actors, the slot broker and the task actor (not the on-demand ones)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pykka

__all__ = [
    "CloneSlotFreed",
    "PoolChanged",
    "PoolHandedOver",
    "PoolPurged",
    "PurgeStaleVms",
    "RefillPool",
    "RenewLease",
    "RunPoolCycle",
    "StartDrain",
    "TasksQueued",
    "WantCloneSlot",
]


@dataclass(frozen=True, slots=True)
class RunPoolCycle:
    """Scheduler → pool actor: the periodic safety-net cycle.

    ``generation`` lets the actor drop a timer it has since replaced.
    """

    generation: int = 0


@dataclass(frozen=True, slots=True)
class PoolChanged:
    """Anyone → pool actor: something changed in Redis (a VM checked out or returned, an
    override, a reset). The actor runs a cycle at once (coalescing bursts), and that cycle
    reads the pool's override keys: whoever writes one must send this, or the change waits
    for the periodic read (docs/compatibility.md). A pool actor whose manager does not hold
    the pool's lease passes it on to the holder's (once: a relayed one goes no further)."""

    pool: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class StartDrain:
    """Anyone → pool actor: move every ready and pending VM to completed now."""

    pool: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class WantCloneSlot:
    """Pool actor → slot broker: no clone slot was free; wake me when one is."""

    pool: str


@dataclass(frozen=True, slots=True)
class CloneSlotFreed:
    """Pool actor → slot broker: ``count`` clone slots were released and not reused."""

    count: int = 1


@dataclass(frozen=True, slots=True)
class RefillPool:
    """Slot broker → pool actor: a clone slot is free; start clones if still short."""

    pool: str


@dataclass(frozen=True, slots=True)
class TasksQueued:
    """Anyone → task actor: disk, snapshot or revert tasks were queued in Redis; the actor
    runs a round at once instead of at its next timer."""


@dataclass(frozen=True, slots=True)
class RenewLease:
    """Scheduler → pool actor: refresh the pool's lease (a third of the lease TTL): renew
    it, take it over, or hand it over (actors/cluster/ownership.py)."""


@dataclass(frozen=True, slots=True)
class PoolHandedOver:
    """Pool actor of the manager that just released a pool's lease → the pool actor of the
    manager it now belongs to (through the relay): take the lease now, rather than at its
    next renewal, so the pool is not left unserved for up to a third of the TTL."""

    pool: str


@dataclass(frozen=True, slots=True)
class PurgeStaleVms:
    """Housekeeper → pool actor: purge the pool's stale pending, ready and completed VMs
    (``max_*_age``; with ``dry_run`` only count and log them), then answer ``reply_to``
    with :class:`PoolPurged` carrying ``round``."""

    round: int
    dry_run: bool
    reply_to: pykka.ActorRef[Any]


@dataclass(frozen=True, slots=True)
class PoolPurged:
    """Pool actor → housekeeper: how many VMs of each queue the purge ``round`` took (or,
    in a dry run, would have taken)."""

    round: int
    pool: str
    pending: int = 0
    ready: int = 0
    completed: int = 0
