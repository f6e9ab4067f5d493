"""Alias failover with real actors, a real redis-server and two dummy providers on a fake
clock: one provider fails, its pool's sibling grows by its share, and gives it back when it
recovers."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pykka
import pytest
import redis

from tests.harness import Harness, context_for
from vmpooler.actors.config import (
    Config,
    DnsConfig,
    GlobalSettings,
    PoolConfig,
    ProviderConfig,
    RedisSettings,
)
from vmpooler.actors.messages import PoolChanged
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.pool.hostnames import HostnameGenerator
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.failover_store import FailoverState, FailoverStore
from vmpooler.actors.system import PoolerSystem
from vmpooler.providers.dummy import DummyProvider
from vmpooler.providers.errors import TransientProviderError


class Vcenter(DummyProvider):
    """A dummy that can go away: while ``down`` every call fails as a dead vCenter's does."""

    down = False

    def _gone(self) -> None:
        if self.down:
            raise TransientProviderError("connection refused")

    def vms_in_pool(self, pool: str) -> list[str]:
        self._gone()
        return super().vms_in_pool(pool)

    def create_vm(self, *args: Any, **kwargs: Any) -> Any:
        self._gone()
        return super().create_vm(*args, **kwargs)

    def get_vm(self, pool: str, vm: str) -> Any:
        self._gone()
        return super().get_vm(pool, vm)


def _pool(name: str, provider: str, size: int, **extra: Any) -> PoolConfig:
    raw = {"name": name, "size": size, "template": f"tpl-{name}", "alias": ["x"],
           "provider": provider, **extra}
    return PoolConfig(name=name, size=size, template=f"tpl-{name}", ready_ttl=60,
                      provider=provider, alias=("x",), domain="example.test",
                      dns_plugin="dyn", raw=raw, **extra)


def _config(*, failover: bool = True, size_max: int | None = None,
            **settings: Any) -> Config:
    extra: dict[str, Any] = {"failover": True} if failover else {}
    settings.setdefault("check_loop_delay_min", 5)
    settings.setdefault("check_loop_delay_max", 10)
    settings.setdefault("circuit_breaker_failure_threshold", 50)  # inventories decide here
    return Config(
        source="test", settings=GlobalSettings(**settings),
        redis=RedisSettings(server="127.0.0.1"),
        pools=(_pool("a", "dc1", 3, **extra),
               _pool("b", "dc2", 3, **extra,
                     **({"size_max": size_max} if size_max is not None else {}))),
        providers={name: ProviderConfig(name=name, provider_class="dummy", settings={})
                   for name in ("dc1", "dc2")},
        dns_configs={"dyn": DnsConfig(name="dyn", dns_class="dynamic-dns",
                                      domain="example.test")},
    )


@contextmanager
def _started(client: redis.Redis, config: Config) -> Iterator[tuple[Harness, Vcenter]]:
    clock, metrics = FakeClock(), RecordingMetrics()
    dc1, dc2 = (Vcenter(context_for(config, {}), rng=random.Random(n), sleep=lambda _s: None)
                for n in (1, 2))
    system = PoolerSystem.start(
        config, redis_client=client, clock=clock, scheduler=clock, metrics=metrics,
        providers={"dc1": dc1, "dc2": dc2}, hostnames=HostnameGenerator(rng=random.Random(5)),
        resolver=lambda _fqdn: False)
    try:
        yield Harness(system, clock, metrics, dc2, client), dc1
    finally:
        system.stop()


def _ready(client: redis.Redis, pool: str) -> int:
    return int(client.scard(schema.ready(pool)))


def _state(client: redis.Redis, pool: str) -> str | None:
    found = FailoverStore(client).read([pool]).get(pool)
    return None if found is None else found.state


def _settle(h: Harness, condition: Any, what: str, limit: float = 600) -> None:
    """Advance the fake clock in cycle-sized steps until ``condition`` holds."""
    spent = 0.0
    while not condition():
        assert spent < limit, f"{what}: not within {limit}s of fake time"
        h.advance(5, step=5)
        spent += 5


def test_a_sibling_takes_over_a_dead_providers_share_and_gives_it_back(
        redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with _started(redis_client, _config()) as (h, dc1):
        h.wait_full("a", 3)
        h.wait_full("b", 3)
        _settle(h, lambda: _state(redis_client, "a") == "ok", "a publishes its state")
        assert h.metrics.last_gauge("failover.size", pool="b") == 3
        dc1.down = True
        _settle(h, lambda: _state(redis_client, "a") == "down", "a is down")
        _settle(h, lambda: _ready(redis_client, "b") == 6, "b holds its size plus a's share")
        state = FailoverStore(redis_client).read(["b"])["b"]
        assert (state.state, state.size, state.effective, dict(state.covering)) == (
            "ok", 3, 6, {"a": 3})
        assert h.metrics.last_gauge("failover.size", pool="b") == 6
        assert h.metrics.counts("failover.takeover", sibling="a", pool="b") == 1
        grown = [r.getMessage() for r in caplog.records if "grows by" in r.getMessage()]
        assert grown == ["[*] [b] grows by 3 for 'a' (down: inventory_failed): size 3 -> 6"]

        dc1.down = False
        _settle(h, lambda: _state(redis_client, "a") == "ok", "a refills")
        _settle(h, lambda: _ready(redis_client, "b") == 3, "b shrinks back to its size")
        assert _ready(redis_client, "a") == 3
        assert h.metrics.counts("failover.giveback", sibling="a", pool="b") == 1
        back = [r.getMessage() for r in caplog.records if "gives back" in r.getMessage()]
        assert len(back) == 1 and back[0].startswith("[*] [b] gives back the share of 'a'")
        assert h.metrics.last_gauge("failover.size", pool="b") == 3


def test_an_open_breaker_is_down_at_once(redis_client: redis.Redis) -> None:
    config = _config(circuit_breaker_failure_threshold=1, failover_failures=50)
    with _started(redis_client, config) as (h, dc1):
        h.wait_full("a", 3)
        h.wait_full("b", 3)
        dc1.down = True
        _settle(h, lambda: _state(redis_client, "a") == "down", "a is down")
        found = FailoverStore(redis_client).read(["a"])["a"]
        assert found.reason == "breaker_open"
        _settle(h, lambda: _ready(redis_client, "b") == 6, "b takes a's share")


def test_the_ceiling_limits_the_growth(redis_client: redis.Redis) -> None:
    with _started(redis_client, _config(size_max=4)) as (h, dc1):
        h.wait_full("a", 3)
        h.wait_full("b", 3)
        dc1.down = True
        _settle(h, lambda: _ready(redis_client, "b") == 4, "b grows to its ceiling")
        h.advance(60, step=5)
        assert _ready(redis_client, "b") == 4


def test_without_failover_nothing_takes_over(redis_client: redis.Redis) -> None:
    with _started(redis_client, _config(failover=False)) as (h, dc1):
        h.wait_full("a", 3)
        h.wait_full("b", 3)
        dc1.down = True
        h.advance(120, step=5)
        assert _ready(redis_client, "b") == 3
        assert not redis_client.keys(schema.failover("*"))


def test_the_decision_comes_from_redis_when_another_manager_holds_the_sibling(
        redis_client: redis.Redis) -> None:
    # Another manager holds pool a's lease: this one never acts on a, and learns of it only
    # through what that manager publishes in Redis.
    redis_client.set(schema.lease("pool", "a"), "900 elsewhere:1", px=600_000)
    with _started(redis_client, _config()) as (h, _dc1):
        h.wait_full("b", 3)
        h.advance(30, step=5)
        assert _ready(redis_client, "a") == 0, "a is not this manager's"
        assert _ready(redis_client, "b") == 3
        FailoverStore(redis_client).publish(FailoverState(
            pool="a", state="down", reason="breaker_open", size=3), ttl=600)
        _settle(h, lambda: _ready(redis_client, "b") == 6, "b takes over a's share")
        FailoverStore(redis_client).publish(FailoverState(
            pool="a", state="recovering", size=3, ready=2), ttl=600)
        _settle(h, lambda: _ready(redis_client, "b") == 4, "b keeps only what a lacks")
        redis_client.delete(schema.failover("a"))  # its manager is gone: nothing is known
        _settle(h, lambda: _ready(redis_client, "b") == 3, "b back to its size")


def test_siblings_are_woken_only_once_the_down_state_is_in_redis(
        redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    # A spy on pykka's tell (observation only; the message is still delivered): what Redis
    # says of pool a at the moment its siblings are told it changed. A sibling woken before
    # the write reads the old state and waits for its own next cycle to take over.
    seen: list[str | None] = []
    original = pykka.ActorRef.tell

    def spy(ref: pykka.ActorRef[Any], message: Any) -> None:
        if isinstance(message, PoolChanged) and message.reason.startswith("failover: a "):
            seen.append(_state(redis_client, "a"))
        original(ref, message)

    monkeypatch.setattr(pykka.ActorRef, "tell", spy)
    config = _config(circuit_breaker_failure_threshold=1, failover_failures=50)
    with _started(redis_client, config) as (h, dc1):
        h.wait_full("a", 3)
        h.wait_full("b", 3)
        _settle(h, lambda: _state(redis_client, "a") == "ok", "a publishes its state")
        dc1.down = True
        _settle(h, lambda: _state(redis_client, "a") == "down", "a is down")
        h.quiesce()
    assert seen and seen[0] == "down", f"b was told while Redis said a was {seen[0:1]}"


def test_a_sibling_on_a_long_loop_takes_over_at_once(redis_client: redis.Redis) -> None:
    # b cycles every 600 s: only the wake-up a sends when it goes down can make b grow
    # within seconds; reading a stale state on that wake-up would cost b a whole cycle.
    config = _config(circuit_breaker_failure_threshold=1, failover_failures=50)
    slow = replace(config.pools[1], check_loop_delay_min=600, check_loop_delay_max=600)
    config = replace(config, pools=(config.pools[0], slow))
    with _started(redis_client, config) as (h, dc1):
        h.wait_full("a", 3)
        h.wait_full("b", 3)
        _settle(h, lambda: _state(redis_client, "a") == "ok", "a publishes its state")
        _settle(h, lambda: _state(redis_client, "b") == "ok", "b publishes its state",
                limit=1200)
        dc1.down = True
        _settle(h, lambda: _state(redis_client, "a") == "down", "a is down", limit=60)
        spent = 0
        while h.metrics.last_gauge("failover.size", pool="b") != 6:
            assert spent < 20, "b did not grow within 20 s of a going down"
            h.advance(1, step=1)
            spent += 1
