"""The names of a pool's VM queues, for the stores and their callers (the API included).
Their Redis keys are spelled in :mod:`vmpooler.actors.storage.schema` (``schema.queue``)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Queue"]


class Queue(StrEnum):
    """One of a pool's VM queues: the Redis set ``schema.queue(queue, pool)``. Members are
    in vmpooler's order (a VM lives in at most one of the first five; ``MIGRATING`` is a side
    set of running VMs). A member is its name as a ``str``, so it keys dicts read by name."""

    PENDING = "pending"
    READY = "ready"
    RUNNING = "running"
    COMPLETED = "completed"
    DISCOVERED = "discovered"
    MIGRATING = "migrating"
