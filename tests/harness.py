"""Helpers for driving the actor system in tests: configs, a started system, waiting.

Tests never sleep: :func:`wait_until` blocks on a condition with a deadline (the actors run
on their own threads), and time-dependent behaviour is driven with :class:`FakeClock`.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pykka
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
from vmpooler.actors.pool.hostnames import HostnameGenerator
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.storage import schema
from vmpooler.actors.system import PoolerSystem
from vmpooler.providers.base import Provider, ProviderContext
from vmpooler.providers.dummy import DummyProvider

QUEUES = ("pending", "ready", "running", "completed", "discovered")


def pool(name: str, size: int, **extra: Any) -> PoolConfig:
    """A pool of the dummy provider in domain ``example.test``."""
    raw = {"name": name, "size": size, "template": extra.pop("template", f"tpl-{name}")}
    return PoolConfig(name=name, size=size, template=raw["template"], ready_ttl=extra.pop(
        "ready_ttl", 60), provider="dummy", dns_plugin="dyn", domain="example.test",
        raw=raw, **extra)


def make_config(pools: list[PoolConfig], **settings: Any) -> Config:
    """A configuration with ``pools``, the dummy provider and ``settings`` for ``:config:``."""
    settings.setdefault("check_loop_delay_min", 5)
    settings.setdefault("check_loop_delay_max", 60)
    return Config(
        source="test",
        settings=GlobalSettings(**settings),
        redis=RedisSettings(server="127.0.0.1"),
        pools=tuple(pools),
        providers={"dummy": ProviderConfig(name="dummy", provider_class="dummy", settings={})},
        dns_configs={"dyn": DnsConfig(name="dyn", dns_class="dynamic-dns",
                                      domain="example.test")},
    )


def dummy_for(config: Config, seed: int = 1, **knobs: Any) -> DummyProvider:
    """A dummy provider for every pool of ``config``; it never sleeps."""
    return DummyProvider(context_for(config, knobs), rng=random.Random(seed),
                         sleep=lambda _s: None)


def context_for(config: Config, settings: Mapping[str, Any] | None = None) -> ProviderContext:
    return ProviderContext(
        name="dummy", settings=dict(settings or {}),
        pools={p.name: dict(p.raw) for p in config.pools},
        global_settings={}, dns_domains={p.name: p.domain for p in config.pools},
    )


def wait_until(condition: Callable[[], Any], timeout: float = 10.0, what: str = "", *,
               every: float = 0.005, explain: Callable[[], str] = lambda: "") -> Any:
    """Return ``condition()``'s first truthy value, asked every ``every`` s; fail if none
    comes within ``timeout`` s, saying ``what`` and ``explain()`` (say, a process's log)."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}"
                                 + (f"\n{detail}" if (detail := explain()) else ""))
        pause.wait(every)


def queue_members(client: redis.Redis, pool_name: str) -> dict[str, set[str]]:
    return {q: set(client.smembers(getattr(schema, q)(pool_name))) for q in QUEUES}


def assert_no_vm_in_two_queues(client: redis.Redis, pool_name: str) -> None:
    seen: dict[str, str] = {}
    for queue, members in queue_members(client, pool_name).items():
        for vm in members:
            assert vm not in seen, f"{vm} is in both {seen[vm]} and {queue}"
            seen[vm] = queue


class Harness:
    """A started system on a fake clock with recording metrics."""

    def __init__(self, system: PoolerSystem, clock: FakeClock, metrics: RecordingMetrics,
                 provider: Provider, client: redis.Redis) -> None:
        self.system, self.clock, self.metrics = system, clock, metrics
        self.provider, self.client = provider, client

    def sizes(self, pool_name: str) -> dict[str, int]:
        return {q: len(m) for q, m in queue_members(self.client, pool_name).items()}

    def wait_full(self, pool_name: str, size: int, timeout: float = 10.0) -> set[str]:
        def full() -> bool:
            s = self.sizes(pool_name)
            return s["ready"] == size and s["pending"] == 0
        wait_until(full, timeout, f"{pool_name} to hold {size} ready VMs")
        return set(self.client.smembers(schema.ready(pool_name)))

    def quiesce(self) -> None:
        """Wait until every actor has handled its mail and no provider call is running."""
        def idle() -> bool:
            for name in self.system.directory.names():
                ref = self.system.actor_ref(name)
                if ref is None:
                    continue
                try:
                    ref.ask("ping", timeout=10)  # every earlier message has been handled
                except pykka.ActorDeadError:
                    continue  # a request's actor that just finished
                if name.startswith("provider:") and ref.proxy().in_flight().get(timeout=10):
                    return False
            return all(
                not ref.actor_inbox.qsize()
                for ref in map(self.system.actor_ref, self.system.directory.names()) if ref
            )
        wait_until(lambda: idle() and idle(), 20, "the actors to go idle")

    def advance(self, seconds: float, step: float = 5.0) -> None:
        """Move the fake clock in steps, letting the actors finish each step's work."""
        remaining = seconds
        while remaining > 0:
            self.quiesce()
            delta = min(step, remaining)
            self.clock.advance(delta)
            remaining -= delta
        self.quiesce()

    def checkout(self, pool_name: str, vm: str, *, lifetime: int | None = None) -> None:
        """Do what the API's checkout does in Redis."""
        now = self.clock.now()
        from vmpooler.actors.storage import timefmt
        stamp = timefmt.format_epoch(now)
        assert self.client.smove(schema.ready(pool_name), schema.running(pool_name), vm)
        self.client.hset(schema.active(pool_name), vm, stamp)
        self.client.hset(schema.vm(vm), "checkout", stamp)
        if lifetime is not None:
            self.client.hset(schema.vm(vm), "lifetime", str(lifetime))


@contextmanager
def started(
    client: redis.Redis, config: Config, *, provider: Provider | None = None,
    seed: int = 7, **knobs: Any,
) -> Iterator[Harness]:
    """Start a system over ``client`` on a fake clock; stop it afterwards."""
    clock = FakeClock()
    metrics = RecordingMetrics()
    provider = provider or dummy_for(config, **knobs)
    system = PoolerSystem.start(
        config, redis_client=client, clock=clock, scheduler=clock, metrics=metrics,
        providers={"dummy": provider}, hostnames=HostnameGenerator(rng=random.Random(seed)),
        resolver=lambda _fqdn: False,
    )
    try:
        yield Harness(system, clock, metrics, provider, client)
    finally:
        system.stop()


def log_checkout(client: redis.Redis, pool: str, at: float, *, vm: str | None = None,
                 miss: int = 1) -> None:
    """Add one entry to ``pool``'s checkout log in the checkout script's form: served by
    ``vm``, or (``vm`` None) a miss, ``miss`` telling misses of one second apart."""
    if vm is None:
        client.zadd(schema.demand_misses(pool), {f"{at:.0f}:-{miss}": at})
    else:
        client.zadd(schema.demand(pool), {f"{at:.0f}:{vm}": at})
