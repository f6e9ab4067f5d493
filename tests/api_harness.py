"""Helpers for API tests: an app over the session's real redis-server on a fake clock.

``api(redis_client, config)`` gives a Falcon ``TestClient`` plus the context, so a test can
seed Redis the way vmpooler's own specs do and call endpoints in-process. HTTP tests through
a real gunicorn live in their own modules.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import falcon.testing
import redis

from vmpooler.actors.config import (
    Config,
    DnsConfig,
    GlobalSettings,
    PoolConfig,
    ProviderConfig,
    RedisSettings,
)
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.storage import schema, timefmt
from vmpooler.web.api_context import ApiContext
from vmpooler.web.app import create_app

TOKEN = "abcdefghijklmnopqrstuvwxyz012345"
USER = "jdoe"


@dataclass
class RecordingCommands:
    """Commands that remember what they were told."""

    sent: list[tuple[str, ...]] = field(default_factory=list)

    def pool_changed(self, pool: str, reason: str) -> None:
        self.sent.append(("pool_changed", pool, reason))

    def tasks_queued(self) -> None:
        self.sent.append(("tasks_queued",))

    def request_changed(self, request_id: str, reason: str) -> None:
        self.sent.append(("request_changed", request_id, reason))


def api_pool(name: str, size: int = 1, *, domain: str | None = None,
             alias: tuple[str, ...] = (), **extra: Any) -> PoolConfig:
    raw: dict[str, Any] = {"name": name, "size": size, "template": extra.pop(
        "template", f"templates/{name}"), "alias": list(alias)}
    dns = "dns" if domain else None
    return PoolConfig(name=name, size=size, template=raw["template"], ready_ttl=60,
                      alias=alias, dns_plugin=dns, domain=domain, raw=raw, **extra)


def api_config(pools: list[PoolConfig], *, auth: bool = False, **settings: Any) -> Config:
    """A configuration with ``pools``; ``auth=True`` configures the dummy auth provider."""
    return Config(
        source="test", settings=GlobalSettings(**settings), redis=RedisSettings(server="x"),
        pools=tuple(pools),
        providers={"dummy": ProviderConfig(name="dummy", provider_class="dummy", settings={})},
        dns_configs={"dns": DnsConfig(name="dns", dns_class="dynamic-dns",
                                      domain="example.com")},
        auth={"provider": "dummy"} if auth else None,
    )


@dataclass
class Api:
    client: falcon.testing.TestClient
    ctx: ApiContext
    redis: redis.Redis
    clock: FakeClock
    commands: RecordingCommands
    metrics: RecordingMetrics

    def add_token(self, token: str = TOKEN, user: str = USER) -> None:
        self.redis.hset(schema.token(token), mapping={
            "user": user, "created": timefmt.format_epoch(self.clock.now())})

    def add_vm(self, pool: str, vm: str, queue: str = "ready", **fields: str) -> None:
        """Seed a VM the way vmpooler's specs do."""
        self.redis.sadd(getattr(schema, queue)(pool), vm)
        self.redis.hset(schema.vm(vm), mapping={"template": pool, **fields})


def api(redis_client: redis.Redis, config: Config, *, seed: int = 1) -> Api:
    clock = FakeClock()
    commands = RecordingCommands()
    metrics = RecordingMetrics()
    ctx = ApiContext(config=config, redis=redis_client, commands=commands, clock=clock,
                     metrics=metrics, rng=random.Random(seed), started_at=clock.now())
    return Api(falcon.testing.TestClient(create_app(ctx)), ctx, redis_client, clock, commands,
               metrics)
