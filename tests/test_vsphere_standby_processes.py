"""A pool's standby tier on the vCenter simulator, through the shipped commands as real
processes (``vmpooler run``; ``vmpooler api`` beside ``vmpooler manager`` where a manager is
killed).

A vSphere pool of size 2 with ``standby: 3`` on a simulator whose tasks take time
(``-task-delay``: clones 8 s, suspends 2 s, power-ons 3 s, ±20 %, where the burst is timed;
clones of 3 s, suspends of 1 s elsewhere, to keep the file short):

* both tiers fill: 2 ready VMs powered on, 3 standby VMs suspended in vCenter;
* a burst of checkouts through the API empties ``ready``, which is refilled by resuming
  standby VMs well before a clone could have done it, and clones refill the tier;
* with faults injected on ``SuspendVM_Task`` and ``PowerOnVM_Task`` nothing leaks: once
  things settle, every VM of the pool's folder is in exactly one of the pool's sets and
  every VM of those sets is in vCenter, without the discovery of strays having to help;
* a manager SIGKILLed while it resumes standby VMs: a second one takes the pool's lease
  and carries on with the same VMs (none lost, none cloned twice);
* the vCenter SIGKILLed and restarted with its inventory (the simulator keeps none: the
  test rebuilds it on a new simulator before a TCP relay on the configured port lets the
  pooler reach it): the standby VMs are all still there, and resumed when asked.

Everything in vCenter is read with the test's own pyvmomi session, never the provider's.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from pyVmomi import vim, vmodl

from tests import vcsim
from tests.harness import wait_until
from tests.http_client import request
from tests.tcp_relay import Relay
from tests.test_manager_process import processes, spawn  # noqa: F401 - the fixture
from tests.vsphere_run import log_lines, running, write_config
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]  # ~30 s each when idle

POOL = "alpha"
FOLDER = f"vmpooler/{POOL}"
SIZE = 2
STANDBY = 3
QUEUES = ("pending", "ready", "running", "completed", "standby", "discovered")
BASE = ("-guest-tools", "-guest-auto-ip")
CLONED = re.compile(r"\[\*\] \[" + POOL + r"\] '([^']+)' is being cloned")
SOURCE = "DC0_C0_RP0_VM0"  # the pools' template: a VM of the default inventory, no clone
STRAY = f"[{POOL}] '"  # with "found in inventory, in no queue": a VM no set held


def delays(clone: float, suspend: float, power_on: float) -> tuple[str, ...]:
    """``-task-delay`` for clones, suspends and power-ons (seconds; 0: synchronous)."""
    tasks = {"CloneVM_Task": clone, "SuspendVM_Task": suspend, "PowerOnVM_Task": power_on}
    spec = ",".join(f"{method}:{int(s * 1000)}" for method, s in tasks.items() if s)
    return ("-task-delay", spec) if spec else ()


def standby_config(tmp_path: Path, sim: vcsim.Simulator, redis_port: int,
                   **config: Any) -> Path:
    return write_config(tmp_path / "vmpooler.yaml", sim, redis_port,
                        pools={POOL: {"template": SOURCE, "create_linked_clone": False,
                                      "standby": STANDBY}},
                        size=SIZE, config={"task_limit": 6, **config})


# -- what Redis and vCenter hold --------------------------------------------------------------

class Watch:
    """Reads the pool's sets in one transaction each time, and remembers any VM seen in two
    of them at once."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.doubles: dict[str, tuple[str, ...]] = {}

    def queues(self) -> dict[str, set[str]]:
        pipe = self.client.pipeline(transaction=True)
        for queue in QUEUES:
            pipe.smembers(getattr(schema, queue)(POOL))
        sets = dict(zip(QUEUES, (set(members) for members in pipe.execute()), strict=True))
        seen = collections.Counter(vm for members in sets.values() for vm in members)
        for vm, count in seen.items():
            if count > 1:
                self.doubles[vm] = tuple(q for q, members in sets.items() if vm in members)
        return sets

    def states(self) -> dict[str, str | None]:
        """Each standby VM's step (``standby`` field of its hash)."""
        return {vm: self.client.hget(schema.vm(vm), "standby")
                for vm in self.client.smembers(schema.standby(POOL))}

    def settled(self, si: Any) -> bool:
        """Both tiers full (every standby VM suspended), nothing pending or being destroyed,
        and the folder holding exactly the pool's VMs, each in the power state of its set."""
        sets = self.queues()
        if (len(sets["ready"]) != SIZE or len(sets["standby"]) != STANDBY or sets["pending"]
                or sets["completed"] or sets["discovered"]
                or set(self.states().values()) != {"suspended"}):
            return False
        power = power_states(si)
        return (set(power) == set().union(*sets.values())
                and all(power[vm] == "suspended" for vm in sets["standby"])
                and all(power[vm] == "poweredOn" for vm in sets["ready"] | sets["running"]))


def power_states(si: Any) -> dict[str, str]:
    """Name -> power state of every VM in the pool's folder."""
    folder = vcsim.find(si, f"DC0/vm/{FOLDER}")
    states: dict[str, str] = {}
    for child in folder.childEntity if folder is not None else ():
        if isinstance(child, vim.VirtualMachine):
            with contextlib.suppress(vmodl.fault.ManagedObjectNotFound):  # destroyed meanwhile
                states[child.name] = str(child.runtime.powerState)
    return states


def tasks_running(si: Any, operation: str) -> int:
    return sum(1 for task in si.content.taskManager.recentTask
               if task.info.descriptionId == operation and task.info.state == "running")


def checkout(port: int) -> str:
    status, body = request("POST", f"http://127.0.0.1:{port}/api/v3/vm/{POOL}")
    assert status == 200, body
    return str(body[POOL]["hostname"]).split(".")[0]


def clones(log: Path) -> collections.Counter[str]:
    """How many times each VM name was cloned, by every manager that wrote ``log``."""
    return collections.Counter(CLONED.findall(log.read_text()))


def strays(log: Path, *, orphaned_clones: bool = False) -> list[str]:
    """The stray clean-up lines; with ``orphaned_clones``, less those naming only VMs whose
    clone a killed manager had sent to vCenter: the next owner gives them up as vanished
    (no clone slot is held for them any more), and when vCenter finishes the clone they are
    found in no queue and destroyed, the designed recovery (nothing leaks)."""
    found = [line for line in log_lines(log, "found in inventory, in no queue") if STRAY in line]
    if not orphaned_clones:
        return found
    given_up = {line.split("'")[1] for line in log_lines(
        log, "is pending but not in the provider's inventory and no clone is running")}
    return [line for line in found
            if not set(line.split("'")[1::2]) <= given_up]


def settle(watch: Watch, si: Any, timeout: float, what: str, log: Path) -> None:
    wait_until(lambda: watch.settled(si), timeout, what, every=0.2,
               explain=lambda: f"{watch.queues()}\n{watch.states()}\n{power_states(si)}\n"
                               + "\n".join(log.read_text().splitlines()[-30:]))


# -- both tiers fill, a burst is refilled from standby ----------------------------------------

CLONE, SUSPEND, POWER_ON, JITTER = 8.0, 2.0, 3.0, 0.2


def test_both_tiers_fill_and_a_burst_is_refilled_from_standby_before_a_clone_could(
        tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis) -> None:
    flags = (*BASE, *delays(CLONE, SUSPEND, POWER_ON), "-task-jitter", str(JITTER),
             "-fault-seed", "11")
    with vcsim.running(tmp_path / "vcsim", flags) as sim:
        si = sim.connect()
        config = standby_config(tmp_path, sim, redis_server.port)
        log = tmp_path / "vmpooler.log"
        with running(config, sim) as (process, port):
            watch = Watch(redis_client)
            started = time.monotonic()
            settle(watch, si, 60, "2 ready VMs and 3 suspended ones", log)
            filled = time.monotonic() - started
            sets, power = watch.queues(), power_states(si)
            assert {power[vm] for vm in sets["ready"]} == {"poweredOn"}
            assert {power[vm] for vm in sets["standby"]} == {"suspended"}
            assert len(power) == SIZE + STANDBY

            # -- a burst of checkouts empties ready ----------------------------------------
            standby = sets["standby"]
            burst = time.monotonic()
            taken = {checkout(port) for _ in range(SIZE)}
            assert taken == sets["ready"]
            fastest_clone = CLONE * (1 - JITTER)
            wait_until(lambda: len(watch.queues()["ready"]) == SIZE, 2 * fastest_clone,
                       "ready refilled", every=0.05)
            refilled = time.monotonic() - burst
            ready = watch.queues()["ready"]
            assert ready <= standby, f"{ready - standby} did not come from standby"
            assert refilled < fastest_clone, f"ready refilled in {refilled:.1f}s"
            power = power_states(si)
            assert {power[vm] for vm in ready} == {"poweredOn"}
            assert len(log_lines(log, "moved from 'standby' to 'ready'")) == SIZE

            # -- clones refill the tier --------------------------------------------------------
            settle(watch, si, 4 * CLONE, "the tier refilled by clones", log)
            tier = time.monotonic() - burst
            assert process.poll() is None
        made = clones(log)
        assert sum(made.values()) == SIZE + STANDBY + SIZE, made  # ready got no clone
        assert max(made.values()) == 1 and not strays(log) and not watch.doubles
        print(f"tiers full {filled:.1f}s after start; ready refilled {refilled:.1f}s after "
              f"the burst (clones take {fastest_clone:.1f}-{CLONE * (1 + JITTER):.1f}s), "
              f"the tier {tier:.1f}s after it")


# -- faults on suspend and power-on -----------------------------------------------------------

def test_failed_suspends_and_resumes_leak_no_vm(
        tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis) -> None:
    """Suspends fail 40 % of the time, power-ons half of it: each VM that failed is
    destroyed and replaced by a clone. Bursts of checkouts until both kinds failed."""
    faults = "SuspendVM_Task:0.4:TaskInProgress,PowerOnVM_Task:0.5:InsufficientResourcesFault"
    flags = (*BASE, *delays(3, 1, 1.5), "-fault", faults, "-fault-seed", "5")
    with vcsim.running(tmp_path / "vcsim", flags) as sim:
        si = sim.connect()
        config = standby_config(tmp_path, sim, redis_server.port,
                                circuit_breaker_failure_threshold=20, dlq_enabled=True)
        log = tmp_path / "vmpooler.log"
        watch = Watch(redis_client)

        def failed(step: str) -> set[str]:
            lines = log_lines(log, f" {step} failed, moved to 'completed'")
            return {line.split("'")[1] for line in lines if f"[{POOL}] '" in line}

        with running(config, sim) as (process, port):
            settle(watch, si, 60, "both tiers full despite failing suspends", log)
            bursts = 0
            while not (failed("suspend") and failed("resume")) and bursts < 6:
                bursts += 1
                for _ in range(SIZE):
                    checkout(port)
                settle(watch, si, 60, f"both tiers full again after burst {bursts}", log)
            assert process.poll() is None
        suspends, resumes = failed("suspend"), failed("resume")
        assert suspends and resumes, "the seed gives failed suspends and resumes"
        gone = suspends | resumes
        sets = watch.queues()
        assert not gone & set().union(*sets.values()) and not gone & set(power_states(si))
        assert {line.split("'")[1] for line in log_lines(log, "destroyed in")} >= gone
        letters = redis_client.zrange(schema.dlq("standby"), 0, -1)
        assert len(letters) == len(gone), letters
        assert not strays(log) and not watch.doubles
        print(f"{len(suspends)} failed suspends and {len(resumes)} failed resumes over "
              f"{bursts} bursts: all destroyed, {sum(clones(log).values())} clones")


# -- a manager killed, then the vCenter -------------------------------------------------------

def lease_holder(client: redis.Redis) -> int | None:
    value = client.get(schema.lease("pool", POOL))
    return int(value.split(" ", 1)[1].split(":")[1]) if value else None


def rebuild(si: Any, power: dict[str, str]) -> None:
    """The pool's folder, and its VMs named and powered as in ``power``."""
    folder = vcsim.make_folder(si, FOLDER)
    source = vcsim.find(si, f"DC0/vm/{SOURCE}")
    pool = vcsim.find(si, f"DC0/host/{vcsim.CLUSTER}").resourcePool
    spec = vim.vm.CloneSpec(location=vim.vm.RelocateSpec(pool=pool), powerOn=True)
    made = {name: vcsim.wait_task(source.CloneVM_Task(folder=folder, name=name, spec=spec))
            for name in power}
    suspending = [made[name].SuspendVM_Task() for name, state in power.items()
                  if state == "suspended"]
    for task in suspending:
        vcsim.wait_task(task)


def test_standby_vms_survive_a_killed_manager_and_a_restarted_vcenter(
        tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
        processes: list[subprocess.Popen[str]]) -> None:
    """``vmpooler api`` for the checkouts, and ``vmpooler manager`` (one process, the
    pool's lease holder) killed, then another."""
    log = tmp_path / "vmpooler.log"
    watch = Watch(redis_client)
    with contextlib.ExitStack() as stack:
        sim = stack.enter_context(vcsim.running(tmp_path / "vcsim", (*BASE, *delays(3, 1, 3))))
        si = sim.connect()
        relay = Relay(sim.port)
        stack.callback(relay.close)
        config = standby_config(tmp_path, dataclasses.replace(sim, port=relay.port),
                                redis_server.port, manager_heartbeat_interval=1)
        env = {"VMPOOLER_PROVIDER_VSPHERE_PASSWORD": sim.password}
        port = free_port()
        spawn(processes, "api", "--config", str(config), "--bind", f"127.0.0.1:{port}",
              "--workers", "1", log=tmp_path / "api.out", env=env)
        first = spawn(processes, "manager", "--config", str(config),
                      log=tmp_path / "first.out", env=env)
        settle(watch, si, 40, "both tiers full", log)

        # -- the manager is killed while it resumes standby VMs --------------------------------
        for _ in range(SIZE):
            checkout(port)
        wait_until(lambda: "resuming" in watch.states().values()
                   and tasks_running(si, "VirtualMachine.powerOn"), 10, "resumes in flight",
                   every=0.05)
        kept = watch.queues()["standby"]
        waking = {vm for vm, state in watch.states().items() if state == "resuming"}
        assert lease_holder(redis_client) == first.pid
        first.kill()  # SIGKILL: the pool's lease is left behind
        first.wait(10)
        killed = time.monotonic()
        second = spawn(processes, "manager", "--config", str(config),
                       log=tmp_path / "second.out", env=env)
        wait_until(lambda: lease_holder(redis_client) == second.pid, 20,
                   "the second manager to take the pool's lease", every=0.1)
        taken = time.monotonic() - killed
        settle(watch, si, 40, "both tiers full under the second manager", log)
        carried_on = time.monotonic() - killed
        sets = watch.queues()
        assert waking <= sets["ready"], "the VMs being resumed were finished"
        assert kept <= sets["ready"] | sets["standby"], "a standby VM was lost"
        # A clone the killed manager had not submitted yet is made again, under a new name.
        assert max(clones(log).values()) == 1, "a VM was cloned twice"

        # -- the vCenter is killed and comes back with its inventory ----------------------------
        power = power_states(si)
        standby = sets["standby"]
        failed_before = len(log_lines(log, f"[{POOL}] inventory failed"))
        relay.down()
        sim.process.kill()  # SIGKILL
        sim.process.wait(10)
        wait_until(lambda: len(log_lines(log, f"[{POOL}] inventory failed")) > failed_before,
                   30, "the manager to see vCenter gone", every=0.2)
        # The new vCenter: synchronous clones, so that the rebuild is quick.
        restarted = stack.enter_context(vcsim.running(tmp_path / "vcsim2",
                                                      (*BASE, *delays(0, 1, 3))))
        si = restarted.connect()
        rebuild(si, power)
        relay.up(restarted.port)
        back = time.monotonic()
        wait_until(lambda: log_lines(log, f"[{POOL}] inventory available again"), 30,
                   "the manager to reach the restarted vCenter", every=0.2)
        reached = time.monotonic() - back
        settle(watch, si, 20, "both tiers as they were", log)
        after = watch.queues()
        assert after["standby"] == standby, "a standby VM was lost"
        assert after["ready"] == sets["ready"], "a ready VM was lost"
        assert not log_lines(log, "moved from 'standby' to 'completed'")

        # -- and they are usable ------------------------------------------------------------
        resumed_before = len(log_lines(log, "moved from 'standby' to 'ready'"))
        for _ in range(SIZE):
            checkout(port)
        wait_until(lambda: len(watch.queues()["ready"]) == SIZE, 20, "ready refilled",
                   every=0.1)
        ready = watch.queues()["ready"]
        assert ready <= standby and {power_states(si)[vm] for vm in ready} == {"poweredOn"}
        assert len(log_lines(log, "moved from 'standby' to 'ready'")) == resumed_before + SIZE
        settle(watch, si, 30, "the tier refilled on the restarted vCenter", log)
        assert second.poll() is None
    assert not strays(log, orphaned_clones=True) and not watch.doubles
    print(f"lease taken {taken:.1f}s after the kill, both tiers full {carried_on:.1f}s after "
          f"it; the restarted vCenter's inventory read {reached:.1f}s after it was reachable")
