"""``vmpooler api`` (gunicorn, 2 workers) and ``vmpooler manager`` as separate processes,
spoken to over real HTTP."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.api_manager import Stack, api_and_manager_stack, http
from tests.harness import wait_until
from tests.test_manager_process import full, write_config
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis

pytestmark = pytest.mark.integration


def call(method: str, url: str, body: Any = None, timeout: float = 10) -> tuple[int, Any]:
    """The status and JSON body of one request without credentials (:func:`http`)."""
    return http(method, url, body, timeout=timeout)


@pytest.fixture
def stack(tmp_path: Path, redis_server: EmbeddedRedis,
          redis_client: redis.Redis) -> Iterator[Stack]:
    """A manager and a 2-worker API over the session's redis-server."""
    config = write_config(tmp_path / "f.yaml", redis_port=redis_server.port,
                          pools={"alpha": 2, "beta": 100}, dummy={})
    with api_and_manager_stack(tmp_path, config, debug=False) as running:
        yield running


def test_returned_vm_is_being_destroyed_within_a_second(
    stack: Stack, redis_client: redis.Redis,
) -> None:
    base = stack.url
    wait_until(lambda: full(redis_client, {"alpha": 2}), 30, "alpha to fill")
    status, body = call("POST", f"{base}/vm/alpha")
    assert status == 200, body
    vm = body["alpha"]["hostname"].split(".")[0]
    assert redis_client.sismember(schema.running("alpha"), vm)
    status, body = call("DELETE", f"{base}/vm/{vm}")
    assert (status, body) == (200, {"ok": True})
    wait_until(lambda: redis_client.hget(schema.vm(vm), "destroy") is not None
               or not redis_client.exists(schema.vm(vm)), 1.0,
               "the returned VM to be destroyed within 1 s")


def test_200_concurrent_checkouts_of_100_ready_vms(
    stack: Stack, redis_client: redis.Redis,
) -> None:
    base = stack.url
    wait_until(lambda: full(redis_client, {"beta": 100}), 60, "beta to fill")
    manager = stack.manager
    manager.terminate()  # no refill during the burst: exactly 100 VMs can be had
    assert manager.wait(timeout=20) == 0
    results: list[tuple[int, Any]] = []
    lock = threading.Lock()

    def checkout() -> None:
        outcome = call("POST", f"{base}/vm", {"beta": 1}, timeout=30)
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=checkout) for _ in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 200
    hostnames = [body["beta"]["hostname"] for status, body in results if status == 200]
    assert len(hostnames) == 100
    assert len(set(hostnames)) == 100, "a VM was handed out twice"
    assert all(status == 503 for status, _ in results if status != 200)
