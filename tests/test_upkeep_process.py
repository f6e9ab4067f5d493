"""The manager's upkeep through the shipped commands, as real processes: ``vmpooler manager``
with auto-purge, the queue health check, the DLQ, the start-up purge and the
connection-pool monitor on, reporting to a statsd socket the test reads; then
``vmpooler dlq list`` and ``vmpooler dlq replay`` on what it left."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml

from tests.harness import wait_until
from tests.test_manager_process import processes, spawn  # noqa: F401 (fixture)
from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.providers.dummy_store import read_inventory

pytestmark = pytest.mark.integration

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]


class StatsdSink:
    """A UDP socket collecting statsd lines."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            with self._lock:
                self.lines.extend(data.decode().splitlines())

    def seen(self, prefix: str) -> list[str]:
        with self._lock:
            return [line for line in self.lines if line.startswith(prefix)]


@pytest.fixture
def statsd() -> Iterator[StatsdSink]:
    sink = StatsdSink()
    yield sink
    sink.sock.close()


def _vm(name: str, pool: str, state: str) -> dict[str, object]:
    return {"name": name, "hostname": name, "poolname": pool, "template": pool,
            "dummy_state": state, "ready": state == "RUNNING", "powerstate": "PoweredOn",
            "snapshots": [], "disks": []}


def test_manager_purges_checks_health_and_the_dlq_replays(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
    processes: list[subprocess.Popen[str]], statsd: StatsdSink,
) -> None:
    inventory = tmp_path / "dummy.yaml"
    inventory.write_text(yaml.safe_dump({"pool": {
        "alpha": [_vm("stale-pend", "alpha", "CLONING")],
        "retired": [_vm("old1", "retired", "RUNNING"), _vm("old2", "retired", "RUNNING")],
    }}))
    c = redis_client
    c.sadd(schema.pending("alpha"), "stale-pend")
    c.hset(schema.vm("stale-pend"), mapping={
        "pool": "alpha", "template": "alpha",
        "clone": timefmt.format_epoch(timefmt.parse_epoch("2020-01-01 00:00:00 +0000"))})
    c.hset(schema.vm("orphan"), mapping={"pool": "alpha", "clone": "2020-01-01 00:00:00 +0000"})
    config = tmp_path / "vmpooler.yaml"
    config.write_text(yaml.safe_dump({
        ":config": {
            "check_loop_delay_min": 1, "check_loop_delay_max": 2, "timeout": 10**6,
            "purge_enabled": True, "purge_interval": 3600, "max_pending_age": 3600,
            "health_check_enabled": True, "health_check_interval": 1,
            "dlq_enabled": True, "purge_unconfigured_resources": True,
            "connection_pool_monitor_interval": 1,
        },
        ":redis": {"server": "127.0.0.1", "port": redis_server.port, "reconnect_attempts": 2},
        ":statsd": {"server": "127.0.0.1", "port": statsd.port},
        ":providers": {":dummy": {"provider_class": "dummy", "filename": str(inventory),
                                    "skip_dns_check_before_creating_vm": True}},
        ":pools": [{"name": "alpha", "size": 1, "provider": "dummy"}],
    }))
    log = tmp_path / "manager.log"
    manager = spawn(processes, "manager", "--config", str(config), log=log)

    wait_until(lambda: c.zcard(schema.dlq("pending")) == 1, 30, "the stale VM's dead letter")
    wait_until(lambda: c.hget(schema.health(), "status") is not None, 30, "vmpooler__health")
    health = json.loads(c.hget(schema.health(), "metrics") or "{}")
    assert set(health) == {"queues", "tasks", "errors"} and "alpha" in health["queues"]
    assert 0 < c.ttl(schema.vm("orphan")) <= 3600

    def retired_gone() -> bool:
        return not read_inventory(inventory)["pool"].get("retired")

    wait_until(retired_gone, 30, "the unconfigured pool's VMs to be purged at start")
    for prefix in ("vmpooler.vmpooler_health.status:", "vmpooler.vmpooler_purge.total.count:",
                   "vmpooler.vmpooler_purge.pending.count.alpha:",
                   "vmpooler.vmpooler_health.queue.pending.size.alpha:",
                   "vmpooler.circuit_breaker.state.dummy:"):
        wait_until(lambda p=prefix: statsd.seen(p), 30, f"a statsd line {prefix}")
    ticks = len(statsd.seen("vmpooler.vmpooler_health.status:"))
    wait_until(lambda: len(statsd.seen("vmpooler.vmpooler_health.status:")) > ticks, 30,
               "a second health check a second later")

    listed = subprocess.run([*VMPOOLER, "dlq", "list", "--json", "--config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    (entry,) = json.loads(listed.stdout)
    assert (entry["vm"], entry["queue"], entry["error_class"]) == ("stale-pend", "pending",
                                                                   "Purge")
    # The manager destroyed the purged VM; a replay hands it back (nothing left to destroy)
    # and removes the entry, and the woken manager forgets it again.
    wait_until(lambda: not c.sismember(schema.completed("alpha"), "stale-pend"), 30,
               "the purged VM to be destroyed")
    replay = subprocess.run([*VMPOOLER, "dlq", "replay", "--config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert replay.returncode == 0, replay.stderr
    assert "1 requeued" in replay.stdout
    assert not c.exists(schema.dlq("pending"))
    wait_until(lambda: not c.sismember(schema.completed("alpha"), "stale-pend"), 30,
               "the replayed VM to be forgotten")

    manager.send_signal(signal.SIGTERM)
    assert manager.wait(timeout=20) == 0
    text = log.read_text()
    assert "Traceback" not in text
    assert "unconfigured resources purged" in text
    assert "[health] Status:" in text
