"""The manager heartbeat (``vmpooler__manager__heartbeat``) and ``GET /api/v3/readiness``.

Over the session's real redis-server on the fake clock: the heartbeat is written at start,
refreshed every interval, pruned when another manager stops beating, removed at a clean
stop; readiness answers 200 or 503 with what is wrong for each failure.
"""

from __future__ import annotations

import json

import pytest
import redis

from tests.api_harness import api, api_config, api_pool
from tests.harness import make_config, pool, started, wait_until
from tests.openapi_check import body_errors
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.storage.heartbeat_store import HeartbeatStore, manager_id, prune_age, stale_age

KEY = schema.manager_heartbeat()


def beats(client: redis.Redis) -> dict[str, float]:
    return dict(client.zrange(KEY, 0, -1, withscores=True))


# -- the heartbeat -------------------------------------------------------------------------------
def test_manager_id_names_host_pid_and_start() -> None:
    assert manager_id(1700000000.7, host="h", pid=42) == "h:42:1700000000"
    assert stale_age(5, None) == 15 and stale_age(5, 7) == 7
    assert prune_age(5, None) == 60


def test_heartbeat_written_refreshed_and_removed_at_stop(redis_client: redis.Redis) -> None:
    config = make_config([pool("p", 1)], manager_heartbeat_interval=2)
    with started(redis_client, config) as h:
        me = h.system.manager_id
        wait_until(lambda: me in beats(redis_client), what="the first beat")
        first = beats(redis_client)[me]
        assert first == h.clock.now()
        assert 0 < redis_client.ttl(KEY) <= 24  # prune age: 4 x 3 x 2 s
        h.advance(2, step=2)
        wait_until(lambda: beats(redis_client)[me] == first + 2, what="the second beat")
        h.advance(5, step=1)
        wait_until(lambda: beats(redis_client)[me] == first + 6, what="later beats")
    assert me not in beats(redis_client)


def test_heartbeat_prunes_managers_that_stopped_beating(redis_client: redis.Redis) -> None:
    config = make_config([pool("p", 1)], manager_heartbeat_interval=1)  # prune after 12 s
    with started(redis_client, config) as h:
        now = h.clock.now()
        redis_client.zadd(KEY, {"dead:1:0": now - 5, "older:2:0": now - 11.5})
        h.advance(1, step=1)
        wait_until(lambda: "older:2:0" not in beats(redis_client), what="the first prune")
        assert "dead:1:0" in beats(redis_client)
        h.advance(7, step=1)
        wait_until(lambda: set(beats(redis_client)) == {h.system.manager_id},
                   what="the dead manager pruned")


def test_store_beat_keeps_one_member_per_manager(redis_client: redis.Redis) -> None:
    store = HeartbeatStore(redis_client)
    assert store.beat("a:1:0", 100.0, prune_after=60) == 0
    assert store.beat("b:2:0", 105.0, prune_after=60) == 0
    assert store.beat("a:1:0", 110.0, prune_after=60) == 0
    assert [(b.manager, b.at) for b in store.beats()] == [("a:1:0", 110.0), ("b:2:0", 105.0)]
    assert store.beat("a:1:0", 170.0, prune_after=60) == 1  # b's 105 is older than 110
    assert store.remove("a:1:0") and not store.remove("a:1:0")
    assert store.beats() == []


# -- readiness -----------------------------------------------------------------------------------
def _checked(result: object) -> dict:
    body = json.loads(result.text)  # type: ignore[attr-defined]
    errors = body_errors("get", "/api/v3/readiness", result.status_code, result.text)  # type: ignore[attr-defined]
    assert not errors, errors
    return body


def test_readiness_200_with_a_fresh_heartbeat(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool("p")]))
    redis_client.zadd(KEY, {"h:1:0": a.clock.now() - 3})
    result = a.client.simulate_get("/api/v3/readiness")
    assert result.status_code == 200
    body = _checked(result)
    assert body == {"ok": True, "redis": {"ok": True}, "managers": {
        "ok": True, "live": 1, "max_age": 15.0, "newest_age": 3.0,
        "members": [{"id": "h:1:0", "age": 3.0, "pools": 0}], "unheld_pools": 1}}


def test_readiness_says_how_many_pools_each_manager_holds(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool(p) for p in ("p", "q", "r")]))
    redis_client.zadd(KEY, {"h:1:0": a.clock.now() - 1, "h:2:0": a.clock.now() - 2})
    redis_client.set(schema.lease("pool", "p"), "1 h:1:0")
    redis_client.set(schema.lease("pool", "q"), "2 h:1:0")
    redis_client.set(schema.lease("pool", "unconfigured"), "3 h:2:0")
    body = _checked(a.client.simulate_get("/api/v3/readiness"))
    assert [(m["id"], m["pools"]) for m in body["managers"]["members"]] == [
        ("h:1:0", 2), ("h:2:0", 0)]
    assert body["managers"]["unheld_pools"] == 1  # r


def test_readiness_503_without_a_heartbeat(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool("p")]))
    result = a.client.simulate_get("/api/v3/readiness")
    assert result.status_code == 503
    body = _checked(result)
    assert body["ok"] is False and body["errors"] == ["no manager heartbeat"]
    assert body["managers"]["live"] == 0 and body["managers"]["newest_age"] is None


def test_readiness_503_with_a_stale_heartbeat(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool("p")], manager_heartbeat_interval=10))
    redis_client.zadd(KEY, {"h:1:0": a.clock.now(), "h:2:0": a.clock.now() - 40})
    assert a.client.simulate_get("/api/v3/readiness").status_code == 200
    a.clock.advance(30)
    assert a.client.simulate_get("/api/v3/readiness").status_code == 200  # 30 <= 3 x 10
    a.clock.advance(17)
    result = a.client.simulate_get("/api/v3/readiness")
    assert result.status_code == 503
    body = _checked(result)
    assert body["errors"] == ["the newest manager heartbeat is 47 s old (max 30 s)"]
    assert [m["age"] for m in body["managers"]["members"]] == [47.0, 87.0]


def test_readiness_max_age_is_configurable(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool("p")], manager_heartbeat_max_age=4))
    redis_client.zadd(KEY, {"h:1:0": a.clock.now() - 5})
    result = a.client.simulate_get("/api/v3/readiness")
    assert result.status_code == 503
    assert _checked(result)["errors"] == ["the newest manager heartbeat is 5 s old (max 4 s)"]


def test_readiness_503_when_redis_is_unreachable() -> None:
    closed = redis.Redis(host="127.0.0.1", port=1, decode_responses=True)
    result = api(closed, api_config([api_pool("p")])).client.simulate_get("/api/v3/readiness")
    assert result.status_code == 503
    body = _checked(result)
    assert body["ok"] is False and body["redis"]["ok"] is False
    assert len(body["errors"]) == 1 and body["errors"][0].startswith("redis unreachable: ")
    assert "Connection refused" in body["errors"][0]
    assert "managers" not in body


def test_readiness_503_when_redis_stops(
        tmp_path: pytest.TempPathFactory) -> None:
    server = EmbeddedRedis(data_dir=tmp_path, hardened=False).start()  # type: ignore[arg-type]
    try:
        client = redis.Redis(port=server.port, decode_responses=True)
        a = api(client, api_config([api_pool("p")]))
        client.zadd(KEY, {"h:1:0": a.clock.now()})
        assert a.client.simulate_get("/api/v3/readiness").status_code == 200
        server.stop()
        result = a.client.simulate_get("/api/v3/readiness")
        assert result.status_code == 503
        assert _checked(result)["errors"][0].startswith("redis unreachable: ")
    finally:
        server.stop()


def test_readiness_reports_queue_health_when_the_check_is_on(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool("p")], health_check_enabled=True))
    redis_client.zadd(KEY, {"h:1:0": a.clock.now()})
    result = a.client.simulate_get("/api/v3/readiness")
    assert _checked(result)["health"] == {"status": None, "last_check": None}
    redis_client.hset(schema.health(), mapping={"status": "unhealthy", "metrics": "{}",
                                                "last_check": "2026-01-01T00:00:00+00:00"})
    result = a.client.simulate_get("/api/v3/readiness")
    assert result.status_code == 200  # information only
    assert _checked(result)["health"] == {"status": "unhealthy",
                                          "last_check": "2026-01-01T00:00:00+00:00"}
