"""The vSphere provider's standby operations against the vCenter simulator: suspend, power
off and resume, their idempotence, a missing VM, and how injected faults are classified.

Power states are read back with the test's own pyvmomi session, never through the provider.
The simulator finishes its tasks inside the call: nothing sleeps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import vcsim
from tests.test_vsphere_provider import at_the_edge, make
from vmpooler.providers.base import Capability
from vmpooler.providers.errors import PermissionDeniedError, ProviderError, is_permanent
from vmpooler.providers.vsphere import VsphereProvider
from vmpooler.providers.vsphere.faults import VcenterFaultError

pytestmark = pytest.mark.integration  # each test runs the vCenter simulator (a process)

PATH = "DC0/vm/vmpooler/p1/"


def _simulator(tmp_path: Path, *flags: str) -> Iterator[vcsim.Simulator]:
    with vcsim.running(tmp_path / "vcsim", ("-guest-tools", "-guest-auto-ip", *flags)) as sim:
        vcsim.prepare(sim.connect(), folders=("vmpooler/p1",), snapshot="vmpooler-linked-clone")
        yield sim


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[vcsim.Simulator]:
    yield from _simulator(tmp_path)


def power_state(sim: vcsim.Simulator, vm: str) -> str:
    return str(vcsim.find(sim.connect(), PATH + vm).runtime.powerState)


def counting(provider: VsphereProvider, method: str) -> list[int]:
    """How many times the provider's sessions send SOAP ``method`` (one list item each)."""
    sent: list[int] = []

    def hook(_args: Any, send: Callable[[], Any]) -> Any:
        sent.append(1)
        return send()

    at_the_edge(provider, method, hook)
    return sent


def test_vsphere_declares_both_standby_modes(sim: vcsim.Simulator) -> None:
    assert make(sim).capabilities == frozenset({Capability.SUSPEND, Capability.POWER_OFF})


def test_suspend_then_resume(sim: vcsim.Simulator) -> None:
    provider = make(sim)
    provider.create_vm("p1", "sb1")
    assert provider.suspend_vm("p1", "sb1") is True
    assert power_state(sim, "sb1") == "suspended"
    info = provider.get_vm("p1", "sb1")
    assert info is not None and info.powerstate == "suspended"
    assert provider.resume_vm("p1", "sb1") is True
    assert power_state(sim, "sb1") == "poweredOn"


def test_power_off_then_resume(sim: vcsim.Simulator) -> None:
    provider = make(sim)
    provider.create_vm("p1", "sb2")
    assert provider.suspend_vm("p1", "sb2", mode=Capability.POWER_OFF) is True
    assert power_state(sim, "sb2") == "poweredOff"
    assert provider.resume_vm("p1", "sb2") is True
    assert power_state(sim, "sb2") == "poweredOn"


def test_already_there_submits_no_task(sim: vcsim.Simulator) -> None:
    provider = make(sim)  # hooks first: they apply to sessions opened afterwards
    powers_on = counting(provider, "PowerOnVM_Task")
    suspends = counting(provider, "SuspendVM_Task")
    provider.create_vm("p1", "sb3")
    assert provider.resume_vm("p1", "sb3") is True  # running already
    assert powers_on == []
    provider.suspend_vm("p1", "sb3")
    assert suspends == [1]
    assert provider.suspend_vm("p1", "sb3") is True  # suspended already
    assert suspends == [1]
    assert provider.suspend_vm("p1", "sb3", mode=Capability.POWER_OFF) is True  # moves on
    assert power_state(sim, "sb3") == "poweredOff"
    assert provider.suspend_vm("p1", "sb3") is True  # powered off: stays so
    assert suspends == [1] and power_state(sim, "sb3") == "poweredOff"


def test_reached_meanwhile_is_success(sim: vcsim.Simulator) -> None:
    """The VM gets suspended by someone else between the provider's read and its task:
    vCenter refuses the task with InvalidPowerState, and the VM is where it was asked to be."""
    provider = make(sim)
    raced: list[int] = []

    def suspended_first(_args: Any, send: Callable[[], Any]) -> Any:
        vcsim.wait_task(vcsim.find(sim.connect(), PATH + "sb4").SuspendVM_Task())
        raced.append(1)
        return send()

    at_the_edge(provider, "SuspendVM_Task", suspended_first)
    provider.create_vm("p1", "sb4")
    assert provider.suspend_vm("p1", "sb4") is True
    assert raced == [1]
    assert power_state(sim, "sb4") == "suspended"


def test_a_missing_vm_is_false(sim: vcsim.Simulator) -> None:
    provider = make(sim)
    assert provider.suspend_vm("p1", "nope") is False
    assert provider.suspend_vm("p1", "nope", mode=Capability.POWER_OFF) is False
    assert provider.resume_vm("p1", "nope") is False
    provider.create_vm("p1", "gone1")
    provider.destroy_vm("p1", "gone1")
    assert provider.resume_vm("p1", "gone1") is False


@pytest.mark.parametrize(("method", "fault", "error", "permanent"), [
    ("SuspendVM_Task", "TaskInProgress", VcenterFaultError, False),
    ("PowerOnVM_Task", "NoPermission", PermissionDeniedError, True),
])
def test_injected_faults_are_classified_as_the_others(
        tmp_path: Path, method: str, fault: str, error: type[ProviderError],
        permanent: bool) -> None:
    """The simulator fails every ``method`` task with ``fault``: transient and permanent as
    for clones and destroys, and the VM is left as it was."""
    for sim in _simulator(tmp_path, "-fault", f"{method}:1:{fault}"):
        provider = make(sim)
        provider.create_vm("p1", "flt1")
        if method == "PowerOnVM_Task":
            provider.suspend_vm("p1", "flt1")
        before = power_state(sim, "flt1")
        call = provider.resume_vm if method == "PowerOnVM_Task" else provider.suspend_vm
        with pytest.raises(error, match=fault) as raised:
            call("p1", "flt1")
        assert is_permanent(raised.value) is permanent
        assert power_state(sim, "flt1") == before


def test_invalid_power_state_for_another_state_is_an_error(sim: vcsim.Simulator) -> None:
    """InvalidPowerState means "already there" only when a second read finds the VM there.
    The simulator's own injected InvalidPowerState carries no states (pyvmomi cannot read
    it), so this one is raised at the pyvmomi edge in its place."""
    from pyVmomi import vim

    provider = make(sim)

    def refused(_args: Any, _send: Callable[[], Any]) -> Any:
        raise vim.fault.InvalidPowerState(msg="refused", requestedState="suspended",
                                          existingState="poweredOn")

    at_the_edge(provider, "SuspendVM_Task", refused)
    provider.create_vm("p1", "ips1")
    with pytest.raises(VcenterFaultError, match="InvalidPowerState") as raised:
        provider.suspend_vm("p1", "ips1")
    assert not is_permanent(raised.value)
    assert power_state(sim, "ips1") == "poweredOn"
