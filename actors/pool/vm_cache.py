"""What a pool actor remembers about its VMs between cycles: only caches of Redis fields and
timers, every one rebuilt from Redis (or simply started afresh) after a restart.

Used only on the pool actor's thread. Times named ``*_at``/``next_*`` are monotonic; the
others are epoch seconds as stored in the VM hashes.
"""

from __future__ import annotations

from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.store import Store

__all__ = ["VmCache"]


class VmCache:
    """Per-VM caches of one pool actor.

    * ``clone_started`` (epoch) — when the clone began; re-read from the VM's ``clone``
      field when missing (:meth:`clone_started_at`);
    * ``reserved_at`` (monotonic) — when this actor reserved the name and clone slot;
    * ``ready_since`` (epoch) and ``next_check`` (monotonic) — of ready VMs, filled from
      the ``ready`` and ``check`` fields when a ready VM is first seen;
    * ``next_running_check`` (monotonic) — of running VMs; empty after a restart, so the
      first cycle checks every running VM;
    * ``notified`` — pending VMs whose timeout warning was logged;
    * ``held`` — the pool's held VMs (``vmpooler__held__<pool>``), written only by the
      :class:`~vmpooler.actors.pool.brake.Brake`, which reads the set on its first cycle.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.clone_started: dict[str, float] = {}
        self.reserved_at: dict[str, float] = {}
        self.ready_since: dict[str, float] = {}
        self.next_check: dict[str, float] = {}
        self.next_running_check: dict[str, float] = {}
        self.notified: set[str] = set()
        self.held: set[str] = set()

    def clone_started_at(self, vm: str) -> float | None:
        """When the VM's clone began (epoch), from the cache or its hash; None if unknown.
        May raise ``redis.RedisError``."""
        if vm not in self.clone_started:
            value = timefmt.parse_epoch(self.store.vm_field(vm, "clone"))
            if value is None:
                return None
            self.clone_started[vm] = value
        return self.clone_started[vm]

    def forget(self, vm: str) -> None:
        """Drop everything remembered about ``vm`` (it left the pool's queues)."""
        self.clone_started.pop(vm, None)
        self.ready_since.pop(vm, None)
        self.next_check.pop(vm, None)
        self.next_running_check.pop(vm, None)
        self.reserved_at.pop(vm, None)
        self.notified.discard(vm)
