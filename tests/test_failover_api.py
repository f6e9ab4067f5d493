"""Alias failover in the API, over a real redis-server: ``/status``'s ``failover`` entry, and
checkout and on-demand preferring the backends that can deliver."""

from __future__ import annotations

from typing import Any

import redis

from tests.api_harness import Api, api, api_config, api_pool
from tests.openapi_check import body_errors
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.failover_store import FailoverState, FailoverStore
from vmpooler.actors.storage.provider_store import ProviderHealth, ProviderStore
from vmpooler.web.resources import ondemand_create


def _pools(failover: bool = True) -> list[Any]:
    extra = {"failover": True} if failover else {}
    return [api_pool("a", 4, alias=("x",), provider="dc1", **extra),
            api_pool("b", 4, alias=("x",), provider="dc2", **extra),
            api_pool("c", 1, alias=("y",))]


def _publish(client: redis.Redis, pool: str, state: str, **kw: Any) -> None:
    FailoverStore(client).publish(FailoverState(pool=pool, state=state, **kw), ttl=60)


def _breaker(client: redis.Redis, provider: str, state: str) -> None:
    ProviderStore(client).publish_health(ProviderHealth(
        provider=provider, breaker=state, since=0, failures=5, retry_after=30,
        last_error="connection refused", connections=None, updated=0), ttl=60)


def _seed(t: Api, per_pool: int = 3) -> None:
    for pool in ("a", "b"):
        for n in range(per_pool):
            t.add_vm(pool, f"{pool}{n}")


def _taken_from(t: Api, times: int) -> list[str]:
    got = []
    for _ in range(times):
        resp = t.client.simulate_post("/api/v3/vm/x")
        assert resp.status_code == 200, resp.text
        got.append(resp.json["x"]["hostname"][0])
    return got


# -- /status ----------------------------------------------------------------------------------
def test_status_without_failover_pools_is_unchanged(redis_client: redis.Redis) -> None:
    t = api(redis_client, api_config(_pools(failover=False)))
    pools = t.client.simulate_get("/api/v3/status").json["pools"]
    assert all("failover" not in entry for entry in pools.values())


def test_status_shows_each_failover_pools_state(redis_client: redis.Redis) -> None:
    t = api(redis_client, api_config(_pools()))
    pools = t.client.simulate_get("/api/v3/status").json["pools"]
    assert pools["a"]["failover"] == {"state": "unknown", "size": 4, "effective": 4,
                                      "covering": {}}
    assert "failover" not in pools["c"]
    _publish(redis_client, "a", "down", reason="breaker_open", since=1_700_000_000, size=4)
    _publish(redis_client, "b", "ok", size=4, ready=8, effective=8, covering={"a": 4})
    pools = t.client.simulate_get("/api/v3/status").json["pools"]
    assert pools["a"]["failover"] == {
        "state": "down", "reason": "breaker_open", "since": "2023-11-14T22:13:20+00:00",
        "size": 4, "effective": 0, "covering": {}}
    assert pools["b"]["failover"]["covering"] == {"a": 4}
    assert pools["b"]["failover"]["effective"] == 8
    assert pools["b"]["max"] == 4, "vmpooler's max stays the configured size"
    resp = t.client.simulate_get("/api/v3/status")
    assert not body_errors("get", "/api/v3/status", 200, resp.text), "as openapi.json says"


# -- checkout -----------------------------------------------------------------------------------
def test_checkout_of_the_alias_avoids_a_down_pool_while_a_sibling_has_ready_vms(
        redis_client: redis.Redis) -> None:
    t = api(redis_client, api_config(_pools()))
    _seed(t)
    _publish(redis_client, "a", "down", reason="inventory_failed", size=4)
    got = _taken_from(t, 4)
    assert [vm[0] for vm in got[:3]] == ["b", "b", "b"]
    assert got[3].startswith("a"), "with no sibling left, the down pool still serves"


def test_checkout_avoids_a_pool_whose_providers_breaker_is_open(
        redis_client: redis.Redis) -> None:
    t = api(redis_client, api_config(_pools()))
    _seed(t)
    _breaker(redis_client, "dc2", "open")
    assert {vm[0] for vm in _taken_from(t, 3)} == {"a"}


def test_checkout_without_failover_draws_as_vmpooler_does(redis_client: redis.Redis) -> None:
    t = api(redis_client, api_config(_pools(failover=False)))
    _seed(t)
    _publish(redis_client, "a", "down", size=4)
    _breaker(redis_client, "dc1", "open")
    assert {vm[0] for vm in _taken_from(t, 4)} == {"a", "b"}


def test_a_recovered_pool_is_drawn_again_after_the_cache_second(
        redis_client: redis.Redis) -> None:
    t = api(redis_client, api_config(_pools()))
    _seed(t, per_pool=6)
    _publish(redis_client, "a", "down", size=4)
    assert {vm[0] for vm in _taken_from(t, 2)} == {"b"}
    _publish(redis_client, "a", "recovering", size=4, ready=3)
    t.clock.advance(1.5)
    assert "a" in {vm[0] for vm in _taken_from(t, 6)}


# -- on demand ---------------------------------------------------------------------------------
def test_ondemand_through_the_alias_picks_a_backend_that_can_deliver(
        redis_client: redis.Redis) -> None:
    t = api(redis_client, api_config(_pools()))
    _publish(redis_client, "a", "down", size=4)
    entries = ondemand_create.plan(t.ctx, {"x": 10})
    assert [(e.pool, e.count) for e in entries] == [("b", 10)]


def test_ondemand_falls_back_to_vmpoolers_choice_when_all_are_down(
        redis_client: redis.Redis) -> None:
    t = api(redis_client, api_config(_pools()))
    _publish(redis_client, "a", "down", size=4)
    _breaker(redis_client, "dc2", "open")
    entries = ondemand_create.plan(t.ctx, {"x": 20})
    assert {e.pool for e in entries} == {"a", "b"}
    assert sum(e.count for e in entries) == 20


def test_ondemand_without_failover_is_unchanged(redis_client: redis.Redis) -> None:
    t = api(redis_client, api_config(_pools(failover=False)))
    _publish(redis_client, "a", "down", size=4)
    entries = ondemand_create.plan(t.ctx, {"x": 20})
    assert {e.pool for e in entries} == {"a", "b"}
    assert not redis_client.exists(schema.failover("b"))
