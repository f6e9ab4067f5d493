"""What the API knows of alias failover: the ``failover`` entry of ``/status`` pools, and
which backend pools of an alias cannot deliver now (for checkout and on-demand).

Only aliases that have a pool with ``failover: true`` are affected; for every other name
the API chooses exactly as vmpooler does. A backend of such an alias cannot deliver when
its own pool actor published itself ``down`` (``vmpooler__failover__<pool>``) or its
provider's circuit breaker was last published ``open`` (``vmpooler__provider__<name>``).
:class:`BackendHealth` reads both in one round trip and keeps the answer for ``ttl``
seconds per process, so a burst of checkouts costs one read. Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import redis

from vmpooler.actors.config import Config
from vmpooler.actors.runtime.clock import Clock
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.failover_store import FailoverStore, parse_state
from vmpooler.actors.storage.provider_store import ProviderStore

__all__ = ["BackendHealth", "failover_names", "failover_pools", "failover_section"]


def failover_pools(config: Config) -> list[str]:
    """The pools with ``failover: true``, in configuration order."""
    return [pool.name for pool in config.pools if pool.failover]


def failover_names(config: Config) -> frozenset[str]:
    """The names a client may ask for (pools and aliases) whose candidate pools include a
    pool with ``failover: true``."""
    opted = set(failover_pools(config))
    names: set[str] = set()
    for alias, pools in config.aliases.items():
        if opted & set(pools):
            names.add(alias)
            names.update(p for p in pools if p == alias)
    return frozenset(names)


def failover_section(pool: str, size: int, published: Mapping[str, str] | None,
                     ) -> dict[str, Any]:
    """One failover pool's ``failover`` entry of ``/status`` (ours): its ``state`` (``ok``,
    ``down``, ``recovering``, or ``unknown`` when no manager published it lately), why it
    is down (``reason``), since when (ISO 8601), its ``size`` and the ``effective`` size it
    keeps now, and ``covering``: sibling → VMs it holds for that sibling."""
    state = parse_state(pool, published or {})
    if state is None:
        return {"state": "unknown", "size": size, "effective": size, "covering": {}}
    return {
        "state": state.state,
        "reason": state.reason,
        "since": (timefmt.rfc3339(datetime.fromtimestamp(state.since, UTC))
                  if state.since else ""),
        "size": state.size,
        "effective": state.effective,
        "covering": dict(state.covering),
    }


class BackendHealth:
    """Which pools cannot deliver now, as their actors and providers published it."""

    def __init__(self, client: redis.Redis, clock: Clock, *, ttl: float = 1.0) -> None:
        self._failover = FailoverStore(client)
        self._providers = ProviderStore(client)
        self._clock = clock
        self._ttl = ttl
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, ...], tuple[float, frozenset[str]]] = {}

    def undeliverable(self, config: Config, pools: Sequence[str]) -> frozenset[str]:
        """The pools of ``pools`` that are published ``down`` or whose provider's breaker is
        published ``open``. Raises ``redis.RedisError`` when Redis cannot be read."""
        key = tuple(sorted(set(pools)))
        now = self._clock.monotonic()
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and now - cached[0] < self._ttl:
            return cached[1]
        providers: dict[str, str] = {}
        for pool in config.pools:
            if pool.name in key:
                providers.setdefault(pool.name, pool.provider)
        states = self._failover.read(key)
        health = self._providers.read_health(sorted(set(providers.values())))
        down = frozenset(
            pool for pool in key
            if (pool in states and states[pool].state == "down")
            or health.get(providers.get(pool, ""), {}).get("circuit_breaker") == "open")
        with self._lock:
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[key] = (now, down)
        return down
