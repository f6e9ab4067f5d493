"""Pools read back from Redis when the configuration file has no ``:pools:`` section.

The loader (:mod:`vmpooler.actors.config.loader`) is handed :func:`redis_pool_reader`.

vmpooler's loader does the same (``load_pools_from_redis``): the members of
``vmpooler__pools`` and each one's ``vmpooler__pool__<name>`` hash, as a manager published
them, become the pool entries. Values are strings there (``size`` ``"5"``, ``alias``
``"a,b"``); the validator parses them as it parses the file. Unlike vmpooler, a pool hash
without ``alias`` is no crash, and the published ``domain`` (derived, not configuration) is
dropped so the pool's ``dns_plugin`` decides it again.
"""

from __future__ import annotations

from typing import Any

import redis

from vmpooler.actors.config.model import RedisSettings
from vmpooler.actors.config.redis_pools import PoolsFromRedis, RedisPoolsError
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.connection import connect_configured, describe

__all__ = ["read_pools", "redis_pool_reader"]

_DERIVED = ("domain",)


def read_pools(client: redis.Redis) -> list[dict[str, Any]]:
    """The published pools of ``client``'s Redis as configuration entries, sorted by name.

    A member of ``vmpooler__pools`` without a hash becomes ``{"name": member}`` (the
    validator then names its missing keys); ``alias`` is split on commas, blanks dropped.
    """
    names = sorted(_text(name) for name in client.smembers(schema.pools()))
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(schema.pool_hash(name))
    entries: list[dict[str, Any]] = []
    for name, fields in zip(names, pipe.execute(), strict=True):
        entry: dict[str, Any] = {_text(k): _text(v) for k, v in fields.items()}
        for key in _DERIVED:
            entry.pop(key, None)
        entry["name"] = name
        if "alias" in entry:
            aliases = [a.strip() for a in entry["alias"].split(",") if a.strip()]
            if aliases:
                entry["alias"] = aliases
            else:
                del entry["alias"]
        entries.append(entry)
    return entries


def redis_pool_reader(settings: RedisSettings) -> PoolsFromRedis:
    """:data:`~vmpooler.actors.config.redis_pools.PoolReader` for a configured (not
    embedded) Redis server: connects, reads, disconnects. An embedded Redis gives no pools
    (none is running while configuring)."""
    where = f"redis {describe(settings)}"
    if settings.embedded:
        return PoolsFromRedis(where, [])
    client = connect_configured(settings, pool_size=2, reconnect_attempts=1)
    try:
        entries = read_pools(client)
        return PoolsFromRedis(where, entries,
                              {e["name"]: schema.pool_hash(e["name"]) for e in entries})
    except redis.RedisError as exc:
        raise RedisPoolsError(
            f"redis {describe(settings)}: cannot read the pools "
            f"({schema.pools()}): {exc}") from None
    finally:
        client.close()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
