"""What the API shows to whom: the dashboard's activity (request ids and users) and the
readiness probe (manager ids, Redis's address)."""

from __future__ import annotations

import pytest
import redis

from tests.api_harness import TOKEN, Api, api, api_config, api_pool
from tests.openapi_check import body_errors
from vmpooler.actors.storage import schema

READINESS = "/api/v3/readiness"
ACTIVITY = "/dashboard/stats/activity"
REMOTE = "192.0.2.7"


# -- the dashboard's activity -------------------------------------------------------------------
def with_request(redis_client: redis.Redis, *, auth: bool) -> Api:
    a = api(redis_client, api_config([api_pool("deb-1")], auth=auth))
    a.add_token()
    a.redis.zadd(schema.provisioning_processing(), {"req-secret": a.clock.now() - 10})
    a.redis.hset(schema.odrequest("req-secret"), mapping={
        "status": "pending", "token:user": "alice", "token:token": TOKEN,
        "requested": "deb-1:2"})
    return a


def test_activity_names_requests_and_users_only_with_a_token(redis_client: redis.Redis) -> None:
    a = with_request(redis_client, auth=True)
    for headers in (None, {"X-AUTH-TOKEN": "nope"}, {"X-AUTH-TOKEN": ""}):
        result = a.client.simulate_get(ACTIVITY, headers=headers)
        assert result.status_code == 200
        body = result.json
        assert body["requesters"] is False
        assert body["requests"] == [{"created": int(a.clock.now() - 10), "age": 10,
                                     "deadline": int(a.clock.now() - 10) + 300,
                                     "status": "pending", "requested": "deb-1:2",
                                     "priority": "normal", "queue_position": None,
                                     "estimated_ready_at": None}]
        assert "req-secret" not in result.text and "alice" not in result.text
    shown = a.client.simulate_get(ACTIVITY, headers={"X-AUTH-TOKEN": TOKEN}).json
    assert shown["requesters"] is True
    assert [(r["id"], r["user"]) for r in shown["requests"]] == [("req-secret", "alice")]


def test_activity_without_auth_names_them_as_before(redis_client: redis.Redis) -> None:
    body = with_request(redis_client, auth=False).client.simulate_get(ACTIVITY).json
    assert body["requesters"] is True and body["requests"][0]["id"] == "req-secret"


# -- readiness ------------------------------------------------------------------------------------
def readiness(a: Api, **kwargs: object) -> dict:
    result = a.client.simulate_get(READINESS, **kwargs)  # type: ignore[arg-type]
    errors = body_errors("get", READINESS, result.status_code, result.text)
    assert not errors, errors
    return {"status": result.status_code, **result.json}


@pytest.mark.parametrize("auth", [False, True])
def test_readiness_names_managers_only_to_loopback_or_a_token(
        redis_client: redis.Redis, auth: bool) -> None:
    a = api(redis_client, api_config([api_pool("p")], auth=auth))
    a.add_token()
    redis_client.zadd(schema.manager_heartbeat(), {"host-a:41:0": a.clock.now() - 2})
    local = readiness(a, remote_addr="127.0.0.1")
    assert local["managers"]["members"] == [{"id": "host-a:41:0", "age": 2.0, "pools": 0}]
    assert readiness(a, remote_addr="::1")["managers"]["members"][0]["id"] == "host-a:41:0"
    for kwargs in ({"remote_addr": REMOTE},
                   {"remote_addr": REMOTE, "headers": {"X-AUTH-TOKEN": "nope"}},
                   {"remote_addr": "127.0.0.1", "headers": {"X-Forwarded-For": "127.0.0.1"}},
                   {"remote_addr": "127.0.0.1", "headers": {"Forwarded": "for=127.0.0.1"}}):
        hidden = readiness(a, **kwargs)
        assert hidden == {**local, "managers": {**local["managers"],
                                                "members": [{"age": 2.0, "pools": 0}]}}
    token = readiness(a, remote_addr=REMOTE, headers={"X-AUTH-TOKEN": TOKEN})
    assert (token == local) is auth, "a token counts only where auth is configured"


def test_readiness_keeps_its_status_codes_for_anyone(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool("p")]))
    assert readiness(a, remote_addr=REMOTE)["status"] == 503
    assert readiness(a, remote_addr=REMOTE)["errors"] == ["no manager heartbeat"]
    redis_client.zadd(schema.manager_heartbeat(), {"h:1:0": a.clock.now()})
    assert readiness(a, remote_addr=REMOTE)["status"] == 200
    closed = api(redis.Redis(host="127.0.0.1", port=1), api_config([api_pool("p")]))
    down = readiness(closed, remote_addr=REMOTE)
    assert down == {"status": 503, "ok": False, "errors": ["redis unreachable"],
                    "redis": {"ok": False}}
    assert "127.0.0.1:1" in readiness(closed)["errors"][0]
