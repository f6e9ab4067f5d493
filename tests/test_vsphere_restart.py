"""A vCenter restarted under clones in flight (issue 20, item 2c), as a real process.

``vmpooler run`` fills two vSphere pools on the simulator, whose clone tasks take 3 s
(``-task-delay``). While clones run, the simulator is killed and a fresh one (empty
inventory, same port) comes back; the test rebuilds the template. The clones' tasks have
vanished with the old vCenter: that is a lost clone, not a sign of vCenter's ill health, so
the circuit breaker (3 failures, 30 s cool-down) must not open and the pools must refill
from the new vCenter well within the cool-down. At the end no VM in Redis' pending or ready
sets lacks its VM in vCenter.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from tests import vcsim
from tests.harness import wait_until
from tests.vsphere_run import in_sync, log_lines, orphans, running, write_config
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.providers.errors import TaskLostError
from vmpooler.providers.vsphere.exchange import Vcenter

POOLS = ("alpha", "beta")
SIZE = 3
FLAGS = ("-guest-tools", "-guest-auto-ip", "-task-delay", "CloneVM_Task:3000")
COOL_DOWN = 30.0
REFILL_BOUND = 20.0  # far below the breaker's cool-down


def pending(client: redis.Redis) -> int:
    return sum(int(client.scard(schema.pending(p))) for p in POOLS)


@pytest.fixture
def manager(tmp_path: Path, redis_server: EmbeddedRedis,
            ) -> Iterator[tuple[subprocess.Popen[str], vcsim.Simulator, Path]]:
    with vcsim.running(tmp_path / "vcsim", FLAGS) as sim:
        vcsim.prepare(sim.connect())
        config = write_config(
            tmp_path / "vmpooler.yaml", sim, redis_server.port,
            pools={name: {"create_linked_clone": False} for name in POOLS}, size=SIZE,
            # The simulator comes back with an empty inventory and the test rebuilds the
            # template: a clone in between finds none (permanent, which a real vCenter's
            # restart would not cause): the pool's trial clone comes 1 s later, not 300 s.
            config={"task_limit": 6, "circuit_breaker_timeout": COOL_DOWN,
                    "config_error_retry_interval": 1})
        with running(config, sim) as (process, _port):
            yield process, sim, tmp_path / "vmpooler.log"


# -- the provider's wait for a task (no simulator) -----------------------------------------------

def _info(state: str, queued: float, op: str = "VirtualMachine.clone") -> Any:
    return SimpleNamespace(state=state, queueTime=queued, descriptionId=op, result=None)


class _Looks:
    """A task watch that reports ``looks`` in turn (what vCenter would say of the task)."""

    def __init__(self, looks: list[Any]) -> None:
        self.looks = looks

    def follow(self, moid: str) -> Any:
        looks = self.looks

        class Following:
            def __enter__(self) -> Any:
                return self

            def __exit__(self, *_exc: object) -> None:
                pass

            def next(self, _timeout: float | None = None) -> Any:
                return looks.pop(0)

        following = Following()
        following.moid = moid  # type: ignore[attr-defined]
        return following


def _vcenter(looks: list[Any]) -> Vcenter:
    config = SimpleNamespace(name="vsphere", server="vc", username="u")
    vc = Vcenter(config, None, None, watch=_Looks(looks))  # type: ignore[arg-type]
    vc.call = lambda exchange: exchange(None)  # type: ignore[method-assign]
    return vc


def test_a_task_vcenter_no_longer_knows_is_lost_not_failed() -> None:
    vc = _vcenter([_info("running", 1.0), None])
    with pytest.raises(TaskLostError, match="lost task task-7"):
        vc.settle("task-7", _info("running", 1.0), "clone of vm")


def test_a_task_id_a_restarted_vcenter_reused_is_lost() -> None:
    # The new vCenter numbers its tasks afresh: task-7 is now another clone, queued later.
    vc = _vcenter([_info("success", 50.0)])
    with pytest.raises(TaskLostError):
        vc.settle("task-7", _info("running", 1.0), "clone of vm")


def test_a_lost_clone_whose_vm_is_there_is_adopted() -> None:
    vc = _vcenter([None])
    assert vc.settle("task-7", _info("running", 1.0), "clone of vm",
                     adopt=lambda _session: "vm-42") == "vm-42"


def running_clones(si: Any) -> int:
    """Clone tasks vCenter is running now (its recent tasks)."""
    return sum(1 for task in si.content.taskManager.recentTask
               if task.info.descriptionId == "VirtualMachine.cloneVm"
               and task.info.state in ("running", "queued"))


@pytest.mark.integration
def test_a_vcenter_restart_under_clones_in_flight_does_not_open_the_breaker(
    manager: tuple[subprocess.Popen[str], vcsim.Simulator, Path],
    redis_client: redis.Redis,
) -> None:
    process, sim, log = manager
    # Clones in flight: the first fill's clones are submitted and their 3 s tasks run.
    wait_until(lambda: pending(redis_client) >= 4, 60, "clones reserved")
    old = sim.connect()
    wait_until(lambda: running_clones(old) >= 4, 30, "clone tasks running in vCenter")

    killed = time.monotonic()
    sim.restart()  # the same port, a fresh and empty inventory
    si = sim.connect()
    vcsim.prepare(si)  # the pools' template again (its own clone takes 3 s too)
    wait_until(lambda: in_sync(redis_client, si, POOLS, SIZE), 90,
               "the pools refilled on the new vCenter")
    refilled = time.monotonic() - killed
    print(f"pools full and in sync {refilled:.1f}s after the vCenter restart")

    assert process.poll() is None, "the manager kept running"
    assert not log_lines(log, "circuit breaker opened"), "\n".join(
        log_lines(log, "circuit breaker"))
    assert refilled < REFILL_BOUND, f"refill took {refilled:.1f}s"
    assert not orphans(redis_client, si, POOLS)
