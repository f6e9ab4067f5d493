"""The mass-failure brake's Redis operations: the pool's ``held`` set and its moves.

Every write is a compare-and-set script of
:class:`~vmpooler.actors.storage.schema.BrakeScripts`; methods return whether it applied and
may raise ``redis.RedisError``. Thread-safe (the client's connection pool is).
"""

from __future__ import annotations

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.schema import BrakeScripts

__all__ = ["BrakeStore"]


class BrakeStore:
    """A pool's held VMs (``vmpooler__held__<pool>``, ours)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._hold = client.register_script(BrakeScripts.HOLD)
        self._unhold = client.register_script(BrakeScripts.UNHOLD)

    def held(self, pool: str) -> set[str]:
        """The pool's held VMs."""
        return set(self.client.smembers(schema.held(pool)))

    def publish(self, pool: str, *, engaged: bool, failures: int, held: int,
                updated: str) -> None:
        """Record the brake's state for ``/status`` (``vmpooler__brake__<pool>``; its only
        writer is the pool's actor, so a plain HSET)."""
        self.client.hset(schema.brake(pool), mapping={
            "engaged": "1" if engaged else "0", "failures": str(failures),
            "held": str(held), "updated": updated})

    def hold(self, pool: str, vm: str, *, now: str) -> bool:
        """ready → held. False if the VM was not ready (checked out, retired meanwhile)."""
        return bool(self._hold(keys=[schema.ready(pool), schema.held(pool), schema.vm(vm)],
                               args=[vm, now]))

    def unhold(self, pool: str, vm: str, *, to_ready: bool) -> bool:
        """held → ready (``to_ready``) or → completed. False if the VM was not held."""
        target = schema.ready(pool) if to_ready else schema.completed(pool)
        return bool(self._unhold(keys=[schema.held(pool), target, schema.vm(vm)], args=[vm]))
