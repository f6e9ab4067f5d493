"""Expired sessions on the vCenter simulator: ``NotAuthenticated`` faults injected by the
simulator itself (``-fault``), read back with the test's own pyvmomi session.

vCenter answers ``NotAuthenticated`` on a session that timed out. The provider logs in again
once and retries; a fault that persists after that is transient, never a permission problem
(pyvmomi's ``NotAuthenticated`` subclasses ``NoPermission``). A step that already started a
task does not start it again on the retry: a clone is never sent twice for one name.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from pyVmomi import vim, vmodl

from tests import vcsim
from tests.test_vsphere_provider import make
from vmpooler.providers.errors import PermissionDeniedError, ProviderError, is_permanent

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
        provider = make(sim)
        with pytest.raises(ProviderError) as caught:
            provider.vms_in_pool("p1")
        assert not isinstance(caught.value, PermissionDeniedError)
        assert not is_permanent(caught.value)
        assert provider.sessions.logins == 2  # the first login and one re-login, no more
    finally:
        sim.stop()


def test_a_real_permission_fault_stays_permanent(tmp_path: Path) -> None:
    sim = started(tmp_path, "-fault", "RetrievePropertiesEx:1:NoPermission")
    try:
        provider = make(sim)
        with pytest.raises(PermissionDeniedError) as caught:
            provider.vms_in_pool("p1")
        assert is_permanent(caught.value)
        assert provider.sessions.logins == 1
    finally:
        sim.stop()
