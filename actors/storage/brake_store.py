"""The mass-failure brake's Redis operations: the pool's ``held`` set and its moves.

Every write is a compare-and-set script of
:class:`~vmpooler.actors.storage.schema.BrakeScripts`; methods return whether it applied and
may raise ``redis.RedisError``. Built with a ``fence`` (the pool's lease), the moves run
behind it and raise :class:`~vmpooler.actors.storage.lease_store.Fenced` (nothing written)
once the lease is no longer held. Thread-safe (the client's connection pool is).
"""

from __future__ import annotations

from typing import Any

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.lease_store import Fence, run_fenced
from vmpooler.actors.storage.replies import text_set
from vmpooler.actors.storage.schema import BrakeScripts
from vmpooler.actors.storage.schema.lease_scripts import fenced

__all__ = ["BrakeStore"]


class BrakeStore:
    """A pool's held VMs (``vmpooler__held__<pool>``, ours)."""

    def __init__(self, client: redis.Redis, fence: Fence | None = None) -> None:
        self.client = client
        self.fence = fence
        sources = {"HOLD": BrakeScripts.HOLD, "UNHOLD": BrakeScripts.UNHOLD}
        if fence is not None:
            sources = {name: fenced(source) for name, source in sources.items()}
        self._scripts = {name: client.register_script(source)
                         for name, source in sources.items()}

    def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        fence = self.fence
        if fence is None:
            return self._scripts[script](keys=keys, args=args)
        return run_fenced(self._scripts[script], fence, keys, args)

    def held(self, pool: str) -> set[str]:
        """The pool's held VMs."""
        return set(text_set(self.client.smembers(schema.held(pool))))

    def publish(self, pool: str, *, engaged: bool, failures: int, held: int,
                updated: str) -> None:
        """Record the brake's state for ``/status`` (``vmpooler__brake__<pool>``; its only
        writer is the pool's actor, so a plain HSET)."""
        self.client.hset(schema.brake(pool), mapping={
            "engaged": "1" if engaged else "0", "failures": str(failures),
            "held": str(held), "updated": updated})

    def hold(self, pool: str, vm: str, *, now: str) -> bool:
        """ready → held. False if the VM was not ready (checked out, retired meanwhile)."""
        return bool(self._run("HOLD", [schema.ready(pool), schema.held(pool), schema.vm(vm)],
                              [vm, now]))

    def unhold(self, pool: str, vm: str, *, to_ready: bool) -> bool:
        """held → ready (``to_ready``) or → completed. False if the VM was not held."""
        target = schema.ready(pool) if to_ready else schema.completed(pool)
        return bool(self._run("UNHOLD", [schema.held(pool), target, schema.vm(vm)], [vm]))
