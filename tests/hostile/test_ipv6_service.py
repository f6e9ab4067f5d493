"""Over HTTP through gunicorn (``vmpooler run``): five IPv6 addresses of one /64, forwarded by
a trusted proxy, are one client for the per-address quota, the rate limiter and the
failed-login guard.

The service trusts 127.0.0.1 as a proxy, so each request names its client in
``X-Forwarded-For``; each test uses a /64 of its own.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

from tests.harness import wait_until
from tests.hostile.service import Service, start_service

pytestmark = pytest.mark.integration

HELD = 3
PER_ADDRESS = 20
LOGIN_PER_ADDRESS = 6
POOL_SIZE = 10


def one_64(network: int) -> list[str]:
    """Five addresses of the /64 ``2001:db8:<network>:1::/64``."""
    return [f"2001:db8:{network}:1::{n}" for n in range(1, 6)]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``vmpooler run``: ``vms_held: 3`` for everyone, ``global_per_ip`` 20 per 10 min, logins
    locked after 6 failures per address, 127.0.0.1 a trusted proxy, two pools of 10."""
    pools = [{"name": name, "size": POOL_SIZE, "provider": "dummy", "dns_plugin": "local"}
             for name in ("alpha", "beta")]
    running = start_service(tmp_path_factory.mktemp("hostile-ipv6"), "run", overrides={
        ":config": {"trusted_proxies": ["127.0.0.1"], "login_failures_per_user": 100,
                    "login_failures_per_address": LOGIN_PER_ADDRESS},
        ":rate_limits": {"global_per_ip": {"limit": PER_ADDRESS, "period": 600}},
        ":quotas": {"default": {"vms_held": HELD}},
        ":pools": pools})
    yield running
    running.stop()


def ready(service: Service) -> int:
    client = service.redis_client()
    try:
        return sum(int(client.scard(f"vmpooler__ready__{pool}")) for pool in ("alpha", "beta"))
    finally:
        client.close()


def test_five_addresses_of_one_64_get_one_quota(service: Service) -> None:
    wait_until(lambda: ready(service) == 2 * POOL_SIZE, 60, "the pools to fill")
    statuses = [service.request("POST", "/api/v3/vm", {pool: 1},
                                headers={"X-Forwarded-For": address}).status
                for address in one_64(1) for pool in ("alpha", "beta", "alpha")]
    assert statuses.count(200) == HELD, statuses  # each address apart: 15 of 15
    assert statuses.count(429) == 15 - HELD, statuses
    refused = service.request("POST", "/api/v3/vm", {"beta": 1},
                              headers={"X-Forwarded-For": "2001:db8:1:1:ffff::1"})
    assert refused.status == 429
    assert "user '2001:db8:1:1::/64' holds 3 VMs" in refused.json["message"]
    other = service.request("POST", "/api/v3/vm", {"beta": 1},
                            headers={"X-Forwarded-For": "2001:db8:1:2::1"})
    assert other.status == 200  # the next /64 is another client


def test_the_rate_limiter_counts_one_64_once(service: Service) -> None:
    statuses = [service.request("GET", "/api/v3/vm", headers={"X-Forwarded-For": address}).status
                for address in one_64(2) for _ in range(5)]
    assert statuses == [200] * PER_ADDRESS + [429] * 5  # each address apart: 25 × 200
    client = service.redis_client()
    try:
        assert client.get("vmpooler__ratelimit__global_per_ip__ip:2001:db8:2:1::/64") == str(
            PER_ADDRESS)
    finally:
        client.close()


def test_the_login_guard_counts_one_64_once(service: Service) -> None:
    def guess(user: str, address: str) -> int:
        raw = base64.b64encode(f"{user}:{user}".encode()).decode()  # dummy auth refuses it
        return service.request("POST", "/api/v3/token", headers={
            "Authorization": f"Basic {raw}", "X-Forwarded-For": address}).status

    statuses = [guess(f"guess{n}{m}", address)
                for n, address in enumerate(one_64(3)) for m in range(2)]
    assert statuses == [401] * LOGIN_PER_ADDRESS + [429] * 4  # each address apart: 10 × 401
