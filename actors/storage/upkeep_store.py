"""Redis operations of the manager's upkeep: stale-entry purge, orphaned VM hashes, the
queue health check and the dead-letter queues.

Every key comes from :mod:`vmpooler.actors.storage.schema`, every write that could race is one of
its ``UpkeepScripts``. Whole-keyspace reads use ``SCAN``, never ``KEYS`` (vmpooler used
``KEYS``, which blocks a large Redis). Methods may raise ``redis.RedisError``; all are
thread-safe (the client's connection pool is).

No one key can stop a purge or a health check: a key of the wrong type met by a read here (a
set where a VM hash should be, say ``vmpooler__vm__<x>`` written by someone else) is skipped
and logged once (:class:`~vmpooler.actors.storage.redis_errors.WrongTypeKeys`); the scripts
check a key's type before they read it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.dlq_store import QUEUES, DeadLetter, parse_member
from vmpooler.actors.storage.lease_store import Fence, run_fenced
from vmpooler.actors.storage.queues import Queue
from vmpooler.actors.storage.redis_errors import WrongTypeKeys, tolerant_results
from vmpooler.actors.storage.replies import maybe_text, scored
from vmpooler.actors.storage.schema import UpkeepScripts
from vmpooler.actors.storage.schema.lease_scripts import fenced

__all__ = ["QueueAges", "ReplayOutcome", "UpkeepStore", "VmHash"]

_SCAN_COUNT = 1000
_QUEUE_NAMES = tuple(Queue)


@dataclass(frozen=True, slots=True)
class VmHash:
    """A VM hash in none of its pool's queues: its name, ``pool`` field and ``clone`` time
    (epoch, None when missing or unreadable)."""

    vm: str
    pool: str
    clone: float | None


@dataclass(frozen=True, slots=True)
class QueueAges:
    """One pool's queue sizes and, for pending and ready, the epochs of their timestamps
    (``clone`` and ``ready``; VMs without a readable one are left out, as in vmpooler)."""

    pending: int
    pending_times: tuple[float, ...]
    ready: int
    ready_times: tuple[float, ...]
    completed: int


class ReplayOutcome:
    """Codes of :meth:`UpkeepStore.replay`."""

    REQUEUED = "requeued"
    ALREADY_QUEUED = "already queued"
    GONE = "gone"


def _pool_queue_keys(pool: str) -> list[str]:
    return [schema.queue(name, pool) for name in _QUEUE_NAMES]


def _pool_vm_sets(pool: str) -> list[str]:
    """Every set that may hold one of the pool's VMs: its six queues, then its ``held`` and
    ``standby`` sets (ours; a VM hash in one of these is not an orphan)."""
    return [*_pool_queue_keys(pool), schema.held(pool), schema.standby(pool)]


class UpkeepStore:
    """See the module docstring. One instance may be shared by several actors."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._scripts = {
            name: client.register_script(getattr(UpkeepScripts, name))
            for name in ("PURGE_COMPLETED", "EXPIRE_ORPHAN", "REPLAY_DEAD_LETTER")
        }
        self._fenced_purge = client.register_script(fenced(UpkeepScripts.PURGE_COMPLETED))
        self.fence: Fence | None = None
        self.wrong_type = WrongTypeKeys("upkeep")

    def with_fence(self, fence: Fence | None) -> UpkeepStore:
        """A view whose pool writes (:meth:`purge_completed`) run behind ``fence`` and raise
        :class:`~vmpooler.actors.storage.lease_store.Fenced` when it no longer holds (None:
        unfenced)."""
        view = copy.copy(self)
        view.fence = fence
        return view

    # -- purge --------------------------------------------------------------------------------
    def purge_completed(self, pool: str, vm: str, *, ttl: int) -> bool:
        """Take a stale VM out of completed (its hash gets ``ttl`` if it had no expiry)."""
        keys = [schema.completed(pool), schema.active(pool), schema.vm(vm)]
        args: list[str | int] = [vm, ttl]
        if self.fence is None:
            return bool(self._scripts["PURGE_COMPLETED"](keys=keys, args=args))
        return bool(run_fenced(self._fenced_purge, self.fence, keys, args))

    def expire_orphan(self, orphan: VmHash, *, ttl: int) -> int:
        """Let an orphaned VM hash expire within ``ttl`` s if it is still orphaned: 1 set,
        2 already expiring that soon, 0 back in a queue, -1 gone, -2 no longer a hash."""
        return int(self._scripts["EXPIRE_ORPHAN"](
            keys=[schema.vm(orphan.vm), *_pool_vm_sets(orphan.pool)],
            args=[orphan.vm, orphan.pool, ttl]))

    def orphans(self) -> list[VmHash]:
        """Every VM hash with a ``pool`` field that is in none of that pool's six queues
        (vmpooler's definition; the pool need not be configured) nor its ``held`` and
        ``standby`` sets."""
        found: list[VmHash] = []
        batch: list[str] = []
        for key in self.client.scan_iter(match=schema.vm_pattern(), count=_SCAN_COUNT):
            batch.append(key)
            if len(batch) >= _SCAN_COUNT:
                found.extend(self._orphans_of(batch))
                batch = []
        if batch:
            found.extend(self._orphans_of(batch))
        return found

    def _orphans_of(self, keys: Sequence[str]) -> list[VmHash]:
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.hmget(key, ["pool", "clone"])
        replies = tolerant_results(pipe, keys, "hash", self.wrong_type)
        candidates = [(schema.vm_name(key), reply[0], reply[1])
                      for key, reply in zip(keys, replies, strict=True) if reply and reply[0]]
        if not candidates:
            return []
        pipe = self.client.pipeline(transaction=False)
        queue_keys: list[str] = []
        for vm, pool, _ in candidates:
            for key in _pool_vm_sets(pool):
                pipe.sismember(key, vm)
                queue_keys.append(key)
        flags = tolerant_results(pipe, queue_keys, "set", self.wrong_type)
        width = len(_QUEUE_NAMES) + 2
        return [
            VmHash(vm, pool, timefmt.parse_epoch(clone))
            for n, (vm, pool, clone) in enumerate(candidates)
            if not any(flags[n * width:(n + 1) * width])
        ]

    # -- health -------------------------------------------------------------------------------
    def queue_ages(self, pools: Iterable[str]) -> dict[str, QueueAges]:
        """Each pool's queue sizes and timestamps, in two pipelined round trips (a queue or
        VM hash of the wrong type counts as empty)."""
        names = list(pools)
        pipe = self.client.pipeline(transaction=False)
        keys: list[str] = []
        for pool in names:
            pipe.smembers(schema.pending(pool))
            pipe.smembers(schema.ready(pool))
            pipe.scard(schema.completed(pool))
            keys += [schema.pending(pool), schema.ready(pool), schema.completed(pool)]
        # SMEMBERS, SMEMBERS, SCARD per pool
        sets: list[Any] = [reply or set()
                           for reply in tolerant_results(pipe, keys, "set", self.wrong_type)]
        pipe = self.client.pipeline(transaction=False)
        keys = []
        for n, _ in enumerate(names):
            for vm in sets[3 * n]:
                pipe.hget(schema.vm(vm), "clone")
                keys.append(schema.vm(vm))
            for vm in sets[3 * n + 1]:
                pipe.hget(schema.vm(vm), "ready")
                keys.append(schema.vm(vm))
        stamps = iter(tolerant_results(pipe, keys, "hash", self.wrong_type))
        out: dict[str, QueueAges] = {}
        for n, pool in enumerate(names):
            pending, ready = sets[3 * n], sets[3 * n + 1]
            pending_times = [timefmt.parse_epoch(next(stamps)) for _ in pending]
            ready_times = [timefmt.parse_epoch(next(stamps)) for _ in ready]
            out[pool] = QueueAges(
                pending=len(pending), pending_times=tuple(t for t in pending_times if t),
                ready=len(ready), ready_times=tuple(t for t in ready_times if t),
                completed=int(sets[3 * n + 2] or 0),
            )
        return out

    def task_counts(self) -> tuple[int, int, int]:
        """``(pooled clones in flight, on-demand clones in flight, on-demand requests
        waiting or being provisioned)``."""
        pipe = self.client.pipeline(transaction=False)
        pipe.get(schema.tasks_clone())
        pipe.get(schema.tasks_ondemandclone())
        pipe.zcard(schema.provisioning_request())
        pipe.zcard(schema.provisioning_processing())
        clone, ondemand, waiting, processing = pipe.execute()
        return _int(clone), _int(ondemand), int(waiting) + int(processing)

    def write_health(self, metrics_json: str, status: str, last_check: str, *,
                     ttl: int = 3600) -> None:
        """Write ``vmpooler__health`` as vmpooler does (three fields, then the expiry)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(schema.health(), mapping={"metrics": metrics_json, "status": status,
                                            "last_check": last_check})
        pipe.expire(schema.health(), ttl)
        pipe.execute()

    # -- dead letters ---------------------------------------------------------------------------
    def dlq_sizes(self) -> dict[str, int]:
        """ZCARD of every ``vmpooler__dlq__*`` key, by queue name (sorted); a key of the
        wrong type is left out."""
        keys = sorted(self.client.scan_iter(match=schema.dlq_pattern(), count=_SCAN_COUNT))
        if not keys:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.zcard(key)
        prefix = schema.dlq("")
        sizes = tolerant_results(pipe, keys, "sorted set", self.wrong_type)
        return {key.removeprefix(prefix): int(n)
                for key, n in zip(keys, sizes, strict=True) if n is not None}

    def dead_letters(self, queues: Iterable[str] = QUEUES) -> list[DeadLetter]:
        """The entries of ``queues``, oldest first within each queue, queues in order."""
        out: list[DeadLetter] = []
        for queue in queues:
            for member, score in scored(self.client.zrange(schema.dlq(queue), 0, -1,
                                                          withscores=True)):
                out.append(parse_member(queue, member, score))
        return out

    def replay(self, entry: DeadLetter) -> tuple[str, Queue | None]:
        """Replay one entry (see ``REPLAY_DEAD_LETTER``): ``(ReplayOutcome, queue)`` where
        ``queue`` names the queue the VM was already in."""
        code, index = self._scripts["REPLAY_DEAD_LETTER"](
            keys=[schema.dlq(entry.queue), *_pool_vm_sets(entry.pool)],
            args=[entry.member(), entry.vm])
        if int(code) == 1:
            return ReplayOutcome.REQUEUED, None
        if int(code) == 2:  # held or standby (past the queues): no queue to name
            position = int(index) - 2
            return (ReplayOutcome.ALREADY_QUEUED,
                    _QUEUE_NAMES[position] if position < len(_QUEUE_NAMES) else None)
        return ReplayOutcome.GONE, None

    def queue_of(self, pool: str, vm: str) -> Queue | None:
        """The first of the pool's six queues holding ``vm``, or None (read only)."""
        pipe = self.client.pipeline(transaction=False)
        for key in _pool_queue_keys(pool):
            pipe.sismember(key, vm)
        return next((name for name, found in zip(_QUEUE_NAMES, pipe.execute(), strict=True)
                     if found), None)

    def retry_count(self, request_id: str) -> int:
        """The on-demand request's ``retry_count`` (0 when unset)."""
        return _int(maybe_text(self.client.hget(schema.odrequest(request_id), "retry_count")))


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0

