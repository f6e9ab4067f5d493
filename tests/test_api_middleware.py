"""API middleware: rate limiter (reference §1.6), request logger (§1.7), request timer.

Real Redis throughout. Windows are checked through the counter's TTL; the one test that
watches a window end uses a 1 s period and waits on the key's expiry with a deadline.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import falcon
import falcon.testing
import pytest
import redis

from tests.api_harness import TOKEN, Api, api, api_config, api_pool
from vmpooler.actors.config import Config
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.connection import connect
from vmpooler.actors.storage.ratelimit_store import Bucket, RateLimitDecision, RateLimitStore
from vmpooler.web.api_context import ApiContext
from vmpooler.web.app import create_app
from vmpooler.web.middleware import limit_class

REQUESTS = "vmpooler.web.requests"
LIMITER = "vmpooler.web.middleware"


def with_limits(config: Config, **limits: tuple[int, int]) -> Config:
    """``config`` with classes overridden as ``name=(limit, period)``."""
    merged = {name: dict(value) for name, value in config.rate_limits.items()}
    merged.update({name: {"limit": n, "period": s} for name, (n, s) in limits.items()})
    return dataclasses.replace(config, rate_limits=merged)


def limited(redis_client: redis.Redis, *, request_logger: bool = False,
            **limits: tuple[int, int]) -> Api:
    """An app with rate limiting on and ``limits`` (see :func:`with_limits`)."""
    return api(redis_client, with_limits(api_config(
        [api_pool("pool1")], rate_limiting_enabled=True, request_logger=request_logger), **limits))


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``predicate`` every 20 ms until it holds or ``timeout`` seconds pass."""
    deadline, pause = time.monotonic() + timeout, threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.02)
    return True


# -- the limiter -----------------------------------------------------------------------------
def test_limit_reached_answers_429_with_headers_and_body(redis_client: redis.Redis) -> None:
    a = limited(redis_client, global_per_ip=(3, 60))
    for _ in range(3):
        ok = a.client.simulate_get("/api/v3/status")
        assert ok.status_code == 200
        assert "X-RateLimit-Limit" not in ok.headers  # none on accepted responses
    rejected = a.client.simulate_get("/api/v3/status")
    key = schema.ratelimit("global_per_ip", "ip:127.0.0.1")
    assert key == "vmpooler__ratelimit__global_per_ip__ip:127.0.0.1"
    assert 0 < (ttl := redis_client.ttl(key)) <= 60
    assert rejected.status_code == 429
    assert rejected.json == {"ok": False, "error": "Rate limit exceeded", "limit": 3,
                             "period": 60, "retry_after": ttl}
    names = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "Retry-After", "X-RateLimit-Reset")
    assert [rejected.headers[name] for name in names] == [
        "3", "0", str(ttl), str(int(a.clock.now()) + ttl)]
    assert redis_client.get(key) == "3"  # a rejected request does not count


@pytest.mark.parametrize(("method", "path", "valid_token", "expected"), [
    ("POST", "/api/v3/vm", False, "vm_creation"),
    ("POST", "/api/v3/vm/pool1", True, "vm_creation"),
    ("POST", "/api/v3/vm/host1/snapshot", False, "vm_creation"),
    ("DELETE", "/api/v3/vm/host1", False, "vm_deletion"),
    ("DELETE", "/api/v3/vm/host1", True, "vm_deletion"),
    ("GET", "/api/v3/vm/host1", True, "authenticated"),
    ("POST", "/api/v3/ondemandvm", False, "global_per_ip"),
    ("GET", "/api/v3/vm/host1", False, "global_per_ip"),
])
def test_limit_class(method: str, path: str, valid_token: bool, expected: str) -> None:
    assert limit_class(method, path, valid_token) == expected


def test_each_class_counts_under_its_own_key(redis_client: redis.Redis) -> None:
    a = limited(redis_client)
    a.add_token()
    a.client.simulate_post("/api/v3/vm", json={"pool1": 1})
    a.client.simulate_post("/api/v3/vm/pool1")
    a.client.simulate_delete("/api/v3/vm/host1", headers={"X-AUTH-TOKEN": TOKEN})
    a.client.simulate_get("/api/v3/status", headers={"X-AUTH-TOKEN": TOKEN})
    a.client.simulate_post("/api/v3/ondemandvm", json={"pool1": 1}, remote_addr="10.0.0.7")
    a.client.simulate_get("/api/v3/status", headers={"X-AUTH-TOKEN": ""})
    a.client.simulate_get("/api/v3/status", headers={"X-AUTH-TOKEN": "not-a-token"})
    counters = {key: redis_client.get(key) for key in redis_client.keys("vmpooler__ratelimit__*")}
    assert counters == {
        schema.ratelimit("vm_creation", "ip:127.0.0.1"): "2",
        schema.ratelimit("vm_deletion", f"token:{TOKEN}"): "1",
        schema.ratelimit("authenticated", f"token:{TOKEN}"): "1",
        schema.ratelimit("global_per_ip", "ip:10.0.0.7"): "1",
        # an empty or unknown token counts by address, as a request without one
        schema.ratelimit("global_per_ip", "ip:127.0.0.1"): "2",
    }


def test_classes_use_their_own_limits(redis_client: redis.Redis) -> None:
    a = limited(redis_client, vm_creation=(1, 60), vm_deletion=(2, 60), authenticated=(1, 60))
    a.add_token()
    assert a.client.simulate_post("/api/v3/vm/pool1").status_code != 429
    assert a.client.simulate_post("/api/v3/vm/pool1").status_code == 429
    assert a.client.simulate_get("/api/v3/status").status_code == 200  # other class
    for expected in (404, 404, 429):
        assert a.client.simulate_delete("/api/v3/vm/nohost").status_code == expected
    auth = {"X-AUTH-TOKEN": TOKEN}
    assert a.client.simulate_get("/api/v3/status", headers=auth).status_code == 200
    rejected = a.client.simulate_get("/api/v3/status", headers=auth)
    assert (rejected.status_code, rejected.json["limit"]) == (429, 1)


def test_clients_are_counted_apart(redis_client: redis.Redis) -> None:
    a = limited(redis_client, global_per_ip=(1, 60))
    assert a.client.simulate_get("/", remote_addr="10.0.0.1").status_code == 302
    assert a.client.simulate_get("/", remote_addr="10.0.0.1").status_code == 429
    assert a.client.simulate_get("/", remote_addr="10.0.0.2").status_code == 302
    # X-Forwarded-For is not trusted: it cannot buy a fresh identity
    xff = {"X-Forwarded-For": "192.0.2.9"}
    assert a.client.simulate_get("/", remote_addr="10.0.0.1", headers=xff).status_code == 429


@pytest.mark.parametrize("path", ["/healthcheck", "/healthcheck/", "/api/v3/openapi.json"])
def test_exempt_paths_are_never_limited(redis_client: redis.Redis, path: str) -> None:
    a = limited(redis_client, global_per_ip=(0, 60))
    assert a.client.simulate_get("/api/v3/status").status_code == 429
    assert [a.client.simulate_get(path).status_code for _ in range(3)] == [200] * 3
    assert redis_client.get(schema.ratelimit("global_per_ip", "ip:127.0.0.1")) is None


def test_window_is_fixed_not_refreshed_by_requests(redis_client: redis.Redis) -> None:
    a = limited(redis_client, global_per_ip=(10, 100))
    key = schema.ratelimit("global_per_ip", "ip:127.0.0.1")
    a.client.simulate_get("/")
    assert 99 <= redis_client.ttl(key) <= 100
    redis_client.expire(key, 40)  # as if 60 s of the window had passed
    a.client.simulate_get("/")
    assert redis_client.get(key) == "2"
    assert redis_client.ttl(key) <= 40  # vmpooler would have pushed it back to 100


def test_window_resets_after_the_period(redis_client: redis.Redis) -> None:
    a = limited(redis_client, global_per_ip=(1, 1))
    key = schema.ratelimit("global_per_ip", "ip:127.0.0.1")
    assert a.client.simulate_get("/").status_code == 302
    assert a.client.simulate_get("/").status_code == 429
    assert wait_until(lambda: not redis_client.exists(key))
    assert a.client.simulate_get("/").status_code == 302


def test_concurrent_requests_never_overshoot(redis_client: redis.Redis) -> None:
    a = limited(redis_client, global_per_ip=(5, 60))
    with ThreadPoolExecutor(max_workers=8) as pool:
        codes = list(pool.map(lambda _: a.client.simulate_get("/").status_code, range(40)))
    assert codes.count(302) == 5
    assert codes.count(429) == 35


class CountingConnection(redis.Connection):
    sent = 0  # round trips: each packed send is one

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


def test_one_round_trip_per_request(redis_client: redis.Redis) -> None:
    kwargs = redis_client.connection_pool.connection_kwargs
    client = redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=CountingConnection, host=kwargs["host"], port=kwargs["port"],
        decode_responses=True))
    a = api(client, limited(redis_client, global_per_ip=(2, 60)).ctx.config)
    client.script_flush()
    a.client.simulate_get("/")  # loads the script (EVALSHA, NOSCRIPT, EVAL)
    for expected in (302, 429):
        CountingConnection.sent = 0
        assert a.client.simulate_get("/").status_code == expected
        assert CountingConnection.sent == 1
    client.close()


def test_fails_open_when_redis_is_unreachable(caplog: pytest.LogCaptureFixture) -> None:
    config = api_config([api_pool("pool1")], rate_limiting_enabled=True, request_logger=True)
    config = with_limits(config, **dict.fromkeys(config.rate_limits, (0, 60)))  # rejects all
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    down = connect("127.0.0.1", port)  # nothing listens there any more
    client = falcon.testing.TestClient(create_app(ApiContext(config=config, redis=down)))
    with caplog.at_level(logging.INFO):
        assert client.simulate_get("/").status_code == 302
        assert client.simulate_get("/api/v3/nothing").status_code == 404
    warnings = [r for r in caplog.records if r.name == LIMITER and r.levelno == logging.WARNING]
    assert len(warnings) == 1  # throttled: one warning, not one per request
    assert "rate limiter cannot reach Redis" in warnings[0].getMessage()
    assert len([r for r in caplog.records if r.name == REQUESTS]) == 2
    down.close()


# -- request logger and timer ----------------------------------------------------------------
def test_request_log_lines(redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    a = limited(redis_client, request_logger=True, vm_deletion=(1, 60))
    with caplog.at_level(logging.INFO, logger=REQUESTS):
        ok = a.client.simulate_get("/api/v3/totalrunning/")
        a.client.simulate_delete("/api/v3/vm/nohost")
        a.client.simulate_delete("/api/v3/vm/nohost")
        a.client.simulate_get("/healthcheck")
    lines = [r.getMessage() for r in caplog.records if r.name == REQUESTS]
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == REQUESTS)
    assert lines[0] == ("[ ] API: Method: GET, Status: 200, Path: /api/v3/totalrunning, "
                        f"Body: {len(ok.content)} bytes")
    assert lines[1].startswith("[ ] API: Method: DELETE, Status: 404, Path: /api/v3/vm/nohost,")
    assert lines[2].startswith("[ ] API: Method: DELETE, Status: 429, Path: /api/v3/vm/nohost,")
    assert len(lines) == 3  # /healthcheck is not logged, as in vmpooler


def test_logger_without_limiter(redis_client: redis.Redis,
                                caplog: pytest.LogCaptureFixture) -> None:
    a = api(redis_client, api_config([api_pool("pool1")], request_logger=True))
    with caplog.at_level(logging.INFO, logger=REQUESTS):
        a.client.simulate_get("/")
    assert [r.getMessage() for r in caplog.records if r.name == REQUESTS] == [
        "[ ] API: Method: GET, Status: 302, Path: /, Body: 0 bytes"]
    assert not redis_client.keys("vmpooler__ratelimit__*")


def test_disabled_by_default(redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    config: Config = api_config([api_pool("pool1")])
    assert not config.settings.rate_limiting_enabled and not config.settings.request_logger
    config = with_limits(config, **dict.fromkeys(config.rate_limits, (0, 60)))
    a = api(redis_client, config)
    with caplog.at_level(logging.DEBUG):
        for _ in range(3):
            resp = a.client.simulate_get("/api/v3/status")
            assert resp.status_code == 200
            assert not any(h.lower().startswith("x-ratelimit") for h in resp.headers)
    assert not redis_client.keys("vmpooler__ratelimit__*")
    assert not [r for r in caplog.records if r.name == REQUESTS]


def test_request_timer_is_always_on(redis_client: redis.Redis) -> None:
    a = limited(redis_client, global_per_ip=(1, 60))
    a.add_token()
    a.client.simulate_get("/api/v3/status")
    a.client.simulate_get("/api/v3/status")
    a.client.simulate_post("/api/v3/nothing", headers={"X-AUTH-TOKEN": TOKEN})
    for method, status in (("GET", "200"), ("GET", "429"), ("POST", "404")):
        timings = a.metrics.timings("http_request", method=method, status=status)
        assert len(timings) == 1 and timings[0] >= 0
    plain = api(redis_client, api_config([api_pool("pool1")]))
    plain.client.simulate_get("/healthcheck")
    assert len(plain.metrics.timings("http_request", method="GET", status="200")) == 1


def test_a_broken_metrics_backend_never_breaks_a_response(redis_client: redis.Redis) -> None:
    class BrokenMetrics(RecordingMetrics):
        def _emit(self, kind: str, name: str, value: float, tags: Any) -> None:
            raise OSError("statsd is gone")

    ctx = ApiContext(config=api_config([api_pool("pool1")]), redis=redis_client,
                     metrics=BrokenMetrics())
    client = falcon.testing.TestClient(create_app(ctx))
    assert client.simulate_get("/healthcheck").status_code == 200


def test_store_counts_and_repairs_counters_without_ttl(redis_client: redis.Redis) -> None:
    store, key = RateLimitStore(redis_client), schema.ratelimit("vm_creation", "ip:1")
    assert store.hit("vm_creation", "ip:1", 2, 30) == RateLimitDecision(
        True, 1, 30, Bucket("vm_creation", "ip:1", 2, 30))
    assert store.hit("vm_creation", "ip:1", 2, 30).allowed
    third = store.hit("vm_creation", "ip:1", 2, 30)
    assert (third.allowed, third.count) == (False, 2) and 0 < third.ttl <= 30
    for value, allowed in (("7", False), ("0", True)):  # immortal counters (crashed writer)
        redis_client.set(key, value)
        assert store.hit("vm_creation", "ip:1", 2, 30).allowed is allowed
        assert 0 < redis_client.ttl(key) <= 30
