"""Demand sizing in a real ``vmpooler run`` process, checkouts through its HTTP API: a pool
whose checkout log shows a burst at this time of day on each of the last seven days is ready
for it before it comes (the burst is served warm), a bigger burst grows it to its ceiling and
no further, it never goes below its floor, and ``/status`` shows the target and why.

Shrinking takes at least an hour of silence by design (recent demand is kept an hour, a
shrink waits out a hold of five minutes or more): it is tested on the injected clock in
tests/test_demand_sizing.py, and through the shipped ``vmpooler replay`` on simulated time in
tests/test_replay_process.py (a daily burst: ready before it, shrunk after it), not in
wall-clock time here."""

from __future__ import annotations

import json
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


def _config(path: Path, *, redis_port: int) -> Path:
    document = {
        ":config": {"check_loop_delay_min": 1, "check_loop_delay_max": 1, "task_limit": 20},
        ":redis": {"server": "127.0.0.1", "port": redis_port},
        ":providers": {":dummy": {"provider_class": "dummy", "createvm_max_time": 0.5,
                                    "skip_dns_check_before_creating_vm": True,
                                    "filename": str(path.parent / "dummy.yaml")}},
        ":dns_configs": {":local": {"dns_class": "dynamic-dns", "domain": "example.test"}},
        ":pools": [{"name": "a", "size": CEILING, "sizing": "demand", "size_min": 1,
                    "provider": "dummy", "dns_plugin": "local"}],
    }
    path.write_text(yaml.safe_dump(document))
    return path


def _seed_history(client: redis.Redis, now: float) -> None:
    """A burst of BURST checkouts at this time of day, and another one three minutes later,
    on each of the last seven days (so the test's minutes are in a learned slot even when
    a slot of the plan ends meanwhile)."""
    for day in range(1, 8):
        for later in (0, 180):
            t = now + later - day * 86400
            client.zadd(schema.demand("a"),
                        {f"{t:.3f}:-{day}-{later}-{n}": t for n in range(BURST)})


def _get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        return json.load(answer)


def _checkout(port: int) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v3/vm/a", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _sizing(port: int) -> dict[str, Any] | None:
    try:
        return _get(port, "/api/v3/status")["pools"]["a"]
    except OSError:
        return None


def test_a_demand_pool_is_ready_for_a_recurring_burst_in_a_real_process(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
    processes: list[subprocess.Popen[str]],
) -> None:
    _seed_history(redis_client, time.time())
    config = _config(tmp_path / "d.yaml", redis_port=redis_server.port)
    port = free_port()
    run = spawn(processes, "run", "--config", str(config), "--bind", f"127.0.0.1:{port}",
                cwd=tmp_path, log=tmp_path / "run.log")
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

    entry = wait_until(lambda: (e := sizing()) and e["sizing"]["target"] == BURST and e,
                       30, "the target learned from the history")
    assert entry["sizing"]["reason"] == "forecast" and entry["max"] == BURST
    wait_until(lambda: ready() == BURST, 30, "the pool ready for the burst")
    assert [_checkout(port) for _ in range(BURST)] == [200] * BURST, "served warm"
    # a bigger burst than ever: misses, the pool grows to its ceiling and no further
    codes = [_checkout(port) for _ in range(2 * CEILING)]
    assert 503 in codes
    wait_until(lambda: (e := sizing()) and e["sizing"]["reason"] == "ceiling", 30,
               "the target at the ceiling")
    wait_until(lambda: ready() == CEILING, 30, "the pool at its ceiling")
    for _ in range(5):
        ready()
        sizing()
    assert max(seen) <= CEILING, seen
    assert min(targets) >= 1 and max(targets) == CEILING, targets  # floor and ceiling
    entry = sizing()
    assert entry is not None and 0 < entry["sizing"]["warm_hit"] < 1
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=30) == 0
    log = (tmp_path / "run.log").read_text()
    assert "Traceback" not in log
    assert "demand sizing:" in log
