"""``vmpooler manager --bind``: idle and reconnecting clients do not keep the probes from
answering (a kubelet restarts a manager whose liveness probe fails a few times in a row)."""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import TEST_REDIS_SERVER
from tests.harness import wait_until
from tests.test_manager_process import processes, spawn, write_config  # noqa: F401
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, find_redis_server, free_port

pytestmark = pytest.mark.integration

IDLE = 300
RECONNECTING = 24
PROBES = 20
PROBE_TIMEOUT = 2.0


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(data_dir=tmp_path / "redis", persist=False, hardened=False,
                           binary=os.environ.get(TEST_REDIS_SERVER)
                           or find_redis_server(prefer_system=True))
    server.start()
    yield server
    server.stop()


def probe(port: int) -> bool:
    """One kubelet-like probe: a fresh connection, an answer within PROBE_TIMEOUT s."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_TIMEOUT)
    try:
        connection.request("GET", "/healthcheck")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def reconnect_idly(port: int, stop: threading.Event) -> None:
    """Connect, send nothing, and connect again as soon as the server lets go."""
    while not stop.is_set():
        with contextlib.suppress(OSError), \
                socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            while not stop.is_set():
                try:
                    if sock.recv(1) == b"":
                        break
                except TimeoutError:
                    continue


def still_open(sock: socket.socket) -> bool:
    """Whether the server has neither closed nor reset ``sock`` (nothing to read yet)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def test_probes_answer_while_hundreds_of_idle_connections_are_open(
    tmp_path: Path, own_redis: EmbeddedRedis, processes: list[subprocess.Popen[str]],
) -> None:
    config = write_config(tmp_path / "f.yaml", redis_port=own_redis.port, pools={"a": 1},
                          dummy={})
    port = free_port()
    log = tmp_path / "m.log"
    spawn(processes, "manager", "--config", str(config), "--bind", f"127.0.0.1:{port}",
          log=log)
    wait_until(lambda: probe(port), 30, "the probes to answer", explain=log.read_text)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(IDLE)]
    stop = threading.Event()
    clients = [threading.Thread(target=reconnect_idly, args=(port, stop), daemon=True)
               for _ in range(RECONNECTING)]
    try:
        for client in clients:
            client.start()
        start = time.monotonic()
        answered = sum(probe(port) for _ in range(PROBES))
        took = time.monotonic() - start
        held = sum(still_open(sock) for sock in idle)
    finally:
        stop.set()
        for client in clients:
            client.join(timeout=5)
        for sock in idle:
            sock.close()
    print(f"{answered} of {PROBES} probes answered in {took:.2f} s with {held} of {IDLE} "
          f"idle connections open and {RECONNECTING} reconnecting clients")
    assert answered == PROBES, f"{answered} of {PROBES} probes answered in {took:.1f} s"
    assert took < PROBES * 0.5
    assert held == IDLE  # the idle ones were held open meanwhile, not shed
    assert "Traceback" not in log.read_text()
