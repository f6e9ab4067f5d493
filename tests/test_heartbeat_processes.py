"""Readiness through real processes: ``vmpooler api`` and ``vmpooler manager`` (then SIGKILL),
and ``vmpooler run`` whose embedded manager beats too."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.harness import wait_until
from tests.test_api_processes import call
from tests.test_manager_process import processes, spawn, write_config  # noqa: F401 (fixture)
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port

pytestmark = pytest.mark.integration

INTERVAL = 1.0
MAX_AGE = 3.0  # three intervals


def config_with_heartbeat(path: Path, redis_port: int) -> Path:
    write_config(path, redis_port=redis_port, pools={"alpha": 1}, dummy={})
    document = yaml.safe_load(path.read_text())
    document[":config"]["manager_heartbeat_interval"] = INTERVAL
    path.write_text(yaml.safe_dump(document))
    return path


def readiness(base: str) -> tuple[int, Any] | None:
    try:
        return call("GET", f"{base}/readiness", timeout=5)
    except OSError:
        return None


def members(client: redis.Redis) -> set[str]:
    return set(client.zrange(schema.manager_heartbeat(), 0, -1))


def test_readiness_follows_the_manager_process_and_its_sigkill(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
    processes: list[subprocess.Popen[str]],
) -> None:
    config = config_with_heartbeat(tmp_path / "f.yaml", redis_server.port)
    port = free_port()
    spawn(processes, "api", "--config", str(config), "--bind", f"127.0.0.1:{port}",
          "--workers", "2", log=tmp_path / "api.log")
    base = f"http://127.0.0.1:{port}/api/v3"
    status, body = wait_until(lambda: readiness(base), 30, "the API to answer")
    assert (status, body["errors"]) == (503, ["no manager heartbeat"])

    manager = spawn(processes, "manager", "--config", str(config), log=tmp_path / "m.log")
    status, body = wait_until(lambda: (r := readiness(base)) and r[0] == 200 and r, 30,
                              "readiness 200 once the manager beats")
    assert body["managers"]["live"] == 1 and body["managers"]["max_age"] == MAX_AGE
    (member,) = members(redis_client)
    assert member.split(":")[1] == str(manager.pid)
    _, body = wait_until(lambda: (r := readiness(base)) and r[1]["managers"]["members"][0][
        "pools"] == 1 and r, 10, "the manager's lease on alpha to show")
    assert body["managers"]["unheld_pools"] == 0

    manager.kill()  # SIGKILL: no clean stop, the member stays and ages
    killed = time.monotonic()
    manager.wait(timeout=10)
    status, body = wait_until(lambda: (r := readiness(base)) and r[0] == 503 and r,
                              MAX_AGE + INTERVAL + 5, "readiness 503 after the SIGKILL")
    elapsed = time.monotonic() - killed
    assert elapsed <= MAX_AGE + INTERVAL + 1, elapsed
    (error,) = body["errors"]
    assert error.startswith("the newest manager heartbeat is ") and error.endswith(
        f"s old (max {MAX_AGE:g} s)"), error
    assert members(redis_client) == {member}

    again = spawn(processes, "manager", "--config", str(config), log=tmp_path / "m2.log")
    wait_until(lambda: (r := readiness(base)) and r[0] == 200, 30, "a new manager beating")
    assert len(members(redis_client)) == 2
    again.send_signal(signal.SIGTERM)
    assert again.wait(timeout=20) == 0
    assert members(redis_client) == {member}, "a clean stop removes the member"


def test_vmpooler_run_embedded_manager_beats(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
    processes: list[subprocess.Popen[str]],
) -> None:
    config = config_with_heartbeat(tmp_path / "f.yaml", redis_server.port)
    port = free_port()
    run = spawn(processes, "run", "--config", str(config), "--bind", f"127.0.0.1:{port}",
                log=tmp_path / "run.log")
    base = f"http://127.0.0.1:{port}/api/v3"
    _, body = wait_until(lambda: (r := readiness(base)) and r[0] == 200 and r, 30,
                         "readiness 200 from vmpooler run")
    assert body["managers"]["live"] == 1 and len(body["managers"]["members"]) == 1
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=30) == 0
    assert members(redis_client) == set()
