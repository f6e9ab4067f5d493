"""Typed operations on vmpooler's Redis schema.

Every write that could race is one of the Lua scripts of :mod:`vmpooler.actors.storage.schema`;
methods return whether the transition applied. Methods may raise ``redis.RedisError``
(connection lost, timeout): callers decide how to back off. All methods are thread-safe
(the client's connection pool is).

Fencing: :meth:`Store.with_fence` gives a view whose writes of a pool's state (its queues,
its VM hashes, its empty flag) run behind a lease's fence and raise
:class:`~vmpooler.actors.storage.lease_store.Fenced` (nothing written) once the lease is no
longer held. The unfenced store writes exactly as before (the API and the task actor).

The single commands outside a pool's transitions (override acknowledgements, template
records, task queues, dead letters) are inherited from
:class:`~vmpooler.actors.storage.side_writes.SideWrites`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.check_stamps import stamp_fields
from vmpooler.actors.storage.fenced_scripts import FencedScripts
from vmpooler.actors.storage.lease_store import REQUEST, Fence
from vmpooler.actors.storage.pool_snapshot import PoolSnapshot, read_snapshot, read_vm_fields
from vmpooler.actors.storage.queues import Queue
from vmpooler.actors.storage.redis_errors import WrongTypeKeys
from vmpooler.actors.storage.replies import fields as as_fields
from vmpooler.actors.storage.replies import text_list, text_set
from vmpooler.actors.storage.schema import Scripts
from vmpooler.actors.storage.schema.lease_scripts import fenced
from vmpooler.actors.storage.schema.pool_scripts import RELEASE_SLOT_BODY
from vmpooler.actors.storage.side_writes import SideWrites

__all__ = ["FENCED_SCRIPTS", "CloneReservation", "PoolSnapshot", "Store", "read_vm_fields"]


FENCED_SCRIPTS: dict[str, str] = {
    name: fenced(getattr(Scripts, name))
    for name in ("START_CLONE", "MARK_READY", "RETIRE", "BEGIN_DESTROY", "FORGET", "DISCOVER",
                 "RESOLVE_DISCOVERED", "DRAIN", "SET_FIELDS", "SET_REMOVE", "SET_FLAG")
}
"""The fenced sources of every script that writes a pool's state. A refused
``CLONE_SUCCEEDED`` or ``CLONE_FAILED`` still gives its clone slot back (the counter is not the
pool's state, and a slot must not leak because its pool changed hands)."""
FENCED_SCRIPTS["CLONE_SUCCEEDED"] = fenced(
    Scripts.CLONE_SUCCEEDED,
    on_refused=RELEASE_SLOT_BODY.format(counter="KEYS[1]", slots="KEYS[4]", vm="ARGV[4]"))
FENCED_SCRIPTS["CLONE_FAILED"] = fenced(
    Scripts.CLONE_FAILED,
    on_refused="if ARGV[5] == '1' then\n" + RELEASE_SLOT_BODY.format(
        counter="KEYS[1]", slots="KEYS[4]", vm="ARGV[1]") + "end\n")

class CloneReservation:
    """Outcome codes of :meth:`Store.reserve_clone`."""

    RESERVED = 1
    NO_SLOT = 0
    NAME_TAKEN = -1
    REQUEST_MOVED = -2


STANDALONE = "standalone"
"""The slot owner of a store not given a manager's id (tests, tools)."""


class Store(SideWrites, FencedScripts):
    """vmpooler's Redis schema as methods. One instance is shared by every actor.

    Clone slots are taken in the name of ``slot_owner`` (the manager's id, see
    :meth:`owned_by`): each slot is also the VM's member of that manager's slot set, so a
    dead manager's slots can be given back (:meth:`fold_slots`)."""

    def __init__(self, client: redis.Redis, *, slot_owner: str = STANDALONE) -> None:
        self.client = client
        self.slot_owner = slot_owner
        self._scripts = {
            name: client.register_script(getattr(Scripts, name))
            for name in (
                "START_CLONE", "CLONE_SUCCEEDED", "CLONE_FAILED", "MARK_READY", "RETIRE",
                "BEGIN_DESTROY", "FORGET", "DISCOVER", "RESOLVE_DISCOVERED", "DRAIN",
                "RELEASE_SLOT", "FOLD_SLOTS",
            )
        }
        self._fenced = {name: client.register_script(source)
                        for name, source in FENCED_SCRIPTS.items()}
        self.fence: Fence | None = None
        self.wrong_type = WrongTypeKeys("pool store")

    def owned_by(self, manager: str) -> Store:
        """A view of this store (same client and scripts) taking clone slots in the name of
        ``manager``."""
        view = copy.copy(self)
        view.slot_owner = manager
        return view

    # -- start-up ---------------------------------------------------------------------------
    def slot_owners(self) -> set[str]:
        """The managers that may hold clone slots."""
        return set(text_list(self.client.hkeys(schema.tasks_slot_owners())))

    def clone_in_flight(self, vm: str) -> bool:
        """True while some manager holds a clone slot for ``vm``: its clone was started and
        has not been answered (or its manager died and its slots are not folded yet)."""
        owners = sorted(self.slot_owners())
        if not owners:
            return False
        pipe = self.client.pipeline(transaction=False)
        for owner in owners:
            pipe.sismember(schema.tasks_clone_slots(owner), vm)
            pipe.sismember(schema.tasks_ondemandclone_slots(owner), vm)
        return any(pipe.execute())

    def fold_slots(self, gone: Iterable[str]) -> tuple[int, int, int]:
        """Give back every clone slot of the managers ``gone`` (dead: their clones will
        never be answered, or an answer that comes releases nothing) and set both counters
        to the slots the remaining managers hold, atomically. Returns ``(pooled, on-demand,
        slots given back)``. Several managers share the counters: a starting manager folds
        the dead ones' slots, never zeroes the counters under the live ones."""
        pooled, ondemand, forgotten = self._run(
            "FOLD_SLOTS",
            [schema.tasks_clone(), schema.tasks_ondemandclone(), schema.tasks_slot_owners()],
            [schema.tasks_clone_slots(""), schema.tasks_ondemandclone_slots(""),
             *sorted(gone)])
        return int(pooled), int(ondemand), int(forgotten)

    def forget_migrations(self) -> None:
        """Forget every in-flight migration (a manager starting with no other live)."""
        self.client.delete(schema.migration())

    def publish_pools(self, pools: Mapping[str, Mapping[str, str]]) -> list[str]:
        """Publish the configured pools; forget the ones no longer configured (returned)."""
        known = text_set(self.client.smembers(schema.pools()))
        removed = sorted(known - set(pools))
        pipe = self.client.pipeline(transaction=True)
        for name in removed:
            pipe.srem(schema.pools(), name)
            pipe.delete(schema.pool_hash(name))
        for name, fields in pools.items():
            pipe.sadd(schema.pools(), name)
            pipe.delete(schema.pool_hash(name))
            if fields:
                pipe.hset(schema.pool_hash(name), mapping=as_fields(fields))
        pipe.execute()
        return removed

    # -- reads ------------------------------------------------------------------------------
    def snapshot(self, pool: str, *, overrides: bool = True, flags: bool = True) -> PoolSnapshot:
        """The pool's queues, with its override keys and/or the manager's flags when asked
        (:func:`~vmpooler.actors.storage.pool_snapshot.read_snapshot`)."""
        return read_snapshot(self.client, pool, overrides=overrides, flags=flags)

    def vm_fields(self, vms: Iterable[str], fields: Sequence[str]) -> dict[str, list[str | None]]:
        """HMGET ``fields`` of each VM's hash, pipelined (a key of the wrong type reads as a
        VM without these fields, logged once)."""
        return read_vm_fields(self.client, vms, fields, seen=self.wrong_type)

    def active_members(self, pool: str, vms: Iterable[str]) -> set[str]:
        """The subset of ``vms`` present in the pool's ``active`` hash."""
        names = list(vms)
        if not names:
            return set()
        values = self.client.hmget(schema.active(pool), names)
        return {n for n, v in zip(names, values, strict=True) if v is not None}

    def vm_exists(self, vm: str) -> bool:
        """Whether the VM's hash exists (the name is taken)."""
        return bool(self.client.exists(schema.vm(vm)))

    # -- transitions ------------------------------------------------------------------------
    def reserve_clone(
        self, pool: str, vm: str, *, limit: int, clone_time: str, domain: str | None,
        request: tuple[str, str] | None = None, request_fence: str = "",
    ) -> int:
        """Take a clone slot and the name, and put the VM in pending, atomically.

        ``request`` is ``(request_id, alias)`` for an on-demand clone: it takes a slot of
        ``tasks__ondemandclone`` instead and is recorded in the VM hash; with
        ``request_fence`` (a value of the request's lease) nothing is written unless the
        lease still holds it. Returns a :class:`CloneReservation` code.
        """
        request_id, alias = request or ("", "")
        ondemand = request is not None
        keys = [_clone_counter(ondemand), schema.vm(vm), schema.pending(pool),
                self._slots(ondemand), schema.tasks_slot_owners()]
        args: list[Any] = [limit, vm, clone_time, pool, domain or "", request_id, alias,
                           self.slot_owner]
        if request is not None and request_fence:
            keys.append(schema.lease(REQUEST, request_id))
            args.append(request_fence)
        return int(self._run("START_CLONE", keys, args))

    def clone_succeeded(
        self, pool: str, vm: str, *, seconds: float, ip: str, date: str, ondemand: bool = False
    ) -> None:
        """Release the clone slot and record the clone's duration and IP."""
        self._run(
            "CLONE_SUCCEEDED",
            [_clone_counter(ondemand), schema.vm(vm), schema.clone_stats(date),
             self._slots(ondemand)],
            [f"{pool}:{vm}", f"{seconds:.2f}", ip, vm],
        )

    def clone_failed(
        self, pool: str, vm: str, *, error: str, error_class: str, ttl: int, release_slot: bool,
        ondemand: bool = False,
    ) -> bool:
        """Remove a failed clone from pending and let its hash expire in ``ttl`` seconds."""
        return bool(self._run(
            "CLONE_FAILED",
            [_clone_counter(ondemand), schema.vm(vm), schema.pending(pool),
             self._slots(ondemand)],
            [vm, error, error_class, ttl, "1" if release_slot else "0"],
        ))

    def ondemand_owners(self, vms: Iterable[str]) -> dict[str, tuple[str, str]]:
        """``vm -> (request_id, alias)`` for those of ``vms`` cloned for a request."""
        names = list(vms)
        if not names:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.hmget(schema.vm(name), "request_id", "pool_alias")
        owners = {}
        for name, (request_id, alias) in zip(names, pipe.execute(), strict=True):
            if request_id:
                owners[name] = (request_id, alias or "")
        return owners

    def release_clone_slot(self, vm: str, *, ondemand: bool = False) -> int:
        """Give back ``vm``'s clone slot if this store's manager still holds it; the
        counter's new value."""
        return int(self._run("RELEASE_SLOT", [_clone_counter(ondemand), self._slots(ondemand)],
                             [vm]))

    def _slots(self, ondemand: bool) -> str:
        """This store's manager's slot set of the pooled or on-demand counter."""
        return (schema.tasks_ondemandclone_slots(self.slot_owner) if ondemand
                else schema.tasks_clone_slots(self.slot_owner))

    def mark_ready(self, pool: str, vm: str, *, now: str, boot_seconds: float, date: str) -> int:
        """pending → ready, with the boot statistics: 1. 0 if the VM was not pending; -1
        (nothing written) if it was cloned for an on-demand request."""
        return int(self._run(
            "MARK_READY",
            [schema.pending(pool), schema.ready(pool), schema.vm(vm),
             schema.boot_stats(date), schema.lastboot()],
            [vm, pool, now, f"{boot_seconds:.2f}"],
        ))

    def retire(
        self, pool: str, vm: str, source: str, *, field: str = "", value: str = ""
    ) -> bool:
        """``source`` queue → completed (optionally setting one hash field). False if absent."""
        keys = {
            "pending": schema.pending(pool), "ready": schema.ready(pool),
            "running": schema.running(pool), "discovered": schema.discovered(pool),
            "standby": schema.standby(pool),
        }
        return bool(self._run(
            "RETIRE", [keys[source], schema.completed(pool), schema.vm(vm)], [vm, field, value]
        ))

    def begin_destroy(self, pool: str, vm: str, *, now: str, ttl: int) -> bool:
        """Mark a completed VM as being destroyed; its hash expires in ``ttl`` seconds."""
        return bool(self._run(
            "BEGIN_DESTROY",
            [schema.completed(pool), schema.active(pool), schema.vm(vm)], [vm, now, ttl],
        ))

    def forget(self, pool: str, vm: str, *, delete_hash: bool) -> bool:
        """Remove a destroyed (or vanished) VM from completed."""
        return bool(self._run(
            "FORGET",
            [schema.completed(pool), schema.active(pool), schema.vm(vm)],
            [vm, "1" if delete_hash else "0"],
        ))

    def _queue_keys(self, pool: str) -> list[str]:
        return [
            schema.pending(pool), schema.ready(pool), schema.running(pool),
            schema.completed(pool), schema.discovered(pool),
        ]

    def discover(self, pool: str, inventory: Iterable[str]) -> list[str]:
        """Put every inventory VM that is in no queue into discovered; return those added."""
        names = list(inventory)
        if not names:
            return []
        return list(self._run("DISCOVER", self._queue_keys(pool), names))

    def resolve_discovered(self, pool: str, vm: str) -> int:
        """1: discovered → completed; 2: it was claimed by another queue; 0: not discovered."""
        return int(self._run("RESOLVE_DISCOVERED", self._queue_keys(pool), [vm]))

    def drain(self, pool: str, *, include_ready: bool = True) -> int:
        """Every pending (and ready) VM → completed, atomically. Returns how many moved."""
        return int(self._run(
            "DRAIN",
            [schema.ready(pool), schema.pending(pool), schema.completed(pool)],
            ["1" if include_ready else "0", schema.vm("")],
        ))

    # -- small writes -----------------------------------------------------------------------
    def set_vm_fields(self, vm: str, fields: Mapping[str, str]) -> None:
        """HSET fields of a VM hash (fenced: one script)."""
        if self.fence is not None:
            self._run("SET_FIELDS", [schema.vm(vm)] * len(fields),
                      [f"{k}\t{v}" for k, v in fields.items()])
            return
        self.client.hset(schema.vm(vm), mapping=as_fields(fields))

    def set_check_times(self, stamps: Mapping[str, str]) -> None:
        """HSET ``check`` on several VM hashes, each with ``check_by`` naming this store's
        manager in the same HSET (fenced: one script), pipelined
        (:func:`~vmpooler.actors.storage.check_stamps.stamp_fields`)."""
        if not stamps:
            return
        fields = {n: stamp_fields(self.slot_owner, v) for n, v in stamps.items()}
        if self.fence is not None:
            self._run("SET_FIELDS", [schema.vm(n) for n, f in fields.items() for _ in f],
                      [f"{k}\t{v}" for f in fields.values() for k, v in f.items()])
            return
        pipe = self.client.pipeline(transaction=False)
        for name, mapping in fields.items():
            pipe.hset(schema.vm(name), mapping=as_fields(mapping))
        pipe.execute()

    def leave_migrating(self, pool: str, vm: str) -> bool:
        """SREM the VM from the pool's migrating set."""
        if self.fence is not None:
            return bool(self._run("SET_REMOVE", [schema.migrating(pool)], [vm]))
        return bool(self.client.srem(schema.migrating(pool), vm))

    def set_empty_flag(self, pool: str, empty: bool) -> None:
        """Set or clear ``vmpooler__empty__<pool>``."""
        if self.fence is not None:
            self._run("SET_FLAG", [schema.empty(pool)], ["1" if empty else "0"])
        elif empty:
            self.client.set(schema.empty(pool), "true")
        else:
            self.client.delete(schema.empty(pool))

    def queue_sizes(self, pool: str) -> dict[Queue, int]:
        """SCARD of each of the pool's queues (every :class:`Queue`), in one round trip."""
        return self.counts(pool, tuple(Queue))

    def counts(self, pool: str, queues: tuple[Queue, ...]) -> dict[Queue, int]:
        """SCARD of the given queues of the pool, pipelined."""
        pipe = self.client.pipeline(transaction=False)
        for name in queues:
            pipe.scard(schema.queue(name, pool))
        return dict(zip(queues, pipe.execute(), strict=True))

    def members(self, pool: str, queue: Queue) -> set[str]:
        """SMEMBERS of one queue of the pool."""
        return set(text_set(self.client.smembers(schema.queue(queue, pool))))


def _clone_counter(ondemand: bool) -> str:
    return schema.tasks_ondemandclone() if ondemand else schema.tasks_clone()

