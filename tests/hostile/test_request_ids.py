"""Hostile on-demand request ids, over TCP: an id that could become part of another key
(``vm__inj`` made ``vmpooler__vm__inj__<alias>__<pool>`` a set among the VM hashes, and
every purge and health check failed from then on) is refused with a 400 JSON on every
route, and a key of the wrong type planted in Redis by other means stops no purge or health
cycle of a real ``vmpooler run``."""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Iterator

import pytest

from tests.harness import wait_until
from tests.hostile.service import Service, start_service

pytestmark = pytest.mark.integration

HOSTILE_IDS = ["vm__inj", "vm", "token", "dlq_", "_x", "a__b", "odrequest", "x" * 65,
               "a:b", "a b", "../../etc", "ünï", "a\u0000b", "*", "vm__*"]
BASIC = {"Authorization": "Basic " + base64.b64encode(b"hostile:secret").decode()}


def token_of(service: Service) -> dict[str, str]:
    answer = service.request("POST", "/api/v3/token", headers=BASIC)
    assert answer.status == 200, answer.body
    return {"X-AUTH-TOKEN": answer.json["token"]}


@pytest.mark.parametrize("request_id", HOSTILE_IDS)
def test_hostile_request_ids_are_refused_on_every_route(service: Service,
                                                        request_id: str) -> None:
    auth = token_of(service)
    client = service.redis_client()
    created = service.request("POST", "/api/v3/ondemandvm",
                              {"alpha": 1, "request_id": request_id}, headers=auth)
    assert created.status == 400, created.body
    assert created.json["ok"] is False and created.json["message"].startswith("request_id must")
    path = "/api/v3/ondemandvm/" + urllib.parse.quote(request_id, safe="")
    for method in ("GET", "DELETE"):
        answer = service.request(method, path, headers=auth)
        assert answer.status in (400, 404), (method, answer.status, answer.body)
        assert answer.headers["content-type"].startswith("application/json")
        assert answer.json["ok"] is False
    assert not client.exists(f"vmpooler__odrequest__{request_id}")
    assert not client.exists(f"vmpooler__{request_id}__alpha__alpha")


@pytest.fixture(scope="module")
def housekeeping(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``vmpooler run`` purging and checking queue health every second."""
    service = start_service(tmp_path_factory.mktemp("hostile-ids"), "run", {":config": {
        "purge_enabled": True, "purge_interval": 1, "health_check_enabled": True,
        "health_check_interval": 1, "dlq_enabled": True}})
    yield service
    service.stop()


def cycles(service: Service) -> int:
    return service.log_text().count("[purge] completed purge cycle")


def test_a_key_of_the_wrong_type_stops_no_purge_or_health_cycle(housekeeping: Service) -> None:
    service, client = housekeeping, housekeeping.redis_client()
    wait_until(lambda: client.exists("vmpooler__health"), 20, "a first health check")
    planted = ["vmpooler__vm__inj__alpha__alpha", "vmpooler__vm__plain-string",
               "vmpooler__dlq__bogus", "vmpooler__token__not-a-hash"]
    client.sadd(planted[0], "x")  # what POST request_id=vm__inj left behind
    client.set(planted[1], "x")
    client.set(planted[2], "x")
    client.sadd(planted[3], "x")
    before = cycles(service)
    stamps = {client.hget("vmpooler__health", "last_check")}

    def fresh_health() -> bool:
        stamps.add(client.hget("vmpooler__health", "last_check"))
        return len(stamps) >= 3

    wait_until(lambda: cycles(service) >= before + 3, 20, "three purge cycles after planting")
    wait_until(fresh_health, 20, "two more health checks after planting")
    log = service.log_text()
    assert "WRONGTYPE" not in log and "redis unavailable" not in log
    for key in planted[:3]:
        assert log.count(f"skipping key '{key}'") == 1, key
    mine = token_of(service)["X-AUTH-TOKEN"]
    for _ in range(2):  # the token listing walks vmpooler__token__*
        listing = service.request("GET", "/api/v3/token", headers=BASIC)
        assert listing.status == 200 and mine in listing.json, listing.body
    assert service.log_text().count(f"skipping key '{planted[3]}'") == 1
    assert service.answering()
