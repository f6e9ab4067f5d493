"""The API's side of pool overrides in Redis: size, template and clone target (reference §2.1).

vmpooler's API kept the overrides in its own memory and wrote them through to Redis; we keep
no copy (several API workers share one Redis), so every read here goes to Redis and every
write is one pipelined transaction. The manager applies what is written here: a pool actor
reads the same keys (:func:`~vmpooler.actors.storage.pool_snapshot.read_snapshot`) on the cycle
after it is told of a change — so every write here must be followed by the API's
``pool_changed`` — and periodically as a safety net, and acknowledges the undo and reset sets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

import redis

from vmpooler.actors.config import PoolConfig
from vmpooler.actors.config.overrides import effective_size, ruby_integer
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.replies import fields

__all__ = ["ConfigStore", "OverrideKind", "Overrides", "ruby_integer"]

OverrideKind = Literal["size", "template", "clone_target"]
"""Which override: ``vmpooler__config__poolsize``, ``__template`` or ``__clone_target``."""

_HASHES: Mapping[str, Callable[[], str]] = MappingProxyType({
    "size": schema.config_poolsize,
    "template": schema.config_template,
    "clone_target": schema.config_clone_target,
})
_UNDO: Mapping[str, Callable[[], str]] = MappingProxyType({
    "size": schema.undo_size_override,
    "template": schema.undo_template_override,
})

def _empty() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Overrides:
    """Every pool's overrides as Redis holds them now (raw strings), and the template each
    pool last prepared (``vmpooler__template__prepared``)."""

    sizes: Mapping[str, str] = field(default_factory=_empty)
    templates: Mapping[str, str] = field(default_factory=_empty)
    clone_targets: Mapping[str, str] = field(default_factory=_empty)
    prepared: Mapping[str, str] = field(default_factory=_empty)

    def of(self, kind: OverrideKind) -> Mapping[str, str]:
        """The override hash of ``kind``."""
        if kind == "size":
            return self.sizes
        if kind == "template":
            return self.templates
        return self.clone_targets

    def size_of(self, pool: PoolConfig, limit: int | None = None) -> int:
        """The pool's size in effect: a valid override, else the configured size; at most
        ``limit`` (the pool's ``max_pool_size``) when given."""
        return effective_size(pool.size, self.sizes.get(pool.name), limit)

    def template_of(self, pool: PoolConfig) -> str:
        """The pool's template in effect: the override, else the configured template."""
        return self.templates.get(pool.name) or pool.template

    def clone_target_of(self, pool: PoolConfig) -> str | None:
        """The pool's clone target in effect: the override, else the configured one."""
        return self.clone_targets.get(pool.name) or pool.clone_target


class ConfigStore:
    """Reads and writes of the override hashes, the undo sets and the reset set.

    Every method raises ``redis.RedisError`` when Redis cannot be reached.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def overrides(self) -> Overrides:
        """All three override hashes and the prepared templates, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for kind in ("size", "template", "clone_target"):
            pipe.hgetall(_HASHES[kind]())
        pipe.hgetall(schema.template_prepared())
        sizes, templates, targets, prepared = (
            MappingProxyType(dict(r)) for r in pipe.execute())
        return Overrides(sizes, templates, targets, prepared)

    def set_overrides(self, kind: OverrideKind, values: Mapping[str, str]) -> None:
        """HSET ``pool → value`` for every entry of ``values`` (nothing if empty)."""
        if values:
            self.client.hset(_HASHES[kind](), mapping=fields(values))

    def remove_override(self, kind: OverrideKind, pool: str, *, undo: bool) -> None:
        """HDEL the pool's override; with ``undo``, SADD it to the kind's undo set too, so
        the manager restores the configured value (size and template only)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hdel(_HASHES[kind](), pool)
        if undo and kind in _UNDO:
            pipe.sadd(_UNDO[kind](), pool)
        pipe.execute()

    def request_reset(self, pools: Iterable[str]) -> None:
        """SADD each pool to ``vmpooler__poolreset``: the manager drains and refills it."""
        names = list(pools)
        if names:
            self.client.sadd(schema.poolreset(), *names)
