"""Redis operations of the REST API's ``/vm`` endpoints: checkout, return, reads, tasks.

Every write that could race with the manager or another API process is one Lua script of
:class:`vmpooler.actors.storage.schema.CheckoutScripts`; key names come from
:mod:`vmpooler.actors.storage.schema`.
What callers may rely on:

* :meth:`CheckoutStore.checkout` is one round trip (EVALSHA) and all-or-nothing: either
  every unit got a VM and every VM is fully accounted for (running, migrating, active,
  ``checkout`` and owner fields), or no VM left its ready queue;
* :meth:`CheckoutStore.return_vm` never leaves a VM in two queues;
* every method is thread-safe (the client's connection pool is) and may raise
  ``redis.RedisError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from vmpooler.actors.fairness.quota import QuotaRefusal, QuotaTicket
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.redis_errors import WrongTypeKeys, is_wrong_type, tolerant_results
from vmpooler.actors.storage.replies import text_dict
from vmpooler.actors.storage.schema import CheckoutScripts, UserQuotaScripts
from vmpooler.actors.storage.store import read_vm_fields
from vmpooler.actors.storage.user_quota import ticket_keys

__all__ = ["CheckoutOutcome", "CheckoutStore", "ModifyOutcome", "ReturnOutcome", "Taken"]

_TASK_KEYS = {
    "disk": schema.tasks_disk,
    "snapshot": schema.tasks_snapshot,
    "snapshot-revert": schema.tasks_snapshot_revert,
}


@dataclass(frozen=True, slots=True)
class Taken:
    """One VM handed out: the pool it came from and its name."""

    pool: str
    vm: str


@dataclass(frozen=True, slots=True)
class CheckoutOutcome:
    """What :meth:`CheckoutStore.checkout` did.

    ``ok``: every unit got a VM, listed in ``taken`` in unit order. ``bad_token``: the owner
    token does not exist and nothing was written. Otherwise ``failed_unit`` is the index of
    the first unit that found no VM and nothing was taken, or ``refused`` says which quota
    refused it (nothing was taken).
    """

    ok: bool
    taken: tuple[Taken, ...] = ()
    failed_unit: int | None = None
    bad_token: bool = False
    refused: QuotaRefusal | None = None


@dataclass(frozen=True, slots=True)
class ModifyOutcome:
    """What :meth:`CheckoutStore.modify_vm` did: ``ok`` written; else ``exists`` False when
    the VM is gone, or the tag cap refused it: the VM carries ``tags`` tags and the request
    named ``new_tags`` it does not carry yet."""

    ok: bool
    exists: bool
    tags: int = 0
    new_tags: int = 0


class ReturnOutcome:
    """Codes of :meth:`CheckoutStore.return_vm`."""

    NOT_RETURNABLE = 0
    FROM_RUNNING = 1
    FROM_READY = 2
    ALREADY_COMPLETED = 3


@dataclass(slots=True)
class _Encoding:
    """Pool indexes (1-based) and KEYS of one checkout call."""

    index: dict[str, int] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)

    def of(self, pool: str) -> int:
        if pool not in self.index:
            self.index[pool] = len(self.index) + 1
            self.keys += [schema.ready(pool), schema.running(pool), schema.completed(pool),
                          schema.migrating(pool), schema.active(pool)]
        return self.index[pool]


class CheckoutStore:
    """The API's view of vmpooler's schema. Create one per Redis client and share it."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._scripts = {
            name: client.register_script(getattr(CheckoutScripts, name))
            for name in ("CHECKOUT", "TOUCH_TOKEN", "RETURN_VM", "MODIFY_VM")
        }
        self._scripts["CHECKOUT_WITHIN_QUOTA"] = client.register_script(
            UserQuotaScripts.CHECKOUT_WITHIN_QUOTA)
        self.wrong_type = WrongTypeKeys("api")

    def _run(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return self._scripts[script](keys=list(keys), args=list(args))

    # -- checkout ---------------------------------------------------------------------------
    def checkout(
        self,
        units: Sequence[Sequence[str]],
        *,
        now: str,
        token: str | None = None,
        lifetime: int | None = None,
        epoch: float | None = None,
        quota: QuotaTicket | None = None,
        client: str | None = None,
    ) -> CheckoutOutcome:
        """Take one ready VM per unit, all or nothing, in one round trip.

        Each unit lists candidate pools in preference order; the first with a ready VM
        serves it. With ``token``, the token must exist (else ``bad_token``, nothing
        written); its ``last`` becomes ``now`` and every VM gets ``token:token`` and
        ``token:user``. ``lifetime`` (hours) is written to every VM when given.
        With ``epoch`` (``now`` as epoch seconds), the checkout is logged in the same step:
        each VM handed out in its pool's :func:`~vmpooler.actors.storage.schema.demand`; a
        checkout that found none as one miss per distinct pool its units name first, in
        :func:`~vmpooler.actors.storage.schema.demand_misses`. With ``client`` (the client's
        address), the requester (the token's user, else ``client``) logs at most
        :data:`~vmpooler.actors.storage.schema.DEMAND_MISS_BUDGET` misses per pool per
        :data:`~vmpooler.actors.storage.schema.DEMAND_MISS_WINDOW` seconds; without it the
        misses are not bounded per requester.
        With ``quota`` (``:quotas:`` configured), the VMs join the user's held set in the
        same step, and a checkout that would take the user over ``quota.limits.vms_held``
        is ``refused`` before any VM is taken (after the token check).
        An empty ``units`` succeeds without touching Redis.
        """
        if not units:
            return CheckoutOutcome(ok=True)
        enc = _Encoding()
        plan: list[Any] = []
        for unit in units:
            pools = [enc.of(pool) for pool in dict.fromkeys(unit)]
            plan += [len(pools), *pools]
        token_key = schema.token(token) if token else schema.token("")
        args = [now, schema.vm(""), token or "", "" if lifetime is None else int(lifetime),
                "" if epoch is None else f"{epoch:.3f}", schema.DEMAND_RETENTION,
                schema.DEMAND_MAX, schema.DEMAND_MISSES_MAX, client or "",
                schema.DEMAND_MISS_BUDGET, schema.DEMAND_MISS_WINDOW, len(units), *plan]
        if quota is None:
            reply = self._run("CHECKOUT", [token_key, *enc.keys], args)
        else:
            held = quota.limits.vms_held
            reply = self._run("CHECKOUT_WITHIN_QUOTA", [token_key, *enc.keys, *ticket_keys(quota)],
                              [*args, quota.user, "" if held is None else held,
                               quota.index_text, schema.odrequest("")])
        code = int(reply[0])
        if code == -1:
            return CheckoutOutcome(ok=False, bad_token=True)
        if code == -2:
            return CheckoutOutcome(ok=False, refused=QuotaRefusal(
                "vms_held", int(reply[1]), int(reply[2])))
        if code == 0:
            return CheckoutOutcome(ok=False, failed_unit=int(reply[1]) - 1)
        names = {i: pool for pool, i in enc.index.items()}
        taken = tuple(Taken(names[int(reply[i])], str(reply[i + 1]))
                      for i in range(1, len(reply), 2))
        return CheckoutOutcome(ok=True, taken=taken)

    def touch_token(self, token: str, *, now: str) -> str | None:
        """If the token exists, record ``last`` = ``now`` and return its user ('' if none);
        None when it does not exist (nothing written)."""
        reply = self._run("TOUCH_TOKEN", [schema.token(token)], [now])
        return str(reply[1]) if int(reply[0]) == 1 else None

    # -- return, modify, tasks ----------------------------------------------------------------
    def return_vm(self, pool: str, vm: str) -> int:
        """Move a VM from running (or ready) to completed; a :class:`ReturnOutcome` code."""
        return int(self._run(
            "RETURN_VM",
            [schema.running(pool), schema.ready(pool), schema.completed(pool),
             schema.active(pool), schema.migrating(pool)],
            [vm],
        ))

    def modify_vm(
        self, vm: str, *, date: str, lifetime: int | None = None,
        tags: Mapping[str, str] | None = None, max_tags: int, stats_ttl: int = 0,
    ) -> ModifyOutcome:
        """Write ``lifetime`` and tags (also into the day's tag statistics, which then expire
        ``stats_ttl`` seconds later; 0 keeps them) in one script, if the VM hash still exists
        and the VM then carries at most ``max_tags`` tags. Nothing is written unless ``ok``."""
        pairs = [part for item in (tags or {}).items() for part in item]
        reply = self._run(
            "MODIFY_VM", [schema.vm(vm), schema.tag_stats(date)],
            [vm, "" if lifetime is None else int(lifetime), max(0, int(stats_ttl)),
             int(max_tags), *pairs],
        )
        code = int(reply[0])
        if code == -1:
            return ModifyOutcome(ok=False, exists=True, tags=int(reply[1]), new_tags=int(reply[2]))
        return ModifyOutcome(ok=code == 1, exists=code == 1)

    def queue_task(self, kind: str, member: str) -> None:
        """SADD ``member`` to the ``disk``, ``snapshot`` or ``snapshot-revert`` task set."""
        self.client.sadd(_TASK_KEYS[kind](), member)

    # -- reads ------------------------------------------------------------------------------
    def tier_sizes(self, pools: Sequence[str]) -> dict[str, tuple[int, int]]:
        """How many ready and standby VMs each of ``pools`` has now, in one round trip
        (pipelined ``SCARD``s, no transaction)."""
        with self.client.pipeline(transaction=False) as pipe:
            for pool in pools:
                pipe.scard(schema.ready(pool))
                pipe.scard(schema.standby(pool))
            sizes = pipe.execute()
        return {pool: (int(sizes[2 * i]), int(sizes[2 * i + 1]))
                for i, pool in enumerate(pools)}

    def vm_hash(self, vm: str) -> dict[str, str]:
        """All fields of the VM's hash, in Redis order ({} when it does not exist, or when
        its key holds something else than a hash)."""
        key = schema.vm(vm)
        try:
            return dict(text_dict(self.client.hgetall(key)))
        except redis.ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            self.wrong_type.report(key, "hash")
            return {}

    def vm_probe(self, vm: str, fields: Sequence[str]) -> tuple[bool, list[str | None]]:
        """Whether the VM's hash exists, and the given fields, in one round trip (a key that
        holds something else than a hash is no VM)."""
        key = schema.vm(vm)
        pipe = self.client.pipeline(transaction=False)
        pipe.exists(key)
        pipe.hmget(key, list(fields))
        exists, values = tolerant_results(pipe, [key, key], "hash", self.wrong_type)
        if values is None:
            return False, [None] * len(fields)
        return bool(exists), list(values)

    def vm_fields(self, vms: Iterable[str], fields: Sequence[str]) -> dict[str, list[str | None]]:
        """HMGET ``fields`` of each VM's hash, pipelined (a key of the wrong type reads as a
        VM without these fields)."""
        return read_vm_fields(self.client, vms, fields, seen=self.wrong_type)
