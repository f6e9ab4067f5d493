"""The failed-login guard: HTTP Basic guessing is limited per user name and per address.

The dummy auth provider accepts any user whose password differs from the name, so a
"correct" password refused with 429 proves the provider was not asked. Real Redis,
Falcon's TestClient.
"""

from __future__ import annotations

import base64
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import falcon.testing
import pytest
import redis

from tests.api_harness import Api, api, api_config, api_pool
from tests.openapi_check import body_errors
from vmpooler.actors.storage import schema
from vmpooler.web.login_guard import REFUSED_METRIC

WRONG = "same"  # user == password: the dummy provider refuses it


def basic(user: str, password: str) -> dict[str, str]:
    raw = f"{user}:{password}".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


def guarded(redis_client: redis.Redis, per_user: int = 3, per_address: int = 5,
            window: int = 300, **settings: Any) -> Api:
    return api(redis_client, api_config(
        [api_pool("pool1")], auth=True, login_failures_per_user=per_user,
        login_failures_per_address=per_address, login_failure_window=window, **settings))


def login(a: Api, user: str, password: str, address: str = "10.0.0.1",
          method: str = "POST") -> falcon.testing.Result:
    return a.client.simulate_request(method, "/api/v3/token", headers=basic(user, password),
                                     remote_addr=address)


def guard_keys(client: redis.Redis) -> dict[str, tuple[str, int]]:
    return {key: (client.get(key), client.ttl(key))
            for key in client.keys("vmpooler__login_failures__*")}


def test_a_guessed_user_is_locked_out_and_the_provider_is_not_asked(
        redis_client: redis.Redis) -> None:
    a = guarded(redis_client)
    assert [login(a, "jdoe", "jdoe").status_code for _ in range(3)] == [401] * 3
    locked = login(a, "jdoe", "right")  # the provider would accept it
    assert locked.status_code == 429
    assert locked.json == {"ok": False, "error": "Too many failed logins", "limit": 3,
                           "period": 300, "retry_after": int(locked.headers["Retry-After"])}
    assert 0 < int(locked.headers["Retry-After"]) <= 300
    assert locked.headers["X-RateLimit-Limit"] == "3"
    assert body_errors("post", "/api/v3/token", 429, locked.text) == []
    assert not redis_client.keys(schema.token("*"))  # no token was made
    for method in ("GET", "DELETE"):  # every endpoint that authenticates
        path = "/api/v3/token" if method == "GET" else "/api/v3/token/abc"
        assert a.client.simulate_request(method, path, headers=basic("jdoe", "right"),
                                         remote_addr="10.0.0.1").status_code == 429
    assert a.metrics.counts(REFUSED_METRIC, scope="user") == 3
    assert login(a, "alice", "right").status_code == 200  # another user is not locked


def test_an_address_guessing_many_users_is_locked_out(redis_client: redis.Redis) -> None:
    a = guarded(redis_client, per_user=3, per_address=5)
    assert [login(a, f"user{n}", f"user{n}").status_code for n in range(5)] == [401] * 5
    locked = login(a, "alice", "right")
    assert (locked.status_code, locked.json["limit"]) == (429, 5)
    assert a.metrics.counts(REFUSED_METRIC, scope="address") == 1
    assert login(a, "alice", "right", address="10.0.0.2").status_code == 200


def test_a_success_forgets_only_its_own_users_failures(redis_client: redis.Redis) -> None:
    a = guarded(redis_client, per_user=3, per_address=100)
    assert [login(a, "jdoe", "jdoe").status_code for _ in range(2)] == [401] * 2
    assert login(a, "alice", "right").status_code == 200  # another user's success ...
    assert login(a, "jdoe", "jdoe").status_code == 401  # ... left jdoe's two failures
    assert login(a, "jdoe", "right").status_code == 429
    b = guarded(redis_client, per_user=3, per_address=100)
    assert [login(b, "bob", "bob").status_code for _ in range(2)] == [401] * 2
    assert login(b, "bob", "right").status_code == 200  # bob's own success forgets his
    assert [login(b, "bob", "bob").status_code for _ in range(3)] == [401] * 3


def test_a_success_gives_back_its_count_on_the_address(redis_client: redis.Redis) -> None:
    a = guarded(redis_client, per_user=100, per_address=3)
    assert login(a, "x", "x").status_code == 401
    assert [login(a, "alice", "right").status_code for _ in range(5)] == [200] * 5
    assert guard_keys(redis_client)[schema.login_failures_address("10.0.0.1")][0] == "1"
    assert [login(a, "y", "y").status_code for _ in range(2)] == [401] * 2
    assert login(a, "alice", "right").status_code == 429  # three failures, whoever's


def test_keys_are_bounded_and_expire(redis_client: redis.Redis) -> None:
    a = guarded(redis_client, window=120)
    huge = "u" * 8000
    assert login(a, huge, huge).status_code == 401
    assert login(a, "JDoe", "JDoe").status_code == 401
    assert login(a, " jdoe", " jdoe").status_code == 401
    found = guard_keys(redis_client)
    assert max(len(key) for key in found) < 80
    assert all(0 < ttl <= 120 for _, ttl in found.values())
    assert found[schema.login_failures_user("jdoe")] == ("2", found[
        schema.login_failures_user("jdoe")][1])  # JDoe, " jdoe" and jdoe are one user


def test_concurrent_guesses_cannot_overshoot(redis_client: redis.Redis) -> None:
    a = guarded(redis_client, per_user=5, per_address=1000)
    with ThreadPoolExecutor(max_workers=8) as pool:
        codes = list(pool.map(lambda _: login(a, "jdoe", "jdoe").status_code, range(40)))
    assert (codes.count(401), codes.count(429)) == (5, 35)


def test_requests_without_credentials_are_not_counted(redis_client: redis.Redis) -> None:
    a = guarded(redis_client)
    for _ in range(10):
        assert a.client.simulate_post("/api/v3/token").status_code == 401
    assert guard_keys(redis_client) == {}


@pytest.mark.parametrize(("per_user", "per_address", "expected"), [
    (0, 0, []), (0, 5, ["address"]), (3, 0, ["user"])])
def test_a_limit_of_zero_is_off(redis_client: redis.Redis, per_user: int, per_address: int,
                                expected: list[str]) -> None:
    a = guarded(redis_client, per_user=per_user, per_address=per_address)
    for _ in range(6):
        login(a, "jdoe", "jdoe")
    scopes = sorted("user" if "__user__" in key else "address" for key in guard_keys(redis_client))
    assert scopes == expected
    assert (login(a, "jdoe", "right").status_code == 200) == (expected == [])


def test_defaults_and_the_trusted_proxies(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool("pool1")], auth=True))
    settings = a.ctx.config.settings
    assert (settings.login_failures_per_user, settings.login_failures_per_address,
            settings.login_failure_window) == (10, 30, 300)
    behind = api(redis_client, dataclasses.replace(a.ctx.config, settings=dataclasses.replace(
        settings, trusted_proxies=("10.0.0.1/32",))))
    headers = {**basic("jdoe", "jdoe"), "X-Forwarded-For": "198.51.100.7"}
    behind.client.simulate_post("/api/v3/token", headers=headers, remote_addr="10.0.0.1")
    a.client.simulate_post("/api/v3/token", headers=headers, remote_addr="10.0.0.2")
    assert {key for key in guard_keys(redis_client) if "__address__" in key} == {
        schema.login_failures_address("198.51.100.7"), schema.login_failures_address("10.0.0.2")}
