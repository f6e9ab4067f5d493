"""Who wrote a ready VM's ``check`` stamp: ours name themselves in ``check_by``.

vmpooler's manager (Ruby) stamps ``check`` (Ruby ``Time#to_s``) on each ready VM it checks,
every ``vm_checktime`` minutes (reference §4.4). Ours writes the same field, and beside it, in
the same HSET (or the same fenced script call), ``check_by`` = ``"<manager id> <check
value>"``. A ``check`` whose value is not the one ``check_by`` names was therefore written by
someone else: a Ruby manager, or one of ours older than this field. ``check_by`` is an extra
hash field that nothing of vmpooler reads (its API shows only the fields it knows).

What callers may rely on: :func:`stamp_fields` gives the two fields to write together;
:func:`written_by_us` never raises; :func:`read_ready_stamps` reads every ready VM of the
given pools in two pipelined round trips (the ready sets, then the VMs' two fields) and
raises only ``redis.RedisError``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.pool_snapshot import read_vm_fields
from vmpooler.actors.storage.redis_errors import WrongTypeKeys

__all__ = ["CHECK", "CHECK_BY", "CheckStamp", "read_ready_stamps", "stamp_fields",
           "stamp_writer", "written_by_us"]

CHECK = "check"
"""vmpooler's field: when the VM was last checked in ready."""

CHECK_BY = "check_by"
"""Ours: ``"<manager id> <check value>"``, written with ``check``."""


def stamp_fields(manager: str, value: str) -> dict[str, str]:
    """The fields of one check stamp by ``manager`` (a manager id has no space)."""
    return {CHECK: value, CHECK_BY: f"{manager} {value}"}


def written_by_us(check: str | None, check_by: str | None) -> bool:
    """Whether ``check`` is the value one of our managers wrote last (``check_by`` names
    it). False when either is missing or they disagree: someone else wrote ``check`` since."""
    if check is None or not check_by:
        return False
    _, sep, value = check_by.partition(" ")
    return bool(sep) and value == check


def stamp_writer(check_by: str | None) -> str | None:
    """The manager id ``check_by`` names, or None."""
    if not check_by or " " not in check_by:
        return None
    return check_by.partition(" ")[0]


@dataclass(frozen=True, slots=True)
class CheckStamp:
    """One ready VM's ``check`` and ``check_by`` fields (None when absent)."""

    pool: str
    vm: str
    check: str | None
    check_by: str | None

    @property
    def ours(self) -> bool:
        """Whether one of our managers wrote the current ``check``."""
        return written_by_us(self.check, self.check_by)


def read_ready_stamps(client: redis.Redis, pools: Iterable[str], *,
                      seen: WrongTypeKeys | None = None) -> list[CheckStamp]:
    """Every ready VM of ``pools`` with its two stamp fields, pools in the order given (a VM
    key of the wrong type reads as a VM without them, logged through ``seen``)."""
    names = list(dict.fromkeys(pools))
    if not names:
        return []
    pipe = client.pipeline(transaction=False)
    for pool in names:
        pipe.smembers(schema.ready(pool))
    members = [(pool, sorted(vms)) for pool, vms in zip(names, pipe.execute(), strict=True)]
    pairs = [(pool, vm) for pool, vms in members for vm in vms]
    fields = read_vm_fields(client, [vm for _, vm in pairs], [CHECK, CHECK_BY], seen=seen)
    return [CheckStamp(pool, vm, *fields[vm]) for pool, vm in pairs]
