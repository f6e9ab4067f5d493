"""``vmpooler api`` (gunicorn, 2 workers) and ``vmpooler manager`` as separate processes,
spoken to over real HTTP."""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.harness import wait_until
from tests.test_manager_process import full, spawn, write_config
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port

pytestmark = pytest.mark.integration


def call(method: str, url: str, body: Any = None, timeout: float = 10) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


@pytest.fixture
def stack(tmp_path: Path, redis_server: EmbeddedRedis,
          redis_client: redis.Redis) -> Iterator[tuple[str, list[subprocess.Popen[str]]]]:
    """A manager and a 2-worker API over the session's redis-server."""
    started: list[subprocess.Popen[str]] = []
    config = write_config(tmp_path / "f.yaml", redis_port=redis_server.port,
                          pools={"alpha": 2, "beta": 100}, dummy={})
    port = free_port()
    spawn(started, "manager", "--config", str(config), log=tmp_path / "manager.log")
    spawn(started, "api", "--config", str(config), "--bind", f"127.0.0.1:{port}",
          "--workers", "2", log=tmp_path / "api.log")
    base = f"http://127.0.0.1:{port}/api/v3"

    def answering() -> bool:
        try:
            return call("GET", f"{base}/vm")[0] == 200
        except OSError:
            return False

    wait_until(answering, 30, "the API to answer")
    yield base, started
    for process in started:
        process.terminate()
    for process in started:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def test_returned_vm_is_being_destroyed_within_a_second(
    stack: tuple[str, list[subprocess.Popen[str]]], redis_client: redis.Redis,
) -> None:
    base, _ = stack
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
    stack: tuple[str, list[subprocess.Popen[str]]], redis_client: redis.Redis,
) -> None:
    base, processes = stack
    wait_until(lambda: full(redis_client, {"beta": 100}), 60, "beta to fill")
    manager = processes[0]
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
