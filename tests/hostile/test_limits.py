"""Limits against hostile and careless clients, over TCP: pool sizes (``max_pool_size``) in
the API and in the manager, on-demand counts, and the on-demand requests one user may have
in flight (``max_ondemand_requests_per_user``), concurrent POSTs included."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness import wait_until
from tests.hostile.service import Answer, Service, start_service

pytestmark = pytest.mark.integration

JSON = {"Content-Type": "application/json"}
HUGE_SIZES = ["1e300", "9" * 4000, "10001", '"' + "9" * 5000 + '"']
LIMIT = 4  # the own service's max_pool_size
IN_FLIGHT = 2  # the own service's max_ondemand_requests_per_user


def basic(user: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:pw".encode()).decode()}


def token_of(service: Service, user: str) -> dict[str, str]:
    answer = service.request("POST", "/api/v3/token", headers=basic(user))
    assert answer.status == 200, answer.body
    return {"X-AUTH-TOKEN": answer.json["token"], **JSON}


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``vmpooler run`` with a small ``max_pool_size`` and a per-user in-flight limit; no
    on-demand clone ever starts (``ondemand_clone_limit: 0``), so requests stay in flight.
    Pools cycle every half second, so a size override nobody announces is read within 2.5 s
    (five cycles)."""
    service = start_service(tmp_path_factory.mktemp("hostile-limits"), "run", {":config": {
        "max_pool_size": LIMIT, "max_ondemand_requests_per_user": IN_FLIGHT,
        "ondemand_clone_limit": 0, "ondemand_request_ttl": 60,
        "check_loop_delay_min": 0.5, "check_loop_delay_max": 0.5}})
    yield service
    service.stop()


@pytest.mark.parametrize("size", HUGE_SIZES)
def test_a_huge_pool_size_is_400_naming_the_limit_and_writes_nothing(service: Service,
                                                                     size: str) -> None:
    auth = token_of(service, "sizer")
    started = time.monotonic()
    answer = service.request("POST", "/api/v3/config/poolsize", f'{{"alpha": {size}}}',
                             headers=auth)
    elapsed = time.monotonic() - started
    assert answer.status == 400, answer.body
    assert answer.json == {"ok": False, "not_configured": ["alpha"],
                           "error": "the size of 'alpha' must be at most 10000 (max_pool_size)"}
    assert elapsed < 1.0
    assert service.redis_client().hget("vmpooler__config__poolsize", "alpha") is None


def test_the_limit_of_the_configuration_is_the_one_named(limited: Service) -> None:
    auth = token_of(limited, "sizer")
    answer = limited.request("POST", "/api/v3/config/poolsize", '{"alpha": 5}', headers=auth)
    assert (answer.status, answer.json["error"]) == (
        400, f"the size of 'alpha' must be at most {LIMIT} (max_pool_size)")
    assert limited.redis_client().hget("vmpooler__config__poolsize", "alpha") is None


def test_a_planted_size_override_never_grows_the_pool_beyond_the_limit(
        limited: Service) -> None:
    """A 5,000-digit size written straight into Redis (vmpooler's Ruby API, redis-cli): the
    manager keeps beta at max_pool_size and the service keeps answering."""
    client = limited.redis_client()
    client.hset("vmpooler__config__poolsize", "beta", "9" * 5000)
    try:
        wait_until(lambda: client.scard("vmpooler__ready__beta") == LIMIT, 30,
                   f"beta to hold {LIMIT} ready VMs")
        seen: list[int] = []

        def watched(until: float) -> bool:
            seen.append(client.scard("vmpooler__ready__beta")
                        + client.scard("vmpooler__pending__beta"))
            return time.monotonic() >= until

        until = time.monotonic() + 2  # four check cycles
        wait_until(lambda: watched(until), 10, "two seconds of watching beta")
        assert max(seen) == LIMIT, seen
        status = limited.request("GET", "/api/v3/status", timeout=5)
        assert status.status == 200 and status.json["pools"]["beta"]["max"] == LIMIT
        assert limited.log_text().count(
            f"is above max_pool_size {LIMIT}: the pool is kept at {LIMIT}") == 1
        assert "Traceback" not in limited.log_text()
    finally:
        client.hdel("vmpooler__config__poolsize", "beta")
        client.sadd("vmpooler__pool__undo_size_override", "beta")


@pytest.mark.parametrize("body", ['{"alpha": 1e300}', '{"alpha": %s}' % ("9" * 4000),
                                  '{"alpha": "%s"}' % ("9" * 5000)])
def test_a_huge_on_demand_count_is_vmpoolers_403(service: Service, body: str) -> None:
    answer = service.request("POST", "/api/v3/ondemandvm", body,
                             headers=token_of(service, "counter"))
    assert (answer.status, answer.json) == (403, {
        "ok": False, "message": "requested amount of instances exceeds the maximum 10"})


def create(service: Service, auth: dict[str, str]) -> Answer:
    return service.request("POST", "/api/v3/ondemandvm", '{"alpha": 1}', headers=auth)


def test_a_user_gets_at_most_the_limit_in_flight_even_when_racing(limited: Service) -> None:
    auth = token_of(limited, "racer")
    answers: list[Answer] = []
    barrier = threading.Barrier(10)

    def race() -> None:
        barrier.wait()
        answers.append(create(limited, auth))

    threads = [threading.Thread(target=race) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    statuses = sorted(a.status for a in answers)
    assert statuses == [201] * IN_FLIGHT + [429] * (10 - IN_FLIGHT), statuses
    refused: dict[str, Any] = next(a.json for a in answers if a.status == 429)
    assert refused == {"ok": False, "message": (
        f"user 'racer' has {IN_FLIGHT} on-demand requests in flight; the maximum is "
        f"{IN_FLIGHT} (max_ondemand_requests_per_user)")}
    created = [a.json["request_id"] for a in answers if a.status == 201]
    assert create(limited, token_of(limited, "racer")).status == 429  # any token of the user
    assert create(limited, token_of(limited, "bystander")).status == 201
    deleted = limited.request("DELETE", f"/api/v3/ondemandvm/{created[0]}", headers=auth)
    assert deleted.status == 200
    assert create(limited, auth).status == 201
    assert create(limited, auth).status == 429
