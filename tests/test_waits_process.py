"""Honest waits through the shipped ``vmpooler run`` (API, manager and dummy provider in one
process), over real HTTP: requests queued behind one on-demand clone slot show
``queue_position`` and ``estimated_ready_at`` while they wait, and a request the pool can
never hold fails at once with its reason."""

from __future__ import annotations

import subprocess
from datetime import datetime
from pathlib import Path

import pytest
import redis
import yaml

from tests.harness import wait_until
from tests.test_api_processes import call
from tests.test_manager_process import processes, spawn, write_config  # noqa: F401
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _serve(tmp_path: Path, redis_server: EmbeddedRedis,
           processes: list[subprocess.Popen[str]], *, clone_time: float) -> str:
    """``vmpooler run`` with pool ``a`` (empty, clones up to ``clone_time`` s), one on-demand
    clone slot and ``max_pool_size`` 5; the API's base URL once it answers."""
    config = write_config(tmp_path / "waits.yaml", redis_port=redis_server.port,
                          pools={"a": 0}, dummy={"createvm_max_time": clone_time})
    document = yaml.safe_load(config.read_text())
    document[":config"].update({"ondemand_clone_limit": 1, "max_pool_size": 5})
    config.write_text(yaml.safe_dump(document))
    port = free_port()
    base = f"http://127.0.0.1:{port}/api/v3"
    spawn(processes, "run", "--config", str(config), "--bind", f"127.0.0.1:{port}",
          cwd=tmp_path, log=tmp_path / "run.log")

    def answering() -> bool:
        try:
            return call("GET", f"{base}/vm")[0] == 200
        except OSError:
            return False

    wait_until(answering, 30, "the API to answer")
    return base


def test_waits_over_http(tmp_path: Path, redis_server: EmbeddedRedis,
                         redis_client: redis.Redis,
                         processes: list[subprocess.Popen[str]]) -> None:
    base = _serve(tmp_path, redis_server, processes, clone_time=3)
    ids = []
    for _ in range(3):
        status, body = call("POST", f"{base}/ondemandvm", {"a": 1})
        assert status == 201, body
        ids.append(body["request_id"])

    def waiting(rid: str) -> dict | None:  # type: ignore[type-arg]
        status, body = call("GET", f"{base}/ondemandvm/{rid}")
        return body if status == 202 and "queue_position" in body else None

    last = wait_until(lambda: waiting(ids[2]), 20, "the third request's wait",
                      explain=lambda: (tmp_path / "run.log").read_text()[-3000:])
    assert last["queue_position"] in (0, 1)  # behind the second's VM, or next
    assert last["estimated_ready_in"] > 0
    assert datetime.fromisoformat(last["estimated_ready_at"]).utcoffset().total_seconds() == 0
    for rid in ids:
        wait_until(lambda r=rid: call("GET", f"{base}/ondemandvm/{r}")[0] == 200, 60,
                   f"request {rid} ready")
        body = call("GET", f"{base}/ondemandvm/{rid}")[1]
        assert body["ready"] is True and "queue_position" not in body

    status, body = call("POST", f"{base}/ondemandvm", {"a": 6})
    assert status == 201, body
    rid = body["request_id"]
    wait_until(lambda: call("GET", f"{base}/ondemandvm/{rid}")[0] == 200, 20, "the refusal")
    body = call("GET", f"{base}/ondemandvm/{rid}")[1]
    assert body["message"] == ("Impossible request: 6 VMs of pool 'a' asked for, more than it "
                               "can ever hold (max_pool_size 5)")


def test_a_multi_vm_request_foresees_the_arrivals_over_http(
        tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
        processes: list[subprocess.Popen[str]]) -> None:
    """One clone slot, clones that outlast the test (the pool has published no times: two
    minutes each). Six one-VM requests, then one of two VMs: its second VM waits its turn
    behind the requests expected to arrive meanwhile (seven in the first seconds: one every
    ~86 s), so its estimate is several clones beyond the queue's own play (its two VMs
    after the ones ahead: about (position + 3) x 120 s)."""
    base = _serve(tmp_path, redis_server, processes, clone_time=900)
    for _ in range(6):
        assert call("POST", f"{base}/ondemandvm", {"a": 1})[0] == 201
    status, body = call("POST", f"{base}/ondemandvm", {"a": 2})
    assert status == 201, body
    rid = body["request_id"]

    def placed() -> dict | None:  # type: ignore[type-arg]
        status, body = call("GET", f"{base}/ondemandvm/{rid}")
        return body if status == 202 and "queue_position" in body else None

    wait = wait_until(placed, 20, "the two-VM request's wait",
                      explain=lambda: (tmp_path / "run.log").read_text()[-3000:])
    assert wait["queue_position"] >= 4, wait
    assert wait["estimated_ready_in"] > (wait["queue_position"] + 6) * 120, wait
