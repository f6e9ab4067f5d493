"""Anonymous ``/status`` pollers against ``vmpooler api`` with ``:quotas:`` and many users:
the Redis work of one ``/status`` does not grow with the number of users, and many
concurrent pollers finding the users snapshot stale count the users once, not once each.

The API runs alone on a redis-server of this module's own (no manager), so what
``INFO commandstats`` counts is the API's work: the commands the scripts run included. The
users hold VMs of a pool no process manages (``ghost``), written as the checkout script
writes them; counting one user's three VMs is three ``SISMEMBER``, which nothing else sends.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.conftest import TEST_REDIS_SERVER
from tests.harness import wait_until
from tests.hostile.service import Service, start_service
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, find_redis_server
from vmpooler.web.resources import status_users

pytestmark = pytest.mark.integration

FEW, MANY = 10, 1000
VMS_EACH = 3
POLLERS = 16
SEQUENTIAL = 20


@pytest.fixture(scope="module")
def lone_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, redis.Redis]]:
    """``vmpooler api`` (one worker of 8 threads, so which worker holds a copy of the
    snapshot cannot vary) with a ``:quotas:`` limit, alone on its redis-server."""
    server = EmbeddedRedis(data_dir=tmp_path_factory.mktemp("pollers-redis"), persist=False,
                           hardened=False, binary=os.environ.get(TEST_REDIS_SERVER)
                           or find_redis_server(prefer_system=True))
    server.start()
    service = start_service(tmp_path_factory.mktemp("pollers"), "api",
                            {":quotas": {"default": {"vms_held": 10}}},
                            redis_port=server.port, workers=1, manager=False)
    client = service.redis_client()
    yield service, client
    client.close()
    service.stop()
    server.stop()


def add_users(client: redis.Redis, first: int, last: int) -> None:
    """Users ``first``..``last - 1`` holding 3 running VMs each, in the usage index."""
    pipe = client.pipeline(transaction=False)
    for i in range(first, last):
        vms = [f"u{i:05d}v{j}" for j in range(VMS_EACH)]
        pipe.sadd(schema.running("ghost"), *vms)
        pipe.sadd(schema.quota_held(f"user{i:05d}"), *(f"vm:ghost:{vm}" for vm in vms))
        pipe.hset(schema.quota_users(), f"user{i:05d}", f"{i + 1}|10|||")
    pipe.execute()


def snapshot_stale(client: redis.Redis) -> bool:
    """No snapshot, or one the API (same wall clock) no longer serves."""
    at = client.hget(schema.quota_usage_snapshot(), "at")
    return at is None or time.time() - float(at) >= status_users.MAX_AGE + 0.05


def work(client: redis.Redis) -> dict[str, int]:
    """Calls per command since the last reset, INFO and CONFIG (the test's own) left out."""
    stats: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()
            if name.split("|")[0] not in ("cmdstat_info", "cmdstat_config")}


def anonymous_status(service: Service) -> dict[str, Any]:
    answer = service.request("GET", "/api/v3/status")
    assert answer.status == 200, answer.body
    body: dict[str, Any] = answer.json
    return body


def concurrent_status(service: Service, count: int) -> list[dict[str, Any]]:
    barrier = threading.Barrier(count)
    bodies: list[dict[str, Any]] = []
    lock = threading.Lock()

    def poll() -> None:
        barrier.wait(timeout=10)
        body = anonymous_status(service)
        with lock:
            bodies.append(body)

    threads = [threading.Thread(target=poll) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return bodies


def sequential_work(service: Service, client: redis.Redis) -> dict[str, int]:
    """The Redis work of :data:`SEQUENTIAL` anonymous ``/status`` while the snapshot is
    fresh (the first of them asserts it is)."""
    client.config_resetstat()
    for _ in range(SEQUENTIAL):
        anonymous_status(service)
    done = work(client)
    assert "sismember" not in done, "a count of every user ran while the snapshot was fresh"
    return done


def test_status_work_is_the_same_for_10_and_1000_users_and_pollers_count_them_once(
        lone_api: tuple[Service, redis.Redis]) -> None:
    service, client = lone_api
    add_users(client, 0, FEW)
    wait_until(lambda: snapshot_stale(client), 10, "no fresh users snapshot")
    anonymous_status(service)  # counts the users: the snapshot is fresh for MAX_AGE
    few = sequential_work(service, client)

    add_users(client, FEW, MANY)
    wait_until(lambda: snapshot_stale(client), 10, "the users snapshot to be stale")
    client.config_resetstat()
    bodies = concurrent_status(service, POLLERS)
    assert len(bodies) == POLLERS
    # one count of every user (3 SISMEMBER each), not one per poller
    assert work(client).get("sismember") == MANY * VMS_EACH
    assert all(body["users_summary"]["users"] == MANY for body in bodies)
    many = sequential_work(service, client)
    assert many == few
    body = anonymous_status(service)
    assert body["users_summary"] == {**body["users_summary"], "users": MANY,
                                     "vms_held": MANY * VMS_EACH, "listed": 100}
    assert len(body["users"]) == status_users.LISTED
    assert all(name.startswith("user-") for name in body["users"])
