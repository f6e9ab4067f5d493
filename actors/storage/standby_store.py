"""The standby tier's Redis operations: the pool's ``standby`` set and its moves.

Every write is a compare-and-set script of
:class:`~vmpooler.actors.storage.schema.StandbyScripts`; methods return whether it applied
and may raise ``redis.RedisError``. Built with a ``fence`` (the pool's lease), the moves run
behind it and raise :class:`~vmpooler.actors.storage.lease_store.Fenced` (nothing written)
once the lease is no longer held. A standby VM leaves for ``completed`` through
:meth:`~vmpooler.actors.storage.store.Store.retire` (source ``standby``). Thread-safe (the
client's connection pool is).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.lease_store import REQUEST, Fence, run_fenced
from vmpooler.actors.storage.pool_snapshot import read_vm_fields
from vmpooler.actors.storage.replies import text_set
from vmpooler.actors.storage.schema import StandbyScripts
from vmpooler.actors.storage.schema.lease_scripts import fenced

__all__ = ["STANDBY_STATES", "StandbyStore", "StandbyVm"]

STANDBY_STATES = ("suspending", "suspended", "resuming", "checking")
"""Where a VM stands in the tier (its hash field ``standby``), in the order it goes."""

_FIELDS = ("standby", "standby_since", "suspended", "resumed")


@dataclass(frozen=True, slots=True)
class StandbyVm:
    """One member of a pool's standby set as its hash tells it: its ``state`` (one of
    :data:`STANDBY_STATES`; ``suspending`` when unreadable: suspending again is harmless),
    when it entered the tier, was suspended and was resumed (epochs, None when unset)."""

    vm: str
    state: str
    since: float | None
    suspended: float | None
    resumed: float | None


class StandbyStore:
    """A pool's standby VMs (``vmpooler__standby__<pool>``, ours)."""

    def __init__(self, client: redis.Redis, fence: Fence | None = None) -> None:
        self.client = client
        self.fence = fence
        sources = {name: getattr(StandbyScripts, name)
                   for name in ("ENTER", "PARK", "SET_STATE", "WAKE", "TAKE_FOR_REQUEST")}
        if fence is not None:
            sources = {name: fenced(source) for name, source in sources.items()}
        self._scripts = {name: client.register_script(source)
                         for name, source in sources.items()}

    def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        fence = self.fence
        if fence is None:
            return self._scripts[script](keys=keys, args=args)
        return run_fenced(self._scripts[script], fence, keys, args)

    def members(self, pool: str) -> set[str]:
        """The pool's standby VMs."""
        return set(text_set(self.client.smembers(schema.standby(pool))))

    def read(self, pool: str, names: Iterable[str] | None = None) -> dict[str, StandbyVm]:
        """Every standby VM of the pool (``names``: the set as just read) with its state:
        one round trip for the set unless given, one for the hashes unless it is empty."""
        names = sorted(self.members(pool) if names is None else names)
        rows = read_vm_fields(self.client, names, _FIELDS) if names else {}
        found: dict[str, StandbyVm] = {}
        for vm in names:
            state, since, suspended, resumed = rows.get(vm, [None] * len(_FIELDS))
            found[vm] = StandbyVm(
                vm=vm, state=state if state in STANDBY_STATES else "suspending",
                since=_epoch(since), suspended=_epoch(suspended), resumed=_epoch(resumed))
        return found

    def enter(self, pool: str, vm: str, *, now: float, boot_seconds: float) -> int:
        """pending → standby (``suspending``), with the boot statistics: 1. 0 if the VM was
        not pending; -1 (nothing written) if it was cloned for an on-demand request."""
        return int(self._run(
            "ENTER",
            [schema.pending(pool), schema.standby(pool), schema.vm(vm),
             schema.boot_stats(timefmt.date_bucket(now)), schema.lastboot()],
            [vm, pool, timefmt.format_epoch(now), f"{boot_seconds:.2f}"]))

    def park(self, pool: str, vm: str, *, now: float) -> bool:
        """ready → standby (``suspending``). False if the VM was not ready."""
        return bool(self._run("PARK", [schema.standby(pool), schema.ready(pool), schema.vm(vm)],
                              [vm, timefmt.format_epoch(now)]))

    def set_state(self, pool: str, vm: str, state: str, *, stamp: str = "",
                  now: float | None = None) -> bool:
        """Record ``state`` (and ``stamp`` = now) for a VM still in the tier."""
        value = timefmt.format_epoch(now) if stamp and now is not None else ""
        return bool(self._run("SET_STATE", [schema.standby(pool), schema.vm(vm)],
                              [vm, state, stamp if value else "", value]))

    def wake(self, pool: str, vm: str, *, now: float) -> bool:
        """standby → ready. False if the VM was no longer in the tier."""
        return bool(self._run("WAKE", [schema.standby(pool), schema.ready(pool), schema.vm(vm)],
                              [vm, timefmt.format_epoch(now)]))


    def take_for_request(self, pool: str, vm: str, *, now: float, request: tuple[str, str],
                         request_fence: str = "") -> int:
        """A suspended standby VM → pending for ``request`` (``(request_id, alias)``): 1.
        0 if it was not suspended in the tier; -2 (nothing written) when ``request_fence``
        is given and the request's lease no longer holds it."""
        request_id, alias = request
        keys = [schema.standby(pool), schema.pending(pool), schema.vm(vm)]
        args: list[Any] = [vm, timefmt.format_epoch(now), request_id, alias]
        if request_fence:
            keys.append(schema.lease(REQUEST, request_id))
            args.append(request_fence)
        return int(self._run("TAKE_FOR_REQUEST", keys, args))


def _epoch(text: str | None) -> float | None:
    return timefmt.parse_epoch(text) if text else None
