"""One IPv6 client owns a whole prefix: the addresses of one /64 (``ipv6_prefix_length``) are
one client for per-address quotas, the rate limiter and the failed-login guard.

A client with a /64 can send from 2^64 addresses; were each a client of its own, it would
get the per-address quota, rate limit and login allowance that many times. Real Redis,
Falcon's TestClient: the clients come as a trusted proxy's ``X-Forwarded-For`` or as the
peer's own address. tests/hostile/test_ipv6_service.py does the same over HTTP through
gunicorn.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import pytest
import redis

from tests.api_harness import Api, api, api_config, api_pool
from tests.quota_harness import P, quota_api
from tests.test_api_middleware import with_limits
from vmpooler.actors.storage import schema

ONE_64 = [f"2001:db8:1:2::{n}" for n in range(1, 6)]
"""Five addresses of one /64."""
ONE_48 = [f"2001:db8:1:{n}::1" for n in range(1, 6)]
"""Five addresses of one /48, each in a /64 of its own."""
IPV4 = [f"198.51.100.{n}" for n in range(1, 6)]
"""Five IPv4 addresses of one /24: five clients."""
PROXY = "10.0.0.1"


def vms_taken(a: Api, addresses: list[str], each: int, *, forwarded: bool = True) -> int:
    """VMs checked out when every address asks ``each`` times for one (pools in turn)."""
    taken = 0
    for address in addresses:
        for n in range(each):
            pool = "pool1" if n % 2 else "pool2"
            if forwarded:
                r = a.client.simulate_post(f"{P}/vm", json={pool: 1}, remote_addr=PROXY,
                                           headers={"X-Forwarded-For": address})
            else:
                r = a.client.simulate_post(f"{P}/vm", json={pool: 1}, remote_addr=address)
            assert r.status_code in (200, 429), r.text
            taken += r.status_code == 200
    return taken


def held_quota(redis_client: redis.Redis, **settings: Any) -> Api:
    """``vms_held: 3`` for everyone, 24 ready VMs, no auth, 10.0.0.1 a trusted proxy."""
    settings.setdefault("trusted_proxies", (PROXY,))
    return quota_api(redis_client, {"default": {"vms_held": 3}}, auth=False, vms=12, **settings)


# -- per-address quotas ------------------------------------------------------------------------
def test_five_addresses_of_one_64_share_one_quota(redis_client: redis.Redis) -> None:
    a = held_quota(redis_client)
    assert vms_taken(a, ONE_64, 3) == 3  # each address apart: 15
    assert a.redis.scard(schema.quota_held("2001:db8:1:2::/64")) == 3
    r = a.client.simulate_post(f"{P}/vm", json={"pool1": 1}, remote_addr=PROXY,
                               headers={"X-Forwarded-For": "2001:db8:1:2:ffff::9"})
    assert r.status_code == 429
    assert "user '2001:db8:1:2::/64' holds 3 VMs" in r.json["message"]


def test_the_peers_own_ipv6_address_is_grouped_too(redis_client: redis.Redis) -> None:
    a = held_quota(redis_client, trusted_proxies=())
    assert vms_taken(a, ONE_64, 3, forwarded=False) == 3


def test_a_48_prefix_widens_the_client(redis_client: redis.Redis) -> None:
    assert vms_taken(held_quota(redis_client), ONE_48, 3) == 15  # five /64s: five clients
    redis_client.flushdb()
    assert vms_taken(held_quota(redis_client, ipv6_prefix_length=48), ONE_48, 3) == 3


def test_ipv4_clients_stay_apart_and_a_mapped_address_is_its_ipv4(
        redis_client: redis.Redis) -> None:
    a = held_quota(redis_client, trusted_proxies=())
    assert vms_taken(a, IPV4, 3, forwarded=False) == 15
    assert vms_taken(a, ["::ffff:198.51.100.1"], 1, forwarded=False) == 0  # 198.51.100.1's
    assert a.redis.scard(schema.quota_held("198.51.100.1")) == 3


# -- rate limiter ------------------------------------------------------------------------------
def rate_limited(redis_client: redis.Redis, **settings: Any) -> Api:
    """``global_per_ip`` 3 per minute."""
    return api(redis_client, with_limits(api_config(
        [api_pool("pool1")], rate_limiting_enabled=True, **settings), global_per_ip=(3, 60)))


@pytest.mark.parametrize("forwarded", [True, False])
def test_the_rate_limiter_counts_a_64_as_one_client(redis_client: redis.Redis,
                                                    forwarded: bool) -> None:
    a = rate_limited(redis_client, trusted_proxies=(PROXY,) if forwarded else ())

    def get(address: str) -> int:
        if forwarded:
            return a.client.simulate_get("/", remote_addr=PROXY,
                                         headers={"X-Forwarded-For": address}).status_code
        return a.client.simulate_get("/", remote_addr=address).status_code

    assert [get(address) for address in ONE_64] == [302] * 3 + [429] * 2  # before: 5 × 302
    assert [get(address) for address in IPV4] == [302] * 5
    assert redis_client.get(schema.ratelimit("global_per_ip", "ip:2001:db8:1:2::/64")) == "3"


def test_the_rate_limiter_follows_the_prefix_setting(redis_client: redis.Redis) -> None:
    wide = rate_limited(redis_client, ipv6_prefix_length=48)
    assert [wide.client.simulate_get("/", remote_addr=address).status_code
            for address in ONE_48] == [302] * 3 + [429] * 2
    redis_client.flushdb()
    narrow = rate_limited(redis_client, ipv6_prefix_length=128)
    assert [narrow.client.simulate_get("/", remote_addr=address).status_code
            for address in ONE_64] == [302] * 5


# -- failed-login guard ------------------------------------------------------------------------
def basic(user: str) -> dict[str, str]:
    """Credentials the dummy provider refuses (the password is the user name)."""
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{user}".encode()).decode()}


def test_the_login_guard_counts_a_64_as_one_address(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool("pool1")], auth=True,
                                     login_failures_per_address=4, trusted_proxies=(PROXY,)))
    statuses = [a.client.simulate_post(f"{P}/token", remote_addr=PROXY, headers={
        **basic(f"guess{n}"), "X-Forwarded-For": address}).status_code
        for n, address in enumerate(ONE_64)]
    assert statuses == [401] * 4 + [429]  # before: 5 × 401
    assert redis_client.get(schema.login_failures_address("2001:db8:1:2::/64")) == "4"
    ipv4 = [a.client.simulate_post(f"{P}/token", remote_addr=PROXY, headers={
        **basic(f"other{n}"), "X-Forwarded-For": address}).status_code
        for n, address in enumerate(IPV4)]
    assert ipv4 == [401] * 5


def test_the_login_guard_follows_the_prefix_setting(redis_client: redis.Redis) -> None:
    config = api_config([api_pool("pool1")], auth=True, login_failures_per_address=4)
    wide = api(redis_client, dataclasses.replace(config, settings=dataclasses.replace(
        config.settings, ipv6_prefix_length=48)))
    statuses = [wide.client.simulate_post(f"{P}/token", remote_addr=address,
                                          headers=basic(f"guess{n}")).status_code
                for n, address in enumerate(ONE_48)]
    assert statuses == [401] * 4 + [429]
