"""What the loader needs of pools read back from Redis when the file has no ``:pools:``.

The reading itself is Redis work and lives in :mod:`vmpooler.actors.storage.published_pools`;
the loader is handed a :data:`PoolReader` by its caller (the command line), so the
configuration layer never imports the Redis layer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from vmpooler.actors.config.model import RedisSettings

__all__ = ["PoolReader", "PoolsFromRedis", "RedisPoolsError"]


class RedisPoolsError(Exception):
    """The pools could not be read; ``str()`` says which server and why."""


@dataclasses.dataclass(frozen=True)
class PoolsFromRedis:
    """The pool entries a Redis holds, in name order, and where they came from."""

    where: str
    """The server, as problems and notes name it: ``redis 10.0.0.5:6379/0``."""
    entries: list[dict[str, Any]]
    """One configuration entry per published pool (values as Redis holds them)."""
    keys: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Pool name → the hash it was read from, for problems that name it."""


PoolReader = Callable[[RedisSettings], PoolsFromRedis]
"""Reads the published pools of a configured Redis; raises :class:`RedisPoolsError`."""
