"""Fair shares, priorities and ``ondemand_from_ready`` end to end: ``vmpooler api`` and
``vmpooler manager`` as separate processes over the session's redis-server, spoken to over
real HTTP with tokens of several users (``:quotas:`` gives shares and ``high``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.api_manager import api_and_manager, http
from tests.harness import wait_until
from tests.test_manager_process import write_config
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis

pytestmark = pytest.mark.integration

USERS = ("flood", "one", "boss", "carol")


def call(method: str, url: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
    return http(method, url, body, token)


def token_of(user: str) -> str:
    return f"token-of-{user}-0123456789abcdef"


@pytest.fixture
def base(tmp_path: Path, redis_server: EmbeddedRedis,
         redis_client: redis.Redis) -> Iterator[str]:
    path = write_config(tmp_path / "fair.yaml", redis_port=redis_server.port,
                        pools={"warm": 2, "cold": 0},
                        dummy={"filename": str(tmp_path / "dummy.yaml"),
                               "createvm_max_time": 0.3})
    document = yaml.safe_load(path.read_text())
    document[":config"]["ondemand_clone_limit"] = 1
    document[":auth"] = {"provider": "dummy"}
    document[":quotas"] = {"high_priority": {"users": ["boss"]}}
    for pool in document[":pools"]:
        if pool["name"] == "warm":
            pool["ondemand_from_ready"] = True
    path.write_text(yaml.safe_dump(document))
    for user in USERS:
        redis_client.hset(schema.token(token_of(user)), mapping={"user": user})
    with api_and_manager(tmp_path, path) as url:
        yield url


def post(base: str, user: str, order: dict[str, Any]) -> str:
    status, body = call("POST", f"{base}/ondemandvm", order, token_of(user))
    assert status == 201, (user, order, body)
    return str(body["request_id"])


def ready(base: str, rid: str) -> bool:
    return call("GET", f"{base}/ondemandvm/{rid}")[1].get("ready") is True


@pytest.mark.timeout(120)
def test_shares_priorities_and_ready_vms_through_the_shipped_processes(
    base: str, redis_client: redis.Redis,
) -> None:
    # ondemand_from_ready: the warm pool's two ready VMs are taken at once; it refills
    wait_until(lambda: redis_client.scard(schema.ready("warm")) == 2, 30, "warm to fill")
    warm = set(redis_client.smembers(schema.ready("warm")))
    rid = post(base, "carol", {"warm": 2})
    wait_until(lambda: ready(base, rid), 10, "carol's request")
    assert set(redis_client.smembers(schema.request_vms(rid, "warm", "warm"))) == warm
    wait_until(lambda: redis_client.scard(schema.ready("warm")) == 2, 30, "warm to refill")

    # a flood of 25 requests (50 VMs) by one user; then one VM by another, and a high one
    flood = [post(base, "flood", {"cold": 2}) for _ in range(25)]
    one = post(base, "one", {"cold": 1})
    status, body = call("POST", f"{base}/ondemandvm", {"cold": 1, "priority": "high"},
                        token_of("one"))
    assert status == 403 and body["reason"] == "priority"
    boss = post(base, "boss", {"cold": 1, "priority": "high"})

    def flood_delivered() -> int:
        return sum(redis_client.scard(schema.request_vms(r, "cold", "cold")) for r in flood)

    wait_until(lambda: ready(base, one) and ready(base, boss), 60, "one's and boss's VMs")
    # served within a few grants, not after a turn of each of the 25 flood requests
    assert flood_delivered() <= 6, flood_delivered()
    for r in flood:
        call("DELETE", f"{base}/ondemandvm/{r}", token=token_of("flood"))
