"""``vmpooler run`` on a vCenter that behaves like one: clone tasks that take seconds with
jitter, a task queue (``-max-concurrent-tasks``), power-off and destroy tasks that take time,
and faults vCenter raises under load, all from a fixed seed.

The pools fill and stay in step with vCenter: clones vCenter queued are waited for (never
timed out for waiting), a refused clone (``InsufficientResourcesFault``) is retried, VMs
checked out and returned are destroyed through their slow tasks and replaced, and at the end
each pool folder holds exactly the pool's ready VMs.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests import vcsim
from tests.harness import wait_until
from tests.http_client import request
from tests.vsphere_run import log_lines, running, write_config
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis

POOLS = ("alpha", "beta", "gamma")
SIZE = 3
FLAGS = ("-guest-tools", "-guest-auto-ip",
         "-task-delay", "CloneVM_Task:2000,PowerOffVM_Task:500,Destroy_Task:500",
         "-task-jitter", "0.3", "-max-concurrent-tasks", "3",
         "-fault", "CloneVM_Task:0.15:InsufficientResourcesFault", "-fault-seed", "20")


@pytest.fixture
def manager(tmp_path: Path, redis_server: EmbeddedRedis,
            ) -> Iterator[tuple[subprocess.Popen[str], int, vcsim.Simulator, Path]]:
    with vcsim.running(tmp_path / "vcsim", FLAGS) as sim:
        vcsim.prepare(sim.connect())
        config = write_config(
            tmp_path / "vmpooler.yaml", sim, redis_server.port,
            pools={name: {"create_linked_clone": False} for name in POOLS}, size=SIZE,
            config={"task_limit": 6, "circuit_breaker_failure_threshold": 10})
        with running(config, sim) as (process, port):
            yield process, port, sim, tmp_path / "vmpooler.log"


def in_sync(client: redis.Redis, si: object) -> bool:
    """Every pool full, nothing pending, each folder holding exactly the ready VMs."""
    return all(
        client.scard(schema.ready(p)) == SIZE and not client.scard(schema.pending(p))
        and vcsim.vm_names(si, f"vmpooler/{p}") == client.smembers(schema.ready(p))
        for p in POOLS)


@pytest.mark.integration
def test_pools_fill_and_stay_in_step_with_a_slow_busy_faulty_vcenter(
    manager: tuple[subprocess.Popen[str], int, vcsim.Simulator, Path],
    redis_client: redis.Redis,
) -> None:
    process, port, sim, log = manager
    si = sim.connect()
    wait_until(lambda: in_sync(redis_client, si), 90, "the pools full and in step")
    queued = log_lines(log, "s in vsphere's queue")
    assert queued, "no clone waited in vCenter's queue"
    refused = log_lines(log, "InsufficientResourcesFault")
    assert refused, "the seed gives refused clones"
    assert not log_lines(log, "timed out after"), "\n".join(log_lines(log, "timed out"))

    # Check two VMs out and give them back: destroyed through slow tasks, then replaced.
    base = f"http://127.0.0.1:{port}/api/v3"
    status, body = request("POST", f"{base}/vm/alpha+beta")
    assert status == 200, body
    taken = [body["alpha"]["hostname"], body["beta"]["hostname"]]
    for name in taken:
        host = name.split(".")[0]
        assert request("DELETE", f"{base}/vm/{host}")[0] == 200
    wait_until(lambda: in_sync(redis_client, si) and not any(
        name.split(".")[0] in vcsim.vm_names(si, f"vmpooler/{p}")
        for name in taken for p in POOLS), 60, "the returned VMs destroyed and replaced")
    assert process.poll() is None, "the manager kept running"
