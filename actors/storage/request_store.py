"""On-demand requests in Redis (reference §2.4): the records vmpooler writes (their values:
:mod:`.request_records`), and every status change as one compare-and-set script
(:class:`vmpooler.actors.storage.schema.RequestScripts`).

Used by the API (create, read, delete) and by request actors (claim, attach, fulfil, fail).
A request actor writes through :meth:`RequestStore.with_fence`, a view whose request scripts
(:data:`FENCED_SCRIPTS`) run behind the fence of the request's lease: when the lease no
longer holds the value the fence names, nothing is written and
:class:`~vmpooler.actors.storage.lease_store.Fenced` is raised. The unfenced store (the API,
the manager's sweeps) writes exactly as before.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import cast

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.fenced_scripts import FencedScripts
from vmpooler.actors.storage.lease_store import Fence
from vmpooler.actors.storage.redis_errors import WrongTypeKeys, tolerant_results
from vmpooler.actors.storage.replies import maybe_text, text_list
from vmpooler.actors.storage.request_origin import RequestOrigin, origin_args, recorded_origin
from vmpooler.actors.storage.request_records import (
    MAX_ENTRY_COUNT,
    AttachOutcome,
    Claim,
    DeleteOutcome,
    Entry,
    RequestRecord,
    format_requested,
    odcreate_member,
    parse_requested,
)
from vmpooler.actors.storage.schema import RequestScripts
from vmpooler.actors.storage.schema.lease_scripts import fenced

__all__ = [
    "MAX_ENTRY_COUNT",  # re-exported from request_records, as the names below it
    "AttachOutcome",
    "Claim",
    "DeleteOutcome",
    "Entry",
    "RequestOrigin",  # re-exported from request_origin
    "RequestRecord",
    "RequestStore",
    "format_requested",
    "odcreate_member",
    "origin_args",  # re-exported from request_origin
    "parse_requested",
    "recorded_origin",  # re-exported from request_origin
]

FENCED_SCRIPTS = ("CLAIM", "ATTACH", "FULFIL", "FAIL", "RETRY", "RETIRE", "TAKE_READY")
"""The scripts a request's actor runs, which take the fence of the request's lease."""
READY_TTL = 2_592_000
"""Seconds a ready request's hash is kept (30 days, as vmpooler)."""
DELETED_TTL = 1_296_000
"""Seconds a deleted request's hash is kept (15 days, as vmpooler)."""


class RequestStore(FencedScripts):
    """vmpooler's on-demand request records as methods. Thread-safe (one Redis client)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._scripts = {
            name: client.register_script(getattr(RequestScripts, name))
            for name in ("CREATE", "CLAIM", "ATTACH", "FULFIL", "FAIL", "DELETE",
                         "SETTLE_ORPHAN", "IN_FLIGHT", "RETRY", "RETIRE", "TAKE_READY")
        }
        self._fenced = {name: client.register_script(fenced(getattr(RequestScripts, name)))
                        for name in FENCED_SCRIPTS}
        self.wrong_type = WrongTypeKeys("requests")
        self.fence: Fence | None = None

    @staticmethod
    def _vm_keys(request_id: str, entries: Iterable[Entry]) -> list[str]:
        keys: list[str] = []
        for e in entries:
            keys += [schema.request_vms(request_id, e.alias, e.pool), schema.running(e.pool),
                     schema.completed(e.pool)]
        return keys

    # -- API ------------------------------------------------------------------------------------
    def create(self, request_id: str, entries: Sequence[Entry], *, created: int,
               token: str | None = None, user: str | None = None,
               origin: RequestOrigin | None = None) -> bool:
        """Record a new request and queue it. False (nothing written) if the id is taken.
        ``user`` is the token's user (vmpooler's ``token:user``); ``origin`` who asked, how
        urgently and with what share (ours: fields ``user``, ``priority``, ``share``)."""
        return bool(self._run(
            "CREATE", [schema.odrequest(request_id), schema.provisioning_request()],
            [request_id, created, format_requested(entries), token or "", user or "",
             *origin_args(origin)],
        ))

    def _hash_read(self, request_id: str, *fields: str) -> list[str | None] | None:
        """HMGET ``fields`` of the request's hash; None when its key is not a hash (logged
        once: no such request)."""
        key = schema.odrequest(request_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(key, list(fields))
        (values,) = tolerant_results(pipe, [key], "hash", self.wrong_type)
        return cast("list[str | None] | None", values)

    def owner_token(self, request_id: str) -> str | None:
        """The token the request was created with (``token:token``), or None."""
        return (self._hash_read(request_id, "token:token") or [None])[0]

    def read(self, request_id: str) -> RequestRecord | None:
        """The request and its delivered VMs (two round trips), or None if unknown. A key of
        the wrong type is no request, and a delivered-VM key of the wrong type holds no VM
        (both logged once)."""
        values = self._hash_read(request_id, "requested", "status", "failure_reason")
        if values is None:
            return None
        requested, status, failure_reason = values
        if requested is None:
            return None
        entries = parse_requested(requested)
        pipe = self.client.pipeline(transaction=False)
        keys = [schema.request_vms(request_id, e.alias, e.pool) for e in entries]
        for key in keys:
            pipe.smembers(key)
        replies = tolerant_results(pipe, keys, "set", self.wrong_type)
        delivered = {e.key: tuple(sorted(vms or ())) for e, vms in zip(entries, replies,
                                                                      strict=True)}
        return RequestRecord(request_id, status or None, entries, delivered, failure_reason)

    def delete(self, request_id: str) -> DeleteOutcome:
        """Delete a request: its delivered VMs go to completed. Never undoes a failure."""
        requested = (self._hash_read(request_id, "requested") or [None])[0]
        if requested is None:
            return DeleteOutcome.NOT_FOUND
        entries = parse_requested(requested)
        result = self._run(
            "DELETE",
            [schema.odrequest(request_id), schema.provisioning_request(),
             schema.provisioning_processing(), *self._vm_keys(request_id, entries)],
            [request_id, DELETED_TTL],
        )
        return DeleteOutcome(int(result[0]))

    # -- request actor --------------------------------------------------------------------------
    def waiting(self) -> list[str]:
        """Ids of requests not yet claimed and of requests being provisioned."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zrange(schema.provisioning_request(), 0, -1)
        pipe.zrange(schema.provisioning_processing(), 0, -1)
        waiting, processing = pipe.execute()
        return list(dict.fromkeys([*processing, *waiting]))

    def claim(self, request_id: str, *, now: float) -> Claim:
        """Move the request to processing (keeping its creation time) and read it."""
        r = self._run(
            "CLAIM",
            [schema.odrequest(request_id), schema.provisioning_request(),
             schema.provisioning_processing()],
            [request_id, int(now)],
        )
        code = int(r[0])
        if code == 0:
            return Claim(found=False)
        if code == -1:
            return Claim(found=True, status=r[1])
        return Claim(found=True, created=float(r[1]), entries=parse_requested(r[2]),
                     retry_count=int(r[3] or 0), has_token=bool(r[4]), fresh=r[5] == "1",
                     origin=recorded_origin(request_id, *r[6:10]))

    def delivered(self, request_id: str, entries: Sequence[Entry]) -> dict[tuple[str, str], int]:
        """How many VMs each entry has received."""
        pipe = self.client.pipeline(transaction=False)
        for e in entries:
            pipe.scard(schema.request_vms(request_id, e.alias, e.pool))
        return {e.key: int(n) for e, n in zip(entries, pipe.execute(), strict=True)}

    def in_flight(self, request_id: str, pools: Sequence[str]) -> dict[str, tuple[str, str]]:
        """``vm -> (alias, pool)`` of the pending VMs cloned for this request."""
        pools = list(dict.fromkeys(pools))
        if not pools:
            return {}
        found = self._run("IN_FLIGHT", [schema.pending(p) for p in pools],
                          [request_id, schema.vm("")])
        out: dict[str, tuple[str, str]] = {}
        for pool, flat in zip(pools, found, strict=True):
            for i in range(0, len(flat), 2):
                out[flat[i]] = (flat[i + 1], pool)
        return out

    def still_pending(self, vms: dict[str, str]) -> set[str]:
        """Of ``vms`` (``vm -> pool``), those still in their pool's pending set (one round
        trip)."""
        by_pool: dict[str, list[str]] = {}
        for vm, pool in vms.items():
            by_pool.setdefault(pool, []).append(vm)
        if not by_pool:
            return set()
        pipe = self.client.pipeline(transaction=False)
        for pool, names in by_pool.items():
            pipe.smismember(schema.pending(pool), names)
        found: set[str] = set()
        for names, flags in zip(by_pool.values(), pipe.execute(), strict=True):
            found.update(vm for vm, flag in zip(names, flags, strict=True) if flag)
        return found

    def attach(self, request_id: str, entry: Entry, vm: str, *, now: str,
               lifetime: int | None) -> AttachOutcome:
        """Hand a ready VM to the request (pending → running), or retire it if the request
        cannot take it. ``lifetime`` (hours) is written to the VM when the request has a
        token, capped by the request's ``quota_lifetime`` when it has one (written then even
        without a token). See ``RequestScripts.ATTACH``."""
        return AttachOutcome(int(self._run(
            "ATTACH",
            [schema.odrequest(request_id), schema.pending(entry.pool),
             schema.running(entry.pool), schema.completed(entry.pool),
             schema.request_vms(request_id, entry.alias, entry.pool), schema.active(entry.pool),
             schema.vm(vm)],
            [vm, now, entry.count, "" if lifetime is None else lifetime],
        )))

    def take_ready(self, request_id: str, entry: Entry, want: int, *, now: str,
                   lifetime: int | None, epoch: float | None = None) -> list[str]:
        """Hand up to ``want`` ready VMs of the entry's pool to the request at once
        (``ondemand_from_ready``), as :meth:`attach` hands a finished clone; returns those
        taken (fewer when the pool has fewer, or a checkout took one first). With ``epoch``
        (``now`` as epoch seconds), each VM taken is logged in the pool's
        :func:`~vmpooler.actors.storage.schema.demand` as a checkout is, in the same step.
        Two round trips: candidates are read, then moved by ``RequestScripts.TAKE_READY``,
        which takes only those still ready."""
        if want <= 0:
            return []
        candidates = self.client.srandmember(schema.ready(entry.pool), want * 2)
        if not candidates:
            return []
        return cast("list[str]", self._run(
            "TAKE_READY",
            [schema.odrequest(request_id), schema.ready(entry.pool), schema.running(entry.pool),
             schema.request_vms(request_id, entry.alias, entry.pool),
             schema.active(entry.pool), schema.demand(entry.pool)],
            [now, entry.count, "" if lifetime is None else lifetime, schema.vm(""),
             request_id, entry.alias, "" if epoch is None else f"{epoch:.3f}",
             schema.DEMAND_RETENTION, schema.DEMAND_MAX, *candidates],
        ))

    def fulfil(self, request_id: str, entries: Sequence[Entry]) -> tuple[bool, str | None]:
        """Mark the request ready if every entry is full and it is still in flight.

        Returns ``(True, "ready")``, ``(False, None)`` when not complete yet, or
        ``(False, status)`` when it had already finished (``""``: it is gone).
        """
        r = self._run(
            "FULFIL",
            [schema.odrequest(request_id), schema.provisioning_processing(),
             *(schema.request_vms(request_id, e.alias, e.pool) for e in entries)],
            [request_id, READY_TTL, *(e.count for e in entries)],
        )
        code = int(r[0])
        if code == 1:
            return True, "ready"
        return False, (r[1] if code == 0 else None)

    def fail(self, request_id: str, entries: Sequence[Entry], *, reason: str,
             ttl: int) -> tuple[bool, str | None]:
        """Fail the request if it is still in flight; its delivered VMs go to completed.

        Returns ``(True, "failed")`` or ``(False, status it already had)``.
        """
        r = self._run(
            "FAIL",
            [schema.odrequest(request_id), schema.provisioning_request(),
             schema.provisioning_processing(), *self._vm_keys(request_id, entries)],
            [request_id, reason, ttl],
        )
        return (True, "failed") if int(r[0]) == 1 else (False, r[1])

    def status(self, request_id: str) -> str | None:
        """The request's status; None in flight; ``""`` if it is gone."""
        fields = self.client.hmget(schema.odrequest(request_id), "requested", "status")
        if fields[0] is None:
            return ""
        return maybe_text(fields[1]) or None

    def record_retry(self, request_id: str) -> int:
        """Count one more clone retry; returns the new count."""
        return int(self._run("RETRY", [schema.odrequest(request_id)], []))

    def settle_orphan(self, request_id: str, pool: str, vm: str) -> bool:
        """A ready VM whose request has no actor: to completed if the request is finished."""
        return bool(self._run(
            "SETTLE_ORPHAN",
            [schema.odrequest(request_id), schema.pending(pool), schema.completed(pool)],
            [vm],
        ))

    def write_tasks(self, request_id: str, *, old: dict[tuple[str, str], int],
                    new: dict[tuple[str, str], int], score: float,
                    stale: Sequence[Entry] = ()) -> None:
        """Replace the request's ``vmpooler__odcreate__task`` members: each entry's member
        with count ``old[key]`` goes, one with ``new[key]`` comes (none for 0), all with
        ``score``, in one MULTI. For each of ``stale`` (after a restart) members of every
        count from 1 to its ``count`` go first. Other members are left alone."""
        remove = [odcreate_member(request_id, *key, n) for key, n in old.items()
                  if new.get(key, 0) != n]
        remove += [odcreate_member(request_id, e.alias, e.pool, n) for e in stale
                   for n in range(1, e.count + 1)]
        add = {odcreate_member(request_id, *key, n): score for key, n in new.items()
               if n > 0 and (stale or old.get(key, 0) != n)}
        if not remove and not add:
            return
        pipe = self.client.pipeline(transaction=True)
        if remove:
            pipe.zrem(schema.odcreate_task(), *remove)
        if add:
            pipe.zadd(schema.odcreate_task(), add)
        pipe.execute()

    def prune_tasks(self, keep: Collection[str]) -> int:
        """Remove the ``vmpooler__odcreate__task`` members of requests not in ``keep`` (ids
        of requests with a live actor), left by an actor that finished while Redis was away.
        Request ids hold no ``:``, so the id is what follows the last one. Returns how many."""
        members = text_list(self.client.zrange(schema.odcreate_task(), 0, -1))
        stale = [m for m in members if m.rsplit(":", 1)[-1] not in keep]
        if stale:
            self.client.zrem(schema.odcreate_task(), *stale)
        return len(stale)

    def ondemand_clones(self) -> int:
        """On-demand clones in flight (``tasks__ondemandclone``)."""
        return int(self.client.get(schema.tasks_ondemandclone()) or 0)

    def retire_pending(self, pool: str, vm: str) -> bool:
        """pending → completed (a finished request's VM still booting)."""
        return bool(self._run("RETIRE", [schema.pending(pool), schema.completed(pool)], [vm]))
