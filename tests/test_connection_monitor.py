"""The connection-pool monitor (reference §4.11) as the system wires it: every
``connection_pool_monitor_interval`` seconds (global, or the provider's own) each provider
actor emits its pool's gauges, tagged with the provider; ``connection_pool_monitor_enabled:
false`` stops the gauges, while the provider's state is still published for ``/status``."""

from __future__ import annotations

import random
from typing import Any

import redis

from tests.harness import context_for, make_config, pool, started
from vmpooler.actors.config import Config, ProviderConfig
from vmpooler.actors.storage import schema
from vmpooler.providers.base import ConnectionPoolHealth
from vmpooler.providers.dummy import DummyProvider


class PooledDummy(DummyProvider):
    """A dummy that reports a connection pool of 4 sessions, 3 of them lent out."""

    def connection_pool_health(self) -> ConnectionPoolHealth:
        return ConnectionPoolHealth(size=4, available=1, in_use=3, waiting=1)


def _system_config(provider_settings: dict[str, Any], **settings: Any) -> Config:
    base = make_config([pool("a", 0)], **settings)
    return Config(**{**{f: getattr(base, f) for f in base.__dataclass_fields__},
                     "providers": {"dummy": ProviderConfig("dummy", "dummy",
                                                           provider_settings)}})


def _provider(config: Config) -> PooledDummy:
    return PooledDummy(context_for(config), rng=random.Random(1), sleep=lambda _s: None)


def test_gauges_every_interval_tagged_with_the_provider(redis_client: redis.Redis) -> None:
    config = _system_config({}, connection_pool_monitor_interval=10)
    with started(redis_client, config, provider=_provider(config)) as h:
        h.quiesce()
        ticks = len(h.metrics.values("gauge", "connection_pool.available", provider="dummy"))
        h.advance(30, step=10)
        after = h.metrics.values("gauge", "connection_pool.available", provider="dummy")
        assert len(after) == ticks + 3
        assert h.metrics.last_gauge("connection_pool.in_use", provider="dummy") == 3
        assert h.metrics.last_gauge("connection_pool.utilization", provider="dummy") == 75
        assert h.metrics.last_gauge("connection_pool.waiting", provider="dummy") == 1
        assert h.metrics.counts("connection_pool.warning", provider="dummy") == ticks + 3
        assert h.metrics.last_gauge("circuit_breaker.state", provider="dummy") == 0


def test_a_providers_own_interval_wins(redis_client: redis.Redis) -> None:
    config = _system_config({"connection_pool_monitor_interval": 5},
                            connection_pool_monitor_interval=60)
    with started(redis_client, config, provider=_provider(config)) as h:
        h.quiesce()
        ticks = len(h.metrics.values("gauge", "connection_pool.available"))
        h.advance(30, step=5)
        assert len(h.metrics.values("gauge", "connection_pool.available")) == ticks + 6


def test_disabled_monitor_emits_no_gauges_but_still_publishes(
    redis_client: redis.Redis,
) -> None:
    config = _system_config({}, connection_pool_monitor_enabled=False,
                            connection_pool_monitor_interval=10)
    with started(redis_client, config, provider=_provider(config)) as h:
        h.advance(60, step=10)
        names = {name for _kind, name, _v, _t in h.metrics.records}
        assert not {n for n in names if n.startswith(("connection_pool.", "circuit_breaker."))}
        published = redis_client.hgetall(schema.provider_health("dummy"))
        assert published.get("circuit_breaker") == "closed"
        assert published.get("connections_in_use") == "3"
