"""Quotas end to end: ``vmpooler api`` (gunicorn, 2 workers) and ``vmpooler manager`` as
separate processes over the session's redis-server, spoken to over real HTTP with the tokens
of three users: a group's larger ``vms_held``, the default's, ``ondemand_in_flight`` held
across both API workers by concurrent clients, the ``/status`` usage view, and the
``lifetime_hours`` cap on VMs checked out and taken from ready (``ondemand_from_ready``),
whose take is logged in the pool's checkout log."""

from __future__ import annotations

import threading
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

QUOTAS = {
    "default": {"vms_held": 2, "ondemand_in_flight": 1, "lifetime_hours": 5},
    "groups": {"release": {"vms_held": 3}},
    "members": {"release": ["alice"]},
}


@pytest.fixture
def base(tmp_path: Path, redis_server: EmbeddedRedis,
         redis_client: redis.Redis) -> Iterator[str]:
    """The API's base URL; a manager and a 2-worker API with auth and quotas."""
    path = write_config(tmp_path / "quotas.yaml", redis_port=redis_server.port,
                        pools={"alpha": 6, "beta": 1}, dummy={"createvm_max_time": 1})
    document = yaml.safe_load(path.read_text())
    document[":auth"] = {"provider": "dummy"}
    document[":quotas"] = QUOTAS
    document[":pools"][1]["ondemand_from_ready"] = True  # beta
    path.write_text(yaml.safe_dump(document))
    with api_and_manager(tmp_path, path) as url:
        wait_until(lambda: redis_client.scard(schema.ready("alpha")) == 6
                   and redis_client.scard(schema.ready("beta")) == 1, 30, "the pools to fill")
        yield url
    for log in ("manager.log", "api.log"):
        assert "Traceback" not in (tmp_path / log).read_text(), log


def test_users_are_held_to_their_quotas_across_api_processes(
        base: str, redis_client: redis.Redis) -> None:
    tokens = {}
    for user in ("alice", "bob", "carol"):
        status, body = http("POST", f"{base}/token", basic=f"{user}:pw")
        assert status == 200, body
        tokens[user] = body["token"]

    def take(user: str) -> tuple[int, Any]:
        return http("POST", f"{base}/vm", {"alpha": 1}, token=tokens[user])

    alice = [take("alice") for _ in range(3)]
    assert [status for status, _ in alice] == [200, 200, 200]  # group release: 3
    for _, body in alice:  # vm_lifetime (24) capped by the default's lifetime_hours
        assert redis_client.hget(schema.vm(body["alpha"]["hostname"].split(".")[0]),
                                 "lifetime") == "5"
    status, body = take("alice")
    assert (status, body["reason"], body["quota"], body["limit"], body["in_use"]) == (
        429, "quota", "vms_held", 3, 3)
    assert [take("bob")[0] for _ in range(3)] == [200, 200, 429]  # the default: 2

    # ten concurrent on-demand requests of carol, spread over both workers: one in flight
    statuses: list[int] = []
    ids: list[str] = []
    barrier = threading.Barrier(10)
    lock = threading.Lock()

    def ask() -> None:
        barrier.wait(timeout=10)
        status, body = http("POST", f"{base}/ondemandvm", {"alpha": 1}, token=tokens["carol"])
        with lock:
            statuses.append(status)
            if status == 201:
                ids.append(body["request_id"])

    threads = [threading.Thread(target=ask) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(statuses) == [201] + [429] * 9

    users = http("GET", f"{base}/status", token=tokens["bob"])[1]["users"]
    assert {name: (u["vms_held"], u["ondemand_in_flight"], u["limits"]["vms_held"])
            for name, u in users.items()} == {
        "alice": (3, 0, 3), "bob": (2, 0, 2), "carol": (1, 1, 2)}
    hidden = http("GET", f"{base}/status")[1]["users"]
    assert sorted(hidden) == ["user-1", "user-2", "user-3"]

    [request_id] = ids
    wait_until(lambda: http("GET", f"{base}/ondemandvm/{request_id}")[0] == 200, 60,
               "carol's request to be ready")
    [vm] = redis_client.smembers(schema.request_vms(request_id, "alpha", "alpha"))
    assert redis_client.hget(schema.vm(vm), "lifetime") == "5"  # a clone, capped

    def carol_counts() -> tuple[int, int]:
        carol = http("GET", f"{base}/status", token=tokens["carol"])[1]["users"]["carol"]
        return carol["vms_held"], carol["ondemand_in_flight"]

    # /status shows a snapshot at most 5 s old (status_users.MAX_AGE)
    wait_until(lambda: carol_counts() == (1, 0), 15, "/status to count carol's ready request")
    status, body = http("POST", f"{base}/ondemandvm", {"beta": 1}, token=tokens["carol"])
    assert status == 201  # no longer in flight: room for one more
    request_id = body["request_id"]
    wait_until(lambda: http("GET", f"{base}/ondemandvm/{request_id}")[0] == 200, 60,
               "carol's second request to be ready")
    [vm] = redis_client.smembers(schema.request_vms(request_id, "beta", "beta"))
    assert redis_client.hget(schema.vm(vm), "lifetime") == "5"  # taken from ready, capped
    assert [member.split(":", 1)[1] for member in  # and logged as a checkout
            redis_client.zrange(schema.demand("beta"), 0, -1)] == [vm]
