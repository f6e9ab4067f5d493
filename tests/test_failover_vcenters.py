"""Two vCenters behind one alias, as real processes: ``vmpooler run`` keeps pool ``alpha`` on
one simulator and ``beta`` on another, both ``failover: true`` under the alias ``debian``.

The first simulator is killed (SIGKILL) mid-run: ``beta`` must grow by ``alpha``'s share, so
the alias keeps its ready count. A fresh simulator then comes back on the same port (a new,
empty inventory: the test makes the template again): ``alpha`` refills and ``beta`` gives the
share back, shrinking to its own size. ``/status`` and the log say so along the way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests import vcsim
from tests.harness import wait_until
from tests.http_client import get
from tests.vsphere_run import log_lines, running
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis

SIZE = 3
FLAGS = ("-guest-tools", "-guest-auto-ip")


def _provider(sim: vcsim.Simulator) -> dict[str, Any]:
    return {"provider_class": "vsphere", "server": "127.0.0.1", "port": sim.port,
            "username": sim.username, "password": sim.password, "insecure": True,
            "datacenter": "DC0", "vm_ready_check": "guest_tools",
            "skip_dns_check_before_creating_vm": True}


def _pool(name: str, provider: str) -> dict[str, Any]:
    return {"name": name, "size": SIZE, "provider": provider, "alias": ["debian"],
            "failover": True, "dns_plugin": "lab", "template": vcsim.TEMPLATE,
            "folder": f"vmpooler/{name}", "datastore": vcsim.DATASTORE,
            "clone_target": vcsim.CLUSTER, "create_linked_clone": False}


def _write_config(path: Path, one: vcsim.Simulator, two: vcsim.Simulator,
                  redis_port: int) -> Path:
    path.write_text(yaml.safe_dump({
        ":config": {
            "check_loop_delay_min": 1, "check_loop_delay_max": 2, "max_tries": 1,
            "retry_factor": 0, "task_limit": 8, "circuit_breaker_failure_threshold": 3,
            "circuit_breaker_timeout": 5, "circuit_breaker_half_open_attempts": 1,
            "connection_pool_monitor_interval": 1, "failover_failures": 2,
            "logfile": str(path.parent / "vmpooler.log"),
        },
        ":redis": {"server": "127.0.0.1", "port": redis_port},
        ":providers": {":vc1": _provider(one), ":vc2": _provider(two)},
        ":dns_configs": {":lab": {"dns_class": "dynamic-dns", "domain": "vmpooler.test"}},
        ":pools": [_pool("alpha", "vc1"), _pool("beta", "vc2")],
    }))
    return path


@pytest.fixture
def vcenters(tmp_path: Path, redis_server: EmbeddedRedis,
             ) -> Iterator[tuple[vcsim.Simulator, vcsim.Simulator, int, Path]]:
    with ExitStack() as stack:
        one = stack.enter_context(vcsim.running(tmp_path / "vc1", FLAGS))
        two = stack.enter_context(vcsim.running(tmp_path / "vc2", FLAGS))
        for sim in (one, two):
            vcsim.prepare(sim.connect())
        config = _write_config(tmp_path / "vmpooler.yaml", one, two, redis_server.port)
        process, port = stack.enter_context(running(config, one))
        yield one, two, port, tmp_path / "vmpooler.log"
        assert process.poll() is None, "the manager kept running"


def _ready(client: redis.Redis, pool: str) -> int:
    return int(client.scard(schema.ready(pool)))


def _failover(port: int) -> dict[str, Any]:
    status, body = get(f"http://127.0.0.1:{port}/api/v3/status?view=pools")
    if status != 200:
        return {name: {"state": f"no answer ({status})", "effective": -1}
                for name in ("alpha", "beta")}
    return {name: body["pools"][name]["failover"] for name in ("alpha", "beta")}


@pytest.mark.integration
@pytest.mark.timeout(240)  # its waits' deadlines add up to 180 s; about 10 s when green
def test_a_dead_vcenters_share_moves_to_the_other_and_comes_back(
    vcenters: tuple[vcsim.Simulator, vcsim.Simulator, int, Path], redis_client: redis.Redis,
) -> None:
    one, _two, port, log = vcenters
    wait_until(lambda: _ready(redis_client, "alpha") == SIZE
               and _ready(redis_client, "beta") == SIZE, 60, "both pools full")

    before = set(redis_client.smembers(schema.ready("alpha")))
    one.process.kill()  # SIGKILL: the vCenter is gone, its sessions with it
    one.process.wait(10)
    killed = time.monotonic()
    wait_until(lambda: _failover(port)["alpha"]["state"] == "down", 30, "alpha seen down")
    noticed = time.monotonic() - killed
    wait_until(lambda: _ready(redis_client, "beta") == 2 * SIZE, 30,
               "beta holding the alias's whole ready count")
    covered = time.monotonic() - killed
    status = _failover(port)
    assert status["beta"]["covering"] == {"alpha": SIZE}
    assert status["beta"]["effective"] == 2 * SIZE and status["beta"]["size"] == SIZE
    assert log_lines(log, f"[beta] grows by {SIZE} for 'alpha'"), log.read_text()[-3000:]

    restarted = time.monotonic()
    fresh = vcsim.start(one.tmpdir, one.flags, port=one.port)
    one.process = fresh.process  # stopped by the fixture on the way out
    vcsim.prepare(one.connect())  # a new, empty inventory: the template again
    wait_until(lambda: _ready(redis_client, "alpha") == SIZE
               and _ready(redis_client, "beta") == SIZE
               and _failover(port)["beta"]["effective"] == SIZE, 60,
               "alpha refilled and beta back to its size")
    given_back = time.monotonic() - restarted
    print(f"alpha seen down {noticed:.1f}s after the kill; beta held {2 * SIZE} ready "
          f"{covered:.1f}s after it; share given back {given_back:.1f}s after the restart")
    assert _failover(port)["alpha"]["state"] == "ok"
    assert not set(redis_client.smembers(schema.ready("alpha"))) & before, \
        "alpha's ready VMs are new ones, from the new vCenter"
    assert log_lines(log, "[beta] gives back the share of 'alpha'"), log.read_text()[-3000:]
    assert len(log_lines(log, "[beta] grows by")) == 1
