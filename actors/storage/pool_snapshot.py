"""One pool's queues, and when asked its override keys and flags, in one round trip.

A pool actor reads its six queue sets every cycle. The keys that change its size, template,
clone target or reset it (written by the API — ours or vmpooler's — or by hand) and the two
flags the manager writes itself are read only when the actor asks for them
(:func:`read_snapshot`'s ``overrides`` and ``flags``), which it does on its first cycle, when
told of a change and periodically as a safety net (docs/architecture.md, "A pool cycle").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.redis_errors import WrongTypeKeys, tolerant_results

__all__ = ["PoolFlags", "PoolOverrides", "PoolSnapshot", "read_snapshot", "read_vm_fields"]


@dataclass(frozen=True, slots=True)
class PoolOverrides:
    """What others write to change one pool, raw as Redis holds it: the ``vmpooler__config__``
    overrides (None: none), and whether the pool is in ``vmpooler__poolreset`` and in the
    two undo-override sets."""

    size: str | None = None
    template: str | None = None
    clone_target: str | None = None
    reset_requested: bool = False
    undo_size: bool = False
    undo_template: bool = False


@dataclass(frozen=True, slots=True)
class PoolFlags:
    """What the manager itself writes about one pool: ``vmpooler__template__prepared[pool]``
    and whether ``vmpooler__empty__<pool>`` exists."""

    prepared_template: str | None = None
    empty: bool = False


@dataclass(frozen=True, slots=True)
class PoolSnapshot:
    """One pool's queues, read in a single round trip with whatever else was asked for
    (``overrides``/``flags`` are None when they were not read)."""

    pending: frozenset[str]
    ready: frozenset[str]
    running: frozenset[str]
    completed: frozenset[str]
    discovered: frozenset[str]
    migrating: frozenset[str]
    overrides: PoolOverrides | None = None
    flags: PoolFlags | None = None
    standby: frozenset[str] = frozenset()  # the standby tier (ours): no queue of vmpooler's

    # The overrides and flags one by one (None or False when they were not read).
    @property
    def size_override(self) -> str | None:
        """``vmpooler__config__poolsize[pool]``, raw."""
        return self.overrides.size if self.overrides else None

    @property
    def template_override(self) -> str | None:
        """``vmpooler__config__template[pool]``."""
        return self.overrides.template if self.overrides else None

    @property
    def clone_target_override(self) -> str | None:
        """``vmpooler__config__clone_target[pool]``."""
        return self.overrides.clone_target if self.overrides else None

    @property
    def reset_requested(self) -> bool:
        """Whether the pool is in ``vmpooler__poolreset``."""
        return bool(self.overrides and self.overrides.reset_requested)

    @property
    def undo_size(self) -> bool:
        """Whether the pool is in ``vmpooler__pool__undo_size_override``."""
        return bool(self.overrides and self.overrides.undo_size)

    @property
    def undo_template(self) -> bool:
        """Whether the pool is in ``vmpooler__pool__undo_template_override``."""
        return bool(self.overrides and self.overrides.undo_template)

    @property
    def prepared_template(self) -> str | None:
        """``vmpooler__template__prepared[pool]``."""
        return self.flags.prepared_template if self.flags else None

    @property
    def empty_flag(self) -> bool:
        """Whether ``vmpooler__empty__<pool>`` exists."""
        return bool(self.flags and self.flags.empty)

    def queue_of(self, vm: str) -> str | None:
        """The first queue holding ``vm``, or None."""
        for name in ("pending", "ready", "running", "completed", "discovered"):
            if vm in getattr(self, name):
                return name
        return None


def read_snapshot(client: redis.Redis, pool: str, *, overrides: bool = True,
                  flags: bool = True) -> PoolSnapshot:
    """The pool's six queue sets and its standby set (seven ``SMEMBERS``) in one pipelined
    round trip, with:

    * ``overrides``: three ``HGET`` of the override hashes and one ``SUNION`` of the reset
      and undo sets (almost always empty); only when the pool is in that union, a second
      round trip of three ``SISMEMBER`` tells which;
    * ``flags``: ``HGET`` of the prepared template and ``EXISTS`` of the empty flag.

    May raise ``redis.RedisError``.
    """
    marks = (schema.poolreset(), schema.undo_size_override(), schema.undo_template_override())
    pipe = client.pipeline(transaction=False)
    for key in (
        schema.pending(pool), schema.ready(pool), schema.running(pool),
        schema.completed(pool), schema.discovered(pool), schema.migrating(pool),
        schema.standby(pool),
    ):
        pipe.smembers(key)
    if overrides:
        pipe.hget(schema.config_poolsize(), pool)
        pipe.hget(schema.config_template(), pool)
        pipe.hget(schema.config_clone_target(), pool)
        pipe.sunion(list(marks))
    if flags:
        pipe.hget(schema.template_prepared(), pool)
        pipe.exists(schema.empty(pool))
    r = pipe.execute()
    read_overrides = read_flags = None
    rest = r[7:]
    if overrides:
        size, template, target, marked = rest[:4]
        rest = rest[4:]
        reset = undo_size = undo_template = False
        if pool in marked:
            pipe = client.pipeline(transaction=False)
            for key in marks:
                pipe.sismember(key, pool)
            reset, undo_size, undo_template = (bool(v) for v in pipe.execute())
        read_overrides = PoolOverrides(size, template, target, reset, undo_size, undo_template)
    if flags:
        read_flags = PoolFlags(prepared_template=rest[0], empty=bool(rest[1]))
    return PoolSnapshot(
        pending=frozenset(r[0]), ready=frozenset(r[1]), running=frozenset(r[2]),
        completed=frozenset(r[3]), discovered=frozenset(r[4]), migrating=frozenset(r[5]),
        overrides=read_overrides, flags=read_flags, standby=frozenset(r[6]),
    )


def read_vm_fields(
    client: redis.Redis, vms: Iterable[str], fields: Sequence[str], *,
    seen: WrongTypeKeys | None = None,
) -> dict[str, list[str | None]]:
    """HMGET ``fields`` of each VM's hash in one pipelined round trip (none for no VM).

    A VM whose key holds something else than a hash reads as a VM without these fields; the
    key is logged through ``seen`` (once per key; every time without ``seen``)."""
    names = list(vms)
    if not names:
        return {}
    pipe = client.pipeline(transaction=False)
    keys = [schema.vm(name) for name in names]
    for key in keys:
        pipe.hmget(key, list(fields))
    replies = tolerant_results(pipe, keys, "hash", seen or WrongTypeKeys("vm fields"))
    blank: list[str | None] = [None] * len(fields)
    return {name: list(reply) if reply is not None else list(blank)
            for name, reply in zip(names, replies, strict=True)}
