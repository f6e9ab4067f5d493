"""``vmpooler run`` with two vSphere pools on the vCenter simulator, as a real process.

Everything the pooler does is read back from the simulator with the test's own pyvmomi
session: clones of both pools (one with linked clones, its template prepared with the
linked-clone snapshot), a vmfloaty-style checkout, snapshot and revert, an added disk, the
return and the destroy, leftovers of an earlier run destroyed. Then the simulator is
stopped under the running manager (the breaker opens, logged once; ``/status`` and the
dashboard's reading show it) and a fresh one comes back on the same port (the test
rebuilds the inventory): the pools refill by themselves.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from pyVmomi import vim

from tests import vcsim
from tests.harness import wait_until
from tests.vsphere_run import in_sync as pools_in_sync
from tests.vsphere_run import log_lines, running, write_config
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis

pytestmark = pytest.mark.integration

POOLS = {"lc": {"create_linked_clone": True}, "full": {"create_linked_clone": False}}
SIZE = 2


def http(port: int, method: str, path: str) -> tuple[int, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def vm_object(si: Any, name: str) -> Any:
    for pool in POOLS:
        found = vcsim.find(si, f"DC0/vm/vmpooler/{pool}/{name}")
        if found is not None:
            return found
    return None


def in_sync(client: redis.Redis, si: Any) -> bool:
    """Every pool full, and each folder holds exactly the pool's ready VMs."""
    return pools_in_sync(client, si, POOLS, SIZE)


@pytest.fixture
def manager(tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
            ) -> Iterator[tuple[subprocess.Popen[str], vcsim.Simulator, int, Path]]:
    with vcsim.running(tmp_path / "vcsim") as sim:
        si = sim.connect()
        vcsim.prepare(si)  # the template; the pools' folders are created by the pooler
        vcsim.clone_plain_vm(si, "vmpooler/full", "leftover1")  # an earlier run's VM
        config = write_config(tmp_path / "vmpooler.yaml", sim, redis_server.port, pools=POOLS,
                              size=SIZE, config={"task_limit": 4, "circuit_breaker_timeout": 2,
                                                 "create_template_delta_disks": True,
                                                 # the new vCenter has no template until
                                                 # the test makes it (test_vsphere_restart)
                                                 "config_error_retry_interval": 1})
        with running(config, sim) as (process, port):
            yield process, sim, port, tmp_path / "vmpooler.log"


def test_vsphere_pools_serve_a_checkout_and_survive_a_vcenter_outage(
    manager: tuple[subprocess.Popen[str], vcsim.Simulator, int, Path],
    redis_client: redis.Redis,
) -> None:
    process, sim, port, log = manager
    si = sim.connect()
    wait_until(lambda: in_sync(redis_client, si), 60, "both vsphere pools full and in sync")
    assert vcsim.find(si, "DC0/vm/vmpooler/full/leftover1") is None  # discovered, destroyed
    template = vcsim.find(si, f"DC0/vm/{vcsim.TEMPLATE}")
    assert [s.name for s in template.snapshot.rootSnapshotList] == ["vmpooler-linked-clone"]

    # -- a vmfloaty-style session ------------------------------------------------------------
    status, body = http(port, "POST", "/api/v3/vm/lc")
    assert status == 200, body
    name = body["lc"]["hostname"].split(".")[0]
    vm = vm_object(si, name)
    assert vm is not None and vm.runtime.powerState == "poweredOn"
    status, body = http(port, "GET", f"/api/v3/vm/{name}")
    assert status == 200 and body[name]["state"] == "running"
    assert body[name]["ip"] == vm.guest.ipAddress

    snapshots = []
    for _ in range(2):
        status, body = http(port, "POST", f"/api/v3/vm/{name}/snapshot")
        assert status == 202, body
        snapshots.append(body[name]["snapshot"])
        wait_until(lambda s=snapshots[-1]: vm.snapshot is not None and
                   vm.snapshot.currentSnapshot is not None and
                   _snapshot_name(vm, vm.snapshot.currentSnapshot) == s, 20, "a snapshot")
    wait_until(lambda: set(snapshots) <= set(
        http(port, "GET", f"/api/v3/vm/{name}")[1][name].get("snapshots", [])), 20,
        "both snapshots recorded")
    status, _ = http(port, "POST", f"/api/v3/vm/{name}/snapshot/{snapshots[0]}")
    assert status == 202
    wait_until(lambda: _snapshot_name(vm, vm.snapshot.currentSnapshot) == snapshots[0], 20,
               "the revert to the first snapshot")

    disks = _disk_sizes(vm)
    status, body = http(port, "POST", f"/api/v3/vm/{name}/disk/3")
    assert status == 202, body
    wait_until(lambda: _disk_sizes(vm) == [*disks, 3 * 1024 * 1024], 20, "the new disk")

    status, _ = http(port, "DELETE", f"/api/v3/vm/{name}")
    assert status == 200
    wait_until(lambda: vm_object(si, name) is None, 30, "the returned VM destroyed")
    wait_until(lambda: in_sync(redis_client, si), 60, "the pool refilled")
    status, body = http(port, "GET", "/api/v3/status?view=providers")
    assert body["providers"]["vsphere"]["circuit_breaker"] == "closed"
    assert body["providers"]["vsphere"]["connections"]["size"] >= 2

    # -- vCenter goes away ---------------------------------------------------------------------
    sim.stop()
    wait_until(lambda: http(port, "GET", "/api/v3/status?view=providers")[1]["providers"]
               ["vsphere"]["circuit_breaker"] == "open", 60, "the breaker to open")
    wait_until(lambda: log_lines(log, "circuit breaker re-opened"), 30,
               "a failed trial while vCenter is away")
    assert process.poll() is None, "the manager kept running"
    assert len(log_lines(log, "circuit breaker opened after")) == 1
    for pool in POOLS:  # one line per outage per pool, not one per cycle
        assert len(log_lines(log, f"[{pool}] inventory failed")) <= 1
    assert not log_lines(log, "clone failed: CircuitOpenError")
    status, reading = http(port, "GET", "/api/v3/status?view=pools,queue,capacity,providers")
    provider = reading["providers"]["vsphere"]
    assert provider["circuit_breaker"] in ("open", "half_open")
    assert "unreachable" in provider["last_error"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/dashboard/", timeout=10) as page:
        assert b"card-providers" in page.read()

    # -- a fresh vCenter comes back (same address, inventory rebuilt) --------------------------
    sim.restart()
    si = sim.connect()
    vcsim.prepare(si)
    wait_until(lambda: in_sync(redis_client, si), 90, "the pools refilled on the new vCenter")
    assert process.poll() is None
    wait_until(lambda: http(port, "GET", "/api/v3/status?view=providers")[1]["providers"]
               ["vsphere"]["circuit_breaker"] == "closed", 30, "the breaker closed")
    assert log_lines(log, "circuit breaker closed")
    for pool in POOLS:
        assert log_lines(log, f"[{pool}] inventory available again")


def _snapshot_name(vm: Any, snapshot: Any) -> str | None:
    def walk(nodes: Any) -> Iterator[Any]:
        for node in nodes or ():
            yield node
            yield from walk(node.childSnapshotList)

    if vm.snapshot is None or snapshot is None:
        return None
    return next((n.name for n in walk(vm.snapshot.rootSnapshotList)
                 if n.snapshot._moId == snapshot._moId), None)


def _disk_sizes(vm: Any) -> list[int]:
    return [d.capacityInKB for d in vm.config.hardware.device
            if isinstance(d, vim.vm.device.VirtualDisk)]
