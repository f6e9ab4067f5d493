"""Expired sessions on the vCenter simulator: ``NotAuthenticated`` faults injected by the
simulator itself (``-fault``), read back with the test's own pyvmomi session.

vCenter answers ``NotAuthenticated`` on a session that timed out. The provider logs in again
once and retries; a fault that persists after that is transient, never a permission problem
(pyvmomi's ``NotAuthenticated`` subclasses ``NoPermission``). A step that already started a
task does not start it again on the retry: a clone is never sent twice for one name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyVmomi import vim, vmodl

from tests import vcsim
from tests.test_vsphere_provider import at_the_edge, make
from vmpooler.providers.errors import PermissionDeniedError, ProviderError, is_permanent

pytestmark = pytest.mark.integration  # each test runs the vCenter simulator (a process)

FOLDER = "vmpooler/p1"


def listed(si: Any, folder: str = FOLDER) -> list[str]:
    """Every VM name in the folder, duplicates kept (sorted)."""
    found = vcsim.find(si, f"DC0/vm/{folder}")
    names = []
    for child in found.childEntity if found is not None else ():
        if isinstance(child, vim.VirtualMachine):
            with contextlib.suppress(vmodl.fault.ManagedObjectNotFound):
                names.append(child.name)
    return sorted(names)


def started(tmp_path: Path, *flags: str) -> vcsim.Simulator:
    sim = vcsim.start(tmp_path / "vcsim", ("-guest-tools", "-guest-auto-ip", *flags))
    # The test's own setup reads with Fetch and WaitForUpdates, never with the collector's
    # RetrievePropertiesEx the faults below are injected on.
    vcsim.prepare(sim.connect(), folders=(FOLDER,), snapshot="vmpooler-linked-clone")
    return sim


def test_a_session_expiring_twice_is_a_transient_error_not_a_permission_one(
        tmp_path: Path) -> None:
    sim = started(tmp_path, "-fault", "RetrievePropertiesEx:1:NotAuthenticated")
    try:
        vcsim.clone_plain_vm(sim.connect(), FOLDER, "x")
        provider = make(sim)
        with pytest.raises(ProviderError) as caught:
            provider.get_vm("p1", "x")
        assert not isinstance(caught.value, PermissionDeniedError)
        assert not is_permanent(caught.value)
        assert provider.sessions.logins == 2  # the first login and one re-login, no more
    finally:
        sim.stop()


def test_a_real_permission_fault_stays_permanent(tmp_path: Path) -> None:
    sim = started(tmp_path, "-fault", "RetrievePropertiesEx:1:NoPermission")
    try:
        vcsim.clone_plain_vm(sim.connect(), FOLDER, "x")
        provider = make(sim)
        with pytest.raises(PermissionDeniedError) as caught:
            provider.get_vm("p1", "x")
        assert is_permanent(caught.value)
        assert provider.sessions.logins == 1
    finally:
        sim.stop()


@pytest.mark.parametrize("task_delay", ["", "CloneVM_Task:50"])
def test_expiring_sessions_never_clone_a_name_twice(tmp_path: Path, task_delay: str) -> None:
    """A third of the collector's reads fail with NotAuthenticated (fixed seed), among them
    the first look at a just-submitted clone task. Whatever the provider reports as cloned
    is in vCenter exactly once, and nothing else is."""
    flags = ["-fault", "RetrievePropertiesEx:0.3:NotAuthenticated", "-fault-seed", "7"]
    if task_delay:
        flags += ["-task-delay", task_delay]
    sim = started(tmp_path, *flags)
    try:
        provider = make(sim, connection_pool_size=1)
        sends: list[str] = []

        def observed(args: Any, send: Callable[[], Any]) -> Any:  # the clones sent, counted
            sends.append(args[1])
            return send()

        at_the_edge(provider, "CloneVM_Task", observed)
        cloned, failed = [], []
        for n in range(12):
            name = f"vm{n:02d}"
            try:
                provider.create_vm("p1", name)
            except ProviderError as exc:
                assert not is_permanent(exc), exc
                failed.append(f"{name}: {exc}")
            else:
                cloned.append(name)
        in_vcenter = listed(sim.connect())
        assert provider.sessions.logins > 1, "no session expired: the seed no longer bites"
        extra = len(in_vcenter) - len(set(in_vcenter)) + len(set(in_vcenter) - set(cloned))
        print(f"cloned {len(cloned)}, failed {len(failed)}, sent {len(sends)}, "
              f"in vCenter {len(in_vcenter)}, extra {extra}")
        assert in_vcenter == sorted(cloned), (extra, sends, failed)
        assert len(sends) == len(set(sends)), sends  # no name sent twice
    finally:
        sim.stop()
