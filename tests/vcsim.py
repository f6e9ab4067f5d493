"""The vCenter simulator for tests: start one on a free loopback port, shape its inventory,
and read it back with pyvmomi directly (never through the provider under test).

The binary is built by ``../shared/tools/vcsim/build.sh`` (``.ci/run`` does it); its path
comes from ``VCSIM_BIN`` (default ``/tmp/vcsim``). Without it the vSphere tests are skipped,
unless ``VMPOOLER_REQUIRE_VCSIM=1`` (set by ``.ci/run``), which makes them fail instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

VCSIM_BIN = os.environ.get("VCSIM_BIN", "/tmp/vcsim")
TEMPLATE = "Templates/tmpl0"
CLUSTER = "DC0_C0"
DATASTORE = "LocalDS_0"


def require_vcsim() -> str:
    """The simulator's path; skips (or fails under ``VMPOOLER_REQUIRE_VCSIM``) without it."""
    if os.access(VCSIM_BIN, os.X_OK):
        return VCSIM_BIN
    message = f"vCenter simulator not built at {VCSIM_BIN} (../shared/tools/vcsim/build.sh)"
    if os.environ.get("VMPOOLER_REQUIRE_VCSIM") == "1":
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class Simulator:
    """A running simulator. ``port`` is fixed for its life; :meth:`restart` keeps it."""

    process: subprocess.Popen[str]
    port: int
    tmpdir: Path
    flags: tuple[str, ...]
    username: str = "user"
    password: str = "pass"

    def stop(self) -> None:
        """SIGTERM and wait (its datastore directories are removed)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def restart(self) -> None:
        """Stop, then start a fresh simulator (empty default inventory) on the same port."""
        self.stop()
        fresh = start(self.tmpdir, self.flags, port=self.port)
        self.process = fresh.process

    def connect(self) -> Any:
        """A pyvmomi ServiceInstance of the test's own (not the provider's)."""
        from pyVim.connect import SmartConnect

        return SmartConnect(host="127.0.0.1", port=self.port, user=self.username,
                            pwd=self.password, disableSslCertValidation=True)


def start(tmpdir: Path, flags: tuple[str, ...] = (), *, port: int = 0) -> Simulator:
    """Start ``vcsim -port <port>`` (0: a free one) and wait until it listens."""
    binary = require_vcsim()
    tmpdir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + 20
    while True:
        process = subprocess.Popen(
            [binary, "-port", str(port), *flags], stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "TMPDIR": str(tmpdir)})
        info: dict[str, str] = {}
        assert process.stdout is not None
        while "VCSIM_PASSWORD" not in info:
            line = process.stdout.readline()
            if not line:
                break
            key, _, value = line.strip().partition("=")
            info[key] = value
        if "VCSIM_PORT" in info:
            return Simulator(process, int(info["VCSIM_PORT"]), tmpdir, tuple(flags))
        process.wait(5)
        if port == 0 or time.monotonic() > deadline:  # a fixed port may still be closing
            raise RuntimeError(f"vcsim did not start (port {port})")


@contextmanager
def running(tmpdir: Path, flags: tuple[str, ...] = ("-guest-tools", "-guest-auto-ip")
            ) -> Iterator[Simulator]:
    sim = start(tmpdir, flags)
    try:
        yield sim
    finally:
        sim.stop()


# -- shaping and reading the inventory (pyvmomi, test side) -------------------------------------

def wait_task(task: Any) -> Any:
    from pyVim.task import WaitForTask

    WaitForTask(task)
    return task.info.result


def find(si: Any, path: str) -> Any:
    return si.content.searchIndex.FindByInventoryPath(inventoryPath=path)


def make_folder(si: Any, path: str) -> Any:
    """Create ``DC0/vm/<path>`` (and its parents) if missing; return it."""
    from pyVmomi import vim

    parent = find(si, "DC0/vm")
    current = "DC0/vm"
    for part in path.strip("/").split("/"):
        current = f"{current}/{part}"
        child = find(si, current)
        if child is None:
            child = parent.CreateFolder(name=part)
        assert isinstance(child, vim.Folder)
        parent = child
    return parent


def prepare(si: Any, folders: tuple[str, ...] = (), template: str = TEMPLATE,
            snapshot: str | None = None) -> Any:
    """Make ``template`` (a powered-off template cloned from a default VM, optionally with a
    snapshot named ``snapshot``) and the given folders under ``DC0/vm``."""
    from pyVmomi import vim

    parent_path, _, name = template.rpartition("/")
    parent = make_folder(si, parent_path) if parent_path else find(si, "DC0/vm")
    source = find(si, "DC0/vm/DC0_C0_RP0_VM0")
    pool = find(si, f"DC0/host/{CLUSTER}").resourcePool
    spec = vim.vm.CloneSpec(location=vim.vm.RelocateSpec(pool=pool), powerOn=False,
                            template=True)
    made = wait_task(source.CloneVM_Task(folder=parent, name=name, spec=spec))
    if snapshot:
        wait_task(made.CreateSnapshot_Task(name=snapshot, description="test", memory=False,
                                           quiesce=False))
    for folder in folders:
        make_folder(si, folder)
    return made


def vm_names(si: Any, folder: str) -> set[str]:
    """Names of the VMs directly in ``DC0/vm/<folder>`` (empty when it does not exist)."""
    from pyVmomi import vim, vmodl

    found = find(si, f"DC0/vm/{folder}")
    if found is None:
        return set()
    names = set()
    for child in found.childEntity:
        if isinstance(child, vim.VirtualMachine):
            # one destroyed between the listing and this read is no longer there
            with contextlib.suppress(vmodl.fault.ManagedObjectNotFound):
                names.add(child.name)
    return names


def clone_plain_vm(si: Any, folder: str, name: str) -> Any:
    """A VM made behind the pooler's back (a leftover of an earlier run), powered on."""
    from pyVmomi import vim

    source = find(si, f"DC0/vm/{TEMPLATE}")
    pool = find(si, f"DC0/host/{CLUSTER}").resourcePool
    spec = vim.vm.CloneSpec(location=vim.vm.RelocateSpec(pool=pool), powerOn=True)
    return wait_task(source.CloneVM_Task(folder=make_folder(si, folder), name=name, spec=spec))
