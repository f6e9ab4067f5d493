"""Redis stopping and starting again under real ``vmpooler api`` and ``vmpooler manager``
processes.

Each test owns its redis-server (AOF on, in ``tmp_path``), so it can stop it and start it
again on the same port and data directory while the processes run: the API answers 503 with
``Retry-After`` while Redis is away and 200 again afterwards, with no restart; the manager
keeps running, restarts no actor, creates no VM twice and loses no record.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.api_manager import exchange, spawn, start_api, status_code, stopped_after
from tests.harness import wait_until
from tests.test_manager_process import accounted, full, write_config
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.connection import connect
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, find_redis_server
from vmpooler.providers.dummy_store import read_inventory

pytestmark = pytest.mark.integration

REFUSED = "redis is unavailable, answering 503"


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(data_dir=tmp_path / "redis", persist=True, hardened=False,
                           binary=find_redis_server(prefer_system=True))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def client(own_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    c = connect("127.0.0.1", own_redis.port, pool_size=4, pool_timeout=1, reconnect_attempts=1)
    yield c
    c.close()


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    with stopped_after() as started:
        yield started


def call(method: str, url: str, body: Any = None) -> tuple[int, dict[str, str], Any]:
    """The status, headers and JSON body of one request (:func:`exchange`, 20 s)."""
    return exchange(method, url, body, timeout=20)


def with_redis_settings(path: Path, **settings: Any) -> Path:
    document = yaml.safe_load(path.read_text())
    document[":redis"].update(settings)
    path.write_text(yaml.safe_dump(document))
    return path


def test_api_answers_503_while_redis_is_down_and_200_when_it_is_back(
    tmp_path: Path, own_redis: EmbeddedRedis, processes: list[subprocess.Popen[str]],
) -> None:
    config = with_redis_settings(
        write_config(tmp_path / "f.yaml", redis_port=own_redis.port, pools={"alpha": 1},
                     dummy={}), reconnect_attempts=1)
    api, base = start_api(processes, config, log=tmp_path / "api.log")
    wait_until(lambda: status_code(f"{base}/status") == 200, 30, "the API to answer")

    own_redis.stop()
    answers = [call("GET", f"{base}/status") for _ in range(30)]
    answers += [call("POST", f"{base}/vm", {"alpha": 1}) for _ in range(10)]
    assert [code for code, _, _ in answers] == [503] * 40
    for _, headers, body in answers:
        assert headers["retry-after"] == "5"
        assert body == {"ok": False, "error": "redis unavailable", "retry_after": 5}
    assert call("GET", f"{base}/vm")[0] == 200  # what needs no Redis still answers

    own_redis.start()  # same port, same data
    wait_until(lambda: status_code(f"{base}/status") == 200, 15, "the API to recover")
    code, _, body = call("POST", f"{base}/vm", {"alpha": 1})
    assert code == 503 and body == {"ok": False}  # the pool is empty: vmpooler's 503
    assert api.poll() is None, "the API exited"

    api.send_signal(signal.SIGTERM)
    api.wait(timeout=30)
    log = (tmp_path / "api.log").read_text()
    assert "Traceback" not in log
    refused = log.count(REFUSED)
    # 40 refusals within a few seconds: at most one line per worker per 5 s
    assert 1 <= refused <= 6, f"{refused} log lines for 40 refused requests"


class InventoryWatch:
    """Polls the dummy provider's shared inventory: every VM name created, and names created
    again (seen with a second ``boottime``, or back after having gone)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.boots: dict[str, str] = {}
        self.gone: set[str] = set()
        self.twice: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.poll()

    def poll(self) -> None:
        try:
            doc = read_inventory(self.path)
        except (OSError, yaml.YAMLError):  # not written yet, or caught mid-write
            return
        present: set[str] = set()
        for vms in (doc.get("pool") or {}).values():
            for vm in vms:
                name, boot = vm["name"], str(vm.get("boottime"))
                present.add(name)
                if name in self.gone or self.boots.get(name, boot) != boot:
                    self.twice.append(name)
                    self.gone.discard(name)
                self.boots[name] = boot
        self.gone |= set(self.boots) - present

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.poll()


@pytest.mark.parametrize("outage", [0.0, 5.0], ids=["short", "past-the-lease"])
def test_manager_pauses_while_redis_is_down_and_resumes(
    tmp_path: Path, own_redis: EmbeddedRedis, client: redis.Redis,
    processes: list[subprocess.Popen[str]], outage: float,
) -> None:
    """``past-the-lease``: Redis stays away longer than the pools' leases last (1 s
    heartbeats: 3 s leases), so they expire during the outage and are taken again."""
    pools = {"alpha": 4, "beta": 3}
    inventory = tmp_path / "dummy.yaml"
    config = write_config(tmp_path / "f.yaml", redis_port=own_redis.port, pools=pools,
                          dummy={"filename": str(inventory), "createvm_max_time": 2})
    document = yaml.safe_load(config.read_text())
    document[":config"]["manager_heartbeat_interval"] = 1
    config.write_text(yaml.safe_dump(document))
    log_path = tmp_path / "m.log"
    watch = InventoryWatch(inventory)
    try:
        manager = spawn(processes, "manager", "--config", str(config), log=log_path)
        wait_until(lambda: full(client, pools), 60, "the pools to fill")
        taken = sorted(client.smembers(schema.ready("alpha")))[:2]
        for vm in taken:  # a checkout: the pool refills, clones run into the outage
            client.smove(schema.ready("alpha"), schema.running("alpha"), vm)
            client.hset(schema.active("alpha"), vm, "2024-05-01 13:02:11 +0000")
        wait_until(lambda: client.scard(schema.pending("alpha")) > 0, 30, "a refill clone")
        before = {pool: accounted(client, pool) for pool in pools}

        own_redis.stop()
        stopped_at = time.monotonic()
        outage_start = log_path.read_text().count("redis unavailable")

        def outage_lines() -> int:
            return log_path.read_text().count("redis unavailable") - outage_start

        def clones_done() -> bool:  # the refill clones finish while Redis is away
            doc = read_inventory(inventory)
            return all(vm.get("dummy_state") == "RUNNING"
                       for vms in (doc.get("pool") or {}).values() for vm in vms)

        wait_until(clones_done, 30, "the clones in flight to finish")
        wait_until(lambda: outage_lines() >= 6, 60, "the pools to notice the outage")
        wait_until(lambda: time.monotonic() - stopped_at >= outage and outage_lines() >= 6,
                   outage + 30, "the outage to last")
        assert manager.poll() is None, "the manager exited during the outage"

        own_redis.start()  # same port, same data (AOF)
        wait_until(lambda: full(client, pools), 60, "the pools to fill again")
        after = {pool: accounted(client, pool) for pool in pools}
        assert client.smembers(schema.running("alpha")) == set(taken)
        for pool in pools:
            lost = set(before[pool]) - set(after[pool])
            assert not lost, f"{pool}: records lost over the outage: {lost}"
            doubled = {vm: qs for vm, qs in after[pool].items() if len(qs) > 1}
            assert not doubled, f"VMs in two queues: {doubled}"
        assert int(client.get(schema.tasks_clone()) or 0) == 0, "a clone slot leaked"
        manager.send_signal(signal.SIGTERM)
        assert manager.wait(timeout=30) == 0
    finally:
        watch.stop()
    assert watch.twice == [], f"VMs created twice: {watch.twice}"
    doc = read_inventory(inventory)
    for pool, vms in (doc.get("pool") or {}).items():
        where = accounted(client, pool)
        missing = [vm["name"] for vm in vms if vm["name"] not in where]
        assert not missing, f"{pool}: in the provider but in no queue: {missing}"
    log = log_path.read_text()
    assert "Traceback" not in log
    assert not re.search(r"\[supervisor\] '[^']+' crashed", log), "an actor crashed"
    assert log.count("[*] [manager] started") == 1, "the manager started again"
