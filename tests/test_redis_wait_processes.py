"""``vmpooler run``, ``api`` and ``manager`` started before their Redis (vmpooler PR #701): they
stay up, say so once per attempt, become healthy once a real redis-server listens on the
configured port, and stop at once when told to while waiting."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests import http_client
from tests.conftest import TEST_REDIS_SERVER
from tests.harness import wait_until
from tests.test_manager_process import (
    full,
    processes,  # noqa: F401 - the fixture, shared
    spawn,
    write_config,
)
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, find_redis_server, free_port

pytestmark = pytest.mark.integration

RETRY = "[!] [manager] redis is unavailable ("


def get(url: str) -> int:
    """The status of ``GET url`` (0 when nothing answers)."""
    return int(http_client.get(url, timeout=10)[0])


@pytest.fixture
def late_redis(tmp_path: Path) -> Iterator[tuple[int, EmbeddedRedis]]:
    """A free port nothing listens on, and a redis-server to start there later."""
    port = free_port()
    server = EmbeddedRedis(data_dir=tmp_path / "late-redis", port=port, persist=False,
                           hardened=False,
                           binary=os.environ.get(TEST_REDIS_SERVER)
                           or find_redis_server(prefer_system=True))
    yield port, server
    server.stop()


def log_has(log: Path, text: str) -> bool:
    return log.exists() and text in log.read_text()


def test_run_serves_at_once_and_starts_its_manager_when_redis_comes(
    tmp_path: Path, late_redis: tuple[int, EmbeddedRedis],
    processes: list[subprocess.Popen[str]],
) -> None:
    port, server = late_redis
    config = write_config(tmp_path / "f.yaml", redis_port=port, pools={"alpha": 1}, dummy={})
    log, http = tmp_path / "run.log", free_port()
    run = spawn(processes, "run", "--config", str(config), "--bind", f"127.0.0.1:{http}",
                log=log)
    base = f"http://127.0.0.1:{http}"
    wait_until(lambda: log_has(log, RETRY + "Error 111"), 30, "the first retry line")
    assert log_has(log, "); retrying in 1s")
    wait_until(lambda: get(f"{base}/healthcheck") == 200, 30, "the API to answer")
    assert get(f"{base}/api/v3/status") == 503  # needs Redis: refused, not crashed
    assert get(f"{base}/api/v3/readiness") == 503
    assert run.poll() is None
    server.start()
    client = redis.Redis(port=port, decode_responses=True)
    wait_until(lambda: full(client, {"alpha": 1}), 40, "the manager to fill alpha")
    assert client.exists(schema.manager_heartbeat())  # the manager's heartbeat is written
    wait_until(lambda: get(f"{base}/api/v3/readiness") == 200, 20, "readiness")
    assert get(f"{base}/api/v3/status") == 200
    client.close()
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=30) == 0
    text = log.read_text()
    assert "Traceback" not in text and "Worker failed to boot" not in text
    assert "[*] [manager] started: 1 pools" in text


def test_api_serves_without_redis_and_recovers(
    tmp_path: Path, late_redis: tuple[int, EmbeddedRedis],
    processes: list[subprocess.Popen[str]],
) -> None:
    port, server = late_redis
    config = write_config(tmp_path / "f.yaml", redis_port=port, pools={"alpha": 1}, dummy={})
    log, http = tmp_path / "api.log", free_port()
    api = spawn(processes, "api", "--config", str(config), "--bind", f"127.0.0.1:{http}",
                "--workers", "1", log=log)
    status = f"http://127.0.0.1:{http}/api/v3/status"
    wait_until(lambda: get(status) == 503, 30, "the API to answer 503")
    assert get(f"http://127.0.0.1:{http}/api/v3/vm") == 200  # the configuration needs no Redis
    assert get(status) == 503 and api.poll() is None
    server.start()
    wait_until(lambda: get(status) == 200, 30, "the API to reach Redis")
    api.send_signal(signal.SIGTERM)
    assert api.wait(timeout=30) == 0
    assert "Traceback" not in log.read_text()


@pytest.mark.parametrize("command", ["run", "manager"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_while_waiting_for_redis_is_prompt(
    tmp_path: Path, processes: list[subprocess.Popen[str]], command: str, signum: int,
) -> None:
    config = write_config(tmp_path / "f.yaml", redis_port=free_port(), pools={"alpha": 1},
                          dummy={})
    log = tmp_path / "out.log"
    extra = ["--bind", f"127.0.0.1:{free_port()}"] if command == "run" else []
    process = spawn(processes, command, "--config", str(config), *extra, log=log)
    wait_until(lambda: log_has(log, "); retrying in 2s"), 30, "the second retry line")
    began = time.monotonic()
    process.send_signal(signum)
    assert process.wait(timeout=15) == 0
    assert time.monotonic() - began < 5.0
    assert "Traceback" not in log.read_text()
