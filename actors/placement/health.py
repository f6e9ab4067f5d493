"""Which pools can deliver now, as alias failover published it: the one reader of the
failover states (``vmpooler__failover__<pool>``) for the pool actors (their siblings'
states) and for placement (which backends of a failover alias to try last).

A pool with ``failover: true`` publishes its state every cycle behind its lease
(:mod:`vmpooler.actors.pool.failover_watch`); what was read of it is :class:`Published`:
a pool that published nothing (yet, or its manager is gone) counts as its configured self,
``ok``. :class:`BackendHealth` adds the providers' published circuit breakers and keeps the
answer for ``ttl`` seconds per process, so a burst of checkouts costs one read.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import redis

from vmpooler.actors.config import Config
from vmpooler.actors.placement.failover import Member, State
from vmpooler.actors.runtime.clock import Clock
from vmpooler.actors.storage.failover_store import FailoverState, FailoverStore
from vmpooler.actors.storage.provider_store import ProviderStore

__all__ = ["BackendHealth", "Published", "read_published"]


@dataclass(frozen=True, slots=True)
class Published:
    """The failover states read back, by pool (a pool without one left out)."""

    states: Mapping[str, FailoverState] = field(default_factory=dict)

    def member(self, configured: Member) -> Member:
        """``configured`` as its pool published itself: its state, size in effect and ready
        VMs; ``configured`` unchanged when it published nothing."""
        state = self.states.get(configured.name)
        if state is None:
            return configured
        return Member(name=configured.name, size=state.size, aliases=configured.aliases,
                      state=State(state.state), ready=state.ready, weight=configured.weight,
                      ceiling=configured.ceiling)

    def down(self, pool: str) -> bool:
        """True when ``pool`` published itself ``down``."""
        state = self.states.get(pool)
        return state is not None and state.state == State.DOWN.value


def read_published(store: FailoverStore, pools: Iterable[str]) -> Published:
    """The published states of ``pools`` (one round trip; none for no pool). Raises
    ``redis.RedisError`` when Redis cannot be read."""
    return Published(store.read(pools))


class BackendHealth:
    """Which pools cannot deliver now, as their actors and providers published it.
    Thread-safe."""

    def __init__(self, client: redis.Redis, clock: Clock, *, ttl: float = 1.0) -> None:
        self._failover = FailoverStore(client)
        self._providers = ProviderStore(client)
        self._clock = clock
        self._ttl = ttl
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, ...], tuple[float, frozenset[str]]] = {}

    def undeliverable(self, config: Config, pools: Sequence[str]) -> frozenset[str]:
        """The pools of ``pools`` that are published ``down`` or whose provider's breaker is
        published ``open`` (two pipelined reads, then cached ``ttl`` seconds for that set of
        pools). Raises ``redis.RedisError`` when Redis cannot be read."""
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
        published = read_published(self._failover, key)
        health = self._providers.read_health(sorted(set(providers.values())))
        down = frozenset(
            pool for pool in key
            if published.down(pool)
            or health.get(providers.get(pool, ""), {}).get("circuit_breaker") == "open")
        with self._lock:
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[key] = (now, down)
        return down
