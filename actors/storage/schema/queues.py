"""A pool's six VM queues (part of :mod:`vmpooler.actors.storage.schema`: import ``Queue``
and ``queue`` from there)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Queue", "queue"]


class Queue(StrEnum):
    """One of a pool's VM queues: the Redis set ``vmpooler__<value>__<pool>``. Members are
    in vmpooler's order (a VM lives in at most one of the first five; ``MIGRATING`` is a side
    set of running VMs). A member is its name as a ``str``, so it keys dicts read by name."""

    PENDING = "pending"
    READY = "ready"
    RUNNING = "running"
    COMPLETED = "completed"
    DISCOVERED = "discovered"
    MIGRATING = "migrating"


def queue(name: Queue, pool: str) -> str:
    """The key of ``pool``'s queue ``name`` (``queue(Queue.READY, p) == ready(p)``)."""
    return f"vmpooler__{name}__{pool}"
