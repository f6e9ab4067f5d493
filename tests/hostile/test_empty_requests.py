"""On-demand requests for no VM, over TCP through the shipped ``vmpooler run`` and ``api``:
``{}``, ``{"<pool>": 0}`` and ``{"priority": "low"}`` were 201, became ready at once and were
kept 30 days (312 made in 1.7 s with one token). Each is now a 400 with a JSON reason and
writes nothing; the facade refuses the same with ``ValueError``."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import redis

from tests.hostile.service import Service
from vmpooler.actors.storage import schema

pytestmark = pytest.mark.integration

BASIC = {"Authorization": "Basic " + base64.b64encode(b"empty:secret").decode()}
EMPTY_ORDERS: list[Any] = [{}, {"alpha": 0}, {"alpha": "0", "beta": 0}, {"priority": "low"},
                           {"alpha-alias": 0, "priority": "normal"}]


def _request_keys(client: redis.Redis) -> set[str]:
    return set(client.scan_iter(match=schema.odrequest("*"), count=1000))


@pytest.mark.parametrize("order", EMPTY_ORDERS)
def test_a_request_for_no_vm_is_refused_and_leaves_nothing(service: Service,
                                                           order: Any) -> None:
    token = service.request("POST", "/api/v3/token", headers=BASIC)
    assert token.status == 200, token.body
    headers = {"X-AUTH-TOKEN": token.json["token"], "Content-Type": "application/json"}
    client = service.redis_client()
    before = _request_keys(client)
    answers = [service.request("POST", "/api/v3/ondemandvm", order, headers=headers)
               for _ in range(5)]
    assert [a.status for a in answers] == [400] * 5, [a.body for a in answers]
    assert answers[0].json["ok"] is False
    assert "asks for no VM" in answers[0].json["message"]
    assert _request_keys(client) == before, "a request for no VM was recorded"


def test_a_real_request_beside_it_still_works(service: Service) -> None:
    token = service.request("POST", "/api/v3/token", headers=BASIC)
    headers = {"X-AUTH-TOKEN": token.json["token"], "Content-Type": "application/json"}
    answer = service.request("POST", "/api/v3/ondemandvm", {"alpha": 1, "beta": 0},
                             headers=headers)
    assert answer.status == 201, answer.body
    request_id = answer.json["request_id"]
    record = service.redis_client().hgetall(schema.odrequest(request_id))
    assert record["requested"] == "alpha:alpha:1"
    assert service.request("DELETE", f"/api/v3/ondemandvm/{request_id}",
                           headers=headers).status == 200
