"""The rate limiter and the failed-login guard over TCP, against a real ``vmpooler run``.

This module's service has low limits and trusts 127.0.0.1 as a proxy, so each test plays its
own client by sending its own ``X-Forwarded-For`` address (198.51.100.<n>). The shared
``run_service`` (no trusted proxy) shows that the header is ignored when the peer is not
trusted.
"""

from __future__ import annotations

import base64
import http.client
import secrets
from collections.abc import Iterator, Mapping

import pytest

from tests.hostile.service import Answer, Service, start_service

pytestmark = pytest.mark.integration

PER_ADDRESS = 20
LIMITS = {
    "global_per_ip": {"limit": PER_ADDRESS, "period": 600},
    "authenticated": {"limit": 1000, "period": 600},
    "vm_creation": {"limit": 1000, "period": 600},
    "vm_deletion": {"limit": 1000, "period": 600},
}
LOGIN = {"login_failures_per_user": 3, "login_failures_per_address": 6,
         "login_failure_window": 600}


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``vmpooler run`` with ``global_per_ip`` 20 per 10 min, 127.0.0.1 a trusted proxy, and
    logins locked after 3 failures per user / 6 per address."""
    service = start_service(tmp_path_factory.mktemp("hostile-ratelimit"), "run", overrides={
        ":rate_limits": LIMITS, ":config": {"trusted_proxies": ["127.0.0.1"], **LOGIN}})
    yield service
    service.stop()


class KeepAlive:
    """Requests on one keep-alive connection (many requests in little time)."""

    def __init__(self, service: Service) -> None:
        self.connection = http.client.HTTPConnection(service.host, service.port, timeout=10)

    def get(self, path: str, headers: Mapping[str, str]) -> int:
        self.connection.request("GET", path, headers=dict(headers))
        response = self.connection.getresponse()
        response.read()
        return response.status

    def close(self) -> None:
        self.connection.close()


def ratelimit_keys(service: Service) -> dict[str, str]:
    client = service.redis_client()
    try:
        return {key: client.get(key) for key in client.scan_iter("vmpooler__ratelimit__*")}
    finally:
        client.close()


def basic(user: str, password: str, address: str) -> dict[str, str]:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}", "X-Forwarded-For": address}


def made_up_token(n: int) -> str:
    return secrets.token_hex(16) if n % 2 else secrets.token_urlsafe(6000)  # 8 KB


# -- made-up tokens --------------------------------------------------------------------------
def test_made_up_tokens_are_limited_by_address(limited: Service) -> None:
    client = KeepAlive(limited)
    try:
        statuses = [client.get("/api/v3/status", {"X-AUTH-TOKEN": made_up_token(n),
                                                  "X-Forwarded-For": "198.51.100.10"})
                    for n in range(PER_ADDRESS + 10)]
    finally:
        client.close()
    assert statuses == [200] * PER_ADDRESS + [429] * 10
    refused = limited.request("GET", "/api/v3/status", headers={
        "X-AUTH-TOKEN": secrets.token_hex(16), "X-Forwarded-For": "198.51.100.10"})
    assert refused.status == 429
    assert refused.json["limit"] == PER_ADDRESS  # not authenticated's 1000
    assert int(refused.headers["retry-after"]) > 0


def test_a_thousand_made_up_tokens_leave_one_key(limited: Service) -> None:
    before = ratelimit_keys(limited)
    client = KeepAlive(limited)
    try:
        statuses = [client.get("/api/v3/vm", {"X-AUTH-TOKEN": made_up_token(n),
                                              "X-Forwarded-For": "198.51.100.11"})
                    for n in range(1000)]
    finally:
        client.close()
    assert statuses.count(200) == PER_ADDRESS and statuses.count(429) == 1000 - PER_ADDRESS
    after = ratelimit_keys(limited)
    assert set(after) - set(before) == {"vmpooler__ratelimit__global_per_ip__ip:198.51.100.11"}
    assert max(len(key) for key in after) < 100


# -- trusted proxies ---------------------------------------------------------------------------
def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_counter(
        limited: Service) -> None:
    client = KeepAlive(limited)
    try:
        first = [client.get("/api/v3/vm", {"X-Forwarded-For": "203.0.113.1, 198.51.100.20"})
                 for _ in range(PER_ADDRESS + 1)]
        other = client.get("/api/v3/vm", {"X-Forwarded-For": "198.51.100.21"})
        forged_left = client.get("/api/v3/vm", {"X-Forwarded-For": "203.0.113.2, 198.51.100.20"})
    finally:
        client.close()
    assert first == [200] * PER_ADDRESS + [429]
    assert other == 200  # another client (the proxy says so): a counter of its own
    assert forged_left == 429  # what the client wrote left of the proxy's entry is ignored
    keys = ratelimit_keys(limited)
    assert keys["vmpooler__ratelimit__global_per_ip__ip:198.51.100.20"] == str(PER_ADDRESS)
    assert keys["vmpooler__ratelimit__global_per_ip__ip:198.51.100.21"] == "1"
    assert not [key for key in keys if "203.0.113." in key]


def test_an_untrusted_peer_cannot_pick_its_address(run_service: Service) -> None:
    """The shared service trusts no proxy: a forged X-Forwarded-For or Forwarded is ignored
    and the request counts under 127.0.0.1 (its limits are too high to refuse it)."""
    counter = "vmpooler__ratelimit__global_per_ip__ip:127.0.0.1"
    before = int(ratelimit_keys(run_service).get(counter, 0))
    for n in range(5):
        answer = run_service.request("GET", "/api/v3/vm", headers={
            "X-Forwarded-For": f"198.51.100.{100 + n}", "Forwarded": f"for=198.51.100.{110 + n}"})
        assert answer.status == 200
    keys = ratelimit_keys(run_service)
    assert int(keys[counter]) >= before + 5
    assert not [key for key in keys if "198.51.100." in key]


# -- password guessing ---------------------------------------------------------------------------
def create_token(service: Service, user: str, password: str, address: str) -> Answer:
    return service.request("POST", "/api/v3/token", headers=basic(user, password, address))


def token_count(service: Service) -> int:
    client = service.redis_client()
    try:
        return sum(1 for _ in client.scan_iter("vmpooler__token__*"))
    finally:
        client.close()


def test_guessing_a_password_locks_the_user_without_asking_the_provider(
        limited: Service) -> None:
    address = "198.51.100.30"
    assert [create_token(limited, "mallory", "mallory", address).status
            for _ in range(LOGIN["login_failures_per_user"])] == [401] * 3
    tokens = token_count(limited)
    # the dummy provider accepts any password that differs from the name: refused unasked
    locked = create_token(limited, "mallory", "correct horse", address)
    assert locked.status == 429
    assert locked.json == {"ok": False, "error": "Too many failed logins", "limit": 3,
                           "period": 600, "retry_after": int(locked.headers["retry-after"])}
    assert 0 < int(locked.headers["retry-after"]) <= 600
    assert create_token(limited, "MALLORY", "correct horse", "198.51.100.31").status == 429
    assert token_count(limited) == tokens
    assert create_token(limited, "alice", "correct horse", address).status == 200


def test_guessing_many_users_locks_the_address(limited: Service) -> None:
    address = "198.51.100.40"
    statuses = [create_token(limited, f"user{n}", f"user{n}", address).status
                for n in range(LOGIN["login_failures_per_address"])]
    assert statuses == [401] * LOGIN["login_failures_per_address"]
    locked = create_token(limited, "bob", "right", address)
    assert (locked.status, locked.json["limit"]) == (429, LOGIN["login_failures_per_address"])
    assert create_token(limited, "bob", "right", "198.51.100.41").status == 200
    refused = [line for line in limited.request("GET", "/prometheus").body.decode().splitlines()
               if line.startswith("vmpooler_api_login_refused_total{")
               and 'scope="address"' in line]
    assert len(refused) == 1 and float(refused[0].rsplit(" ", 1)[1]) >= 1
