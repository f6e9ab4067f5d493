"""Who the rate limiter counts: a valid token, else the client's address (the peer's, or the
forwarded one behind ``trusted_proxies``). Real Redis, Falcon's TestClient."""

from __future__ import annotations

import dataclasses
import secrets
from pathlib import Path
from typing import Any

import falcon
import falcon.testing
import pytest
import redis

from tests.api_harness import TOKEN, Api, api
from tests.test_api_middleware import CountingConnection, limited
from tests.test_config import load, problems
from vmpooler.actors.config import GlobalSettings
from vmpooler.actors.storage import schema
from vmpooler.web.clientaddr import TrustedProxies


def keys(client: redis.Redis) -> dict[str, str]:
    return {key: client.get(key) for key in client.keys("vmpooler__ratelimit__*")}


def behind(a: Api, *proxies: str) -> Api:
    """``a``'s configuration with ``trusted_proxies``, in a new app on the same Redis."""
    config = a.ctx.config
    settings = dataclasses.replace(config.settings, trusted_proxies=proxies)
    return api(a.redis, dataclasses.replace(config, settings=settings))


# -- tokens ------------------------------------------------------------------------------------
def test_made_up_tokens_share_the_address_counter(redis_client: redis.Redis) -> None:
    a = limited(redis_client, global_per_ip=(5, 60), authenticated=(1000, 60))
    statuses = []
    for n in range(20):
        made_up = secrets.token_hex(16) if n % 2 else "x" * 8000  # well-formed or not
        statuses.append(a.client.simulate_get(
            "/api/v3/status", headers={"X-AUTH-TOKEN": made_up}).status_code)
    assert statuses == [200] * 5 + [429] * 15
    assert keys(redis_client) == {schema.ratelimit("global_per_ip", "ip:127.0.0.1"): "5"}
    rejected = a.client.simulate_get("/api/v3/status", headers={"X-AUTH-TOKEN": "y" * 32})
    assert rejected.json["limit"] == 5  # the made-up token did not buy authenticated's 1000


def test_a_valid_token_has_its_own_counter_until_it_is_deleted(redis_client: redis.Redis) -> None:
    a = limited(redis_client, global_per_ip=(1, 60), authenticated=(3, 60))
    a.add_token()
    auth = {"X-AUTH-TOKEN": TOKEN}
    assert a.client.simulate_get("/api/v3/status").status_code == 200
    assert a.client.simulate_get("/api/v3/status").status_code == 429
    assert [a.client.simulate_get("/api/v3/status", headers=auth).status_code
            for _ in range(4)] == [200, 200, 200, 429]
    rejected = a.client.simulate_get("/api/v3/status", headers=auth)
    assert (rejected.json["limit"], rejected.headers["X-RateLimit-Limit"]) == (3, "3")
    redis_client.delete(schema.token(TOKEN))
    gone = a.client.simulate_get("/api/v3/status", headers=auth)
    assert (gone.status_code, gone.json["limit"]) == (429, 1)  # back to its address
    assert keys(redis_client) == {schema.ratelimit("global_per_ip", "ip:127.0.0.1"): "1",
                                  schema.ratelimit("authenticated", f"token:{TOKEN}"): "3"}


def test_creation_and_deletion_count_by_token_only_when_it_is_valid(
        redis_client: redis.Redis) -> None:
    a = limited(redis_client, vm_creation=(1, 60))
    a.add_token()
    assert a.client.simulate_post("/api/v3/vm/nope").status_code == 404
    assert a.client.simulate_post("/api/v3/vm/nope", headers={
        "X-AUTH-TOKEN": "madeup"}).status_code == 429
    assert a.client.simulate_post("/api/v3/vm/nope", headers={
        "X-AUTH-TOKEN": TOKEN}).status_code == 404


@pytest.mark.parametrize("header", [None, TOKEN, "madeup", "x" * 8000])
def test_one_round_trip_whatever_the_token(redis_client: redis.Redis, header: str | None) -> None:
    kwargs = redis_client.connection_pool.connection_kwargs
    client = redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=CountingConnection, host=kwargs["host"], port=kwargs["port"],
        decode_responses=True))
    a = api(client, limited(redis_client, global_per_ip=(2, 60), authenticated=(2, 60)).ctx.config)
    a.add_token()
    headers = {} if header is None else {"X-AUTH-TOKEN": header}
    a.client.simulate_get("/", headers=headers)  # loads the script
    for expected in (302, 429):
        CountingConnection.sent = 0
        assert a.client.simulate_get("/", headers=headers).status_code == expected
        assert CountingConnection.sent == 1
    client.close()


# -- addresses ---------------------------------------------------------------------------------
def request(remote_addr: str = "10.0.0.1", **headers: str) -> falcon.Request:
    return falcon.Request(falcon.testing.create_environ(
        remote_addr=remote_addr, headers={k.replace("_", "-"): v for k, v in headers.items()}))


@pytest.mark.parametrize(("peer", "headers", "expected"), [
    # the peer is not trusted: the headers are the client's own words
    ("192.0.2.1", {"X-Forwarded-For": "198.51.100.7"}, "192.0.2.1"),
    ("192.0.2.1", {"Forwarded": "for=198.51.100.7"}, "192.0.2.1"),
    # a trusted peer: the right-most address that is not a trusted proxy
    ("10.0.0.1", {"X-Forwarded-For": "198.51.100.7"}, "198.51.100.7"),
    ("10.0.0.1", {"X-Forwarded-For": "203.0.113.9, 198.51.100.7, 10.0.0.2"}, "198.51.100.7"),
    ("10.0.0.1", {"X-Forwarded-For": "1.2.3.4, 5.6.7.8, 198.51.100.7"}, "198.51.100.7"),
    ("10.0.0.1", {"X-Forwarded-For": "10.0.0.3, 10.0.0.2"}, "10.0.0.3"),  # all trusted
    ("10.0.0.1", {"X-Forwarded-For": "198.51.100.7, unknown"}, "10.0.0.1"),
    ("10.0.0.1", {"X-Forwarded-For": "198.51.100.7:5555"}, "198.51.100.7"),
    ("10.0.0.1", {"X-Forwarded-For": "[2001:db8::1]:443"}, "2001:db8::1"),
    ("10.0.0.1", {"X-Forwarded-For": "::ffff:198.51.100.7"}, "198.51.100.7"),
    ("10.0.0.1", {}, "10.0.0.1"),
    ("::ffff:10.0.0.1", {"X-Forwarded-For": "198.51.100.7"}, "198.51.100.7"),
    ("10.0.0.1", {"Forwarded": 'for=203.0.113.9, for="[2001:db8::1]:443";proto=https'},
     "2001:db8::1"),
    ("10.0.0.1", {"Forwarded": "for=198.51.100.7", "X-Forwarded-For": "198.51.100.8"},
     "198.51.100.8"),  # X-Forwarded-For wins
    ("10.0.0.1", {"Forwarded": "for=_hidden"}, "10.0.0.1"),
    ("fd00::5", {"X-Forwarded-For": "198.51.100.7"}, "198.51.100.7"),
])
def test_client_address(peer: str, headers: dict[str, str], expected: str) -> None:
    proxies = TrustedProxies(["10.0.0.0/8", "fd00::/8"])
    assert proxies.client_address(request(peer, **headers)) == expected
    assert TrustedProxies().client_address(request(peer, **headers)) == peer


def test_a_long_forged_chain_is_cut() -> None:
    chain = ", ".join(["10.0.0.9"] * 100 + ["10.0.0.8"])
    assert TrustedProxies(["10.0.0.0/8"]).client_address(
        request("10.0.0.1", X_Forwarded_For=chain)) == "10.0.0.9"


def test_forwarded_addresses_count_apart_only_behind_a_trusted_proxy(
        redis_client: redis.Redis) -> None:
    a = limited(redis_client, global_per_ip=(1, 60))

    def status(app: Api, forwarded_for: str) -> int:
        return app.client.simulate_get("/", remote_addr="10.0.0.1", headers={
            "X-Forwarded-For": forwarded_for}).status_code

    assert [status(a, f"198.51.100.{n}") for n in range(3)] == [302, 429, 429]
    trusting = behind(a, "10.0.0.1")
    assert [status(trusting, f"198.51.100.{n}") for n in range(3, 6)] == [302, 302, 302]
    assert status(trusting, "198.51.100.3") == 429
    assert set(keys(redis_client)) == {schema.ratelimit("global_per_ip", f"ip:{ip}") for ip in (
        "10.0.0.1", "198.51.100.3", "198.51.100.4", "198.51.100.5")}


# -- configuration -----------------------------------------------------------------------------
def test_trusted_proxies_default_and_normalisation(tmp_path: Path) -> None:
    assert GlobalSettings().trusted_proxies == ()
    config = load(tmp_path, ":config:\n  trusted_proxies: ['10.0.0.5', '192.168.0.0/16', "
                            "'fd00::/8']\n:pools: []\n")
    assert config.settings.trusted_proxies == ("10.0.0.5/32", "192.168.0.0/16", "fd00::/8")
    from_env = load(tmp_path, ":pools: []\n", {"TRUSTED_PROXIES": "10.0.0.5, 10.1.0.0/16"})
    assert from_env.settings.trusted_proxies == ("10.0.0.5/32", "10.1.0.0/16")


def test_a_bad_trusted_proxy_names_file_line_and_key(tmp_path: Path) -> None:
    text = ":config:\n  trusted_proxies:\n    - '10.0.0.5'\n    - 'proxy.example.com'\n" \
           "    - '10.0.0.0/33'\n:pools: []\n"
    found: Any = problems(tmp_path, text)
    assert [(p.key, p.line) for p in found] == [
        ("config.trusted_proxies[1]", 4), ("config.trusted_proxies[2]", 5)]
    assert "'proxy.example.com' is not an IP address or CIDR network" in found[0].message
    assert all(p.source.endswith("vmpooler.yaml") for p in found)
