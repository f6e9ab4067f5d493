"""Demand sizing in a real ``vmpooler run`` process, checkouts through its HTTP API: a pool
whose checkout log shows a burst in this half hour on each of the last seven days is ready for
it before it comes (the burst is served warm), a bigger burst grows it to its ceiling and no
further, and after the burst it shrinks back to its floor step by step and never below;
``/status`` shows the target and why all along.

Shrinking waits, by design, for the busy slot of the learned week to pass, for an hour without
a burst (recent demand is kept an hour) and for hold times of five minutes. The test drives the
process's wall clock forward instead of waiting: libfaketime, preloaded into the process,
reads an offset from a file the test writes (only ``time()`` and the date move; the monotonic
clock, hence timers, sleeps and clone times, stays real). Nothing in the process is mocked.
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.harness import wait_until
from tests.test_manager_process import processes, spawn  # noqa: F401 - a fixture
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port

pytestmark = pytest.mark.integration

BURST = 4
CEILING = 6
FLOOR = 1
SLOT = 1800  # the forecast's time-of-week slot (actors/sizing/forecast.SLOT_SECONDS)
HOLD = 300  # the shortest shrink hold (actors/sizing/demand_sizer.HOLD_MIN_SECONDS)


class ProcessClock:
    """The wall clock of the processes started with ``env``: real time plus an offset the
    test sets (libfaketime re-reads it from a file at every call)."""

    def __init__(self, path: Path, at: float) -> None:
        if platform.system() != "Linux" or platform.machine() != "x86_64":
            pytest.skip("libfaketime's bundled library is built for Linux on x86_64")
        libfaketime = pytest.importorskip("libfaketime")
        _needed, preload = libfaketime.get_reload_information()
        self.path = path
        self.offset = 0.0
        self.set(at)
        self.env = {**preload, "FAKETIME_NO_CACHE": "1", "FAKETIME_TIMESTAMP_FILE": str(path),
                    "FAKETIME_DONT_FAKE_MONOTONIC": "1", "DONT_FAKE_MONOTONIC": "1"}

    def now(self) -> float:
        """The processes' wall clock now."""
        return time.time() + self.offset

    def set(self, at: float) -> None:
        """Make the processes' wall clock read ``at`` (epoch seconds) now."""
        self.advance(at - self.now())

    def advance(self, seconds: float) -> None:
        """Move the processes' wall clock ``seconds`` forward."""
        self.offset += seconds
        staged = self.path.with_suffix(".new")
        staged.write_text(f"{self.offset:+.3f}\n")
        os.replace(staged, self.path)  # never a half-written offset


def _config(path: Path, *, redis_port: int) -> Path:
    document = {
        ":config": {"check_loop_delay_min": 1, "check_loop_delay_max": 1, "task_limit": 20},
        ":redis": {"server": "127.0.0.1", "port": redis_port},
        ":providers": {":dummy": {"provider_class": "dummy", "createvm_max_time": 0.5,
                                    "skip_dns_check_before_creating_vm": True,
                                    "filename": str(path.parent / "dummy.yaml")}},
        ":dns_configs": {":local": {"dns_class": "dynamic-dns", "domain": "example.test"}},
        # ready VMs live a day (of the process's faster time): the pool shrinks by retiring
        # them, not because they expire
        ":pools": [{"name": "a", "size": CEILING, "sizing": "demand", "size_min": FLOOR,
                    "ready_ttl": 1440, "provider": "dummy", "dns_plugin": "local"}],
    }
    path.write_text(yaml.safe_dump(document))
    return path


def _seed_history(client: redis.Redis, burst_at: float) -> None:
    """A burst of BURST checkouts at ``burst_at``'s time of day on each of the last seven
    days, and nothing else."""
    for day in range(1, 8):
        t = burst_at - day * 86400
        client.zadd(schema.demand("a"), {f"{t:.3f}:-{day}-{n}": t for n in range(BURST)})


def _get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        return json.load(answer)


def _checkout(port: int, client: int = 1) -> int:
    """POST /vm/a from the loopback address ``127.0.0.<client>`` (one client per address:
    the misses one client logs are bounded); the status code."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                            source_address=(f"127.0.0.{client}", 0))
    try:
        connection.request("POST", "/api/v3/vm/a")
        return connection.getresponse().status
    finally:
        connection.close()


def _sizing(port: int) -> dict[str, Any] | None:
    try:
        return _get(port, "/api/v3/status")["pools"]["a"]
    except OSError:
        return None


def test_a_demand_pool_grows_before_a_recurring_burst_and_shrinks_after_it(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
    processes: list[subprocess.Popen[str]],
) -> None:
    # The process starts 20 minutes before the end of a half-hour slot; the learned burst
    # came 10 minutes after that instant on each of the last seven days.
    busy_slot_end = (time.time() // SLOT + 2) * SLOT
    clock = ProcessClock(tmp_path / "faketime", busy_slot_end - 1200)
    _seed_history(redis_client, busy_slot_end - 600)
    config = _config(tmp_path / "d.yaml", redis_port=redis_server.port)
    port = free_port()
    run = spawn(processes, "run", "--config", str(config), "--bind", f"127.0.0.1:{port}",
                cwd=tmp_path, log=tmp_path / "run.log", env=clock.env)
    seen: list[int] = []  # ready counts sampled
    targets: list[int] = []  # published targets sampled

    def sizing() -> dict[str, Any] | None:
        entry = _sizing(port)
        if entry is not None and entry["sizing"]["target"] is not None:
            targets.append(entry["sizing"]["target"])
        return entry

    def ready() -> int:
        count = redis_client.scard(schema.ready("a"))
        seen.append(count)
        return count

    def log() -> str:
        return (tmp_path / "run.log").read_text()

    def target_is(size: int, what: str) -> dict[str, Any]:
        return wait_until(lambda: (e := sizing()) and e["sizing"]["target"] == size and e,
                          30, what, every=0.05, explain=log)

    entry = target_is(BURST, "the target learned from the history")
    assert entry["sizing"]["reason"] == "forecast" and entry["max"] == BURST
    wait_until(lambda: ready() == BURST, 30, "the pool ready for the burst", explain=log)
    assert [_checkout(port) for _ in range(BURST)] == [200] * BURST, "served warm"
    # a bigger burst than ever, from as many clients: misses, the pool grows to its ceiling
    # and no further
    codes = [_checkout(port, client) for client in range(2, 2 + 2 * CEILING)]
    assert 503 in codes
    wait_until(lambda: (e := sizing()) and e["sizing"]["reason"] == "ceiling", 30,
               "the target at the ceiling", explain=log)
    wait_until(lambda: ready() == CEILING, 30, "the pool at its ceiling", explain=log)
    entry = sizing()
    assert entry is not None and 0 < entry["sizing"]["warm_hit"] < 1
    # An hour later: the busy slot and the hour of recent demand have passed. The pool holds
    # its size for a hold time, then halves at most per hold, down to its floor.
    clock.set(busy_slot_end + 3700)
    held = wait_until(lambda: (e := sizing()) and e["sizing"]["held"] and e, 30,
                      "the shrink held", every=0.05, explain=log)
    assert held["sizing"]["target"] == CEILING
    for size in (3, 2, FLOOR):
        clock.advance(HOLD + 10)
        entry = target_is(size, f"the target shrunk to {size}")
    assert entry["sizing"]["reason"] == "minimum"
    wait_until(lambda: ready() == FLOOR, 30, "the pool shrunk to its floor", every=0.05,
               explain=log)
    clock.advance(HOLD + 10)  # and no further
    for _ in range(20):
        ready()
        sizing()
    assert max(seen) <= CEILING, seen
    assert min(targets) >= FLOOR and max(targets) == CEILING, targets
    assert seen[-1] == FLOOR and targets[-1] == FLOOR
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=30) == 0
    text = log()
    assert "Traceback" not in text
    assert "demand sizing:" in text
