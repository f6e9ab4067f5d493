"""Standby VMs on vCenter: suspend (``SuspendVM_Task``), power off (``PowerOffVM_Task``) and
resume (``PowerOnVM_Task``), each idempotent.

Each operation reads the VM's ``runtime.powerState`` first and submits no task when the VM
is already where it is asked to go; otherwise it submits the task and waits for it through
:meth:`~vmpooler.providers.vsphere.exchange.Vcenter.task` (the task watch, no session held),
its faults translated as every other call's (:mod:`~vmpooler.providers.vsphere.faults`). A
task that fails with ``InvalidPowerState`` is success when a second read finds the VM in
the state asked for (it got there meanwhile: another client, or vCenter itself), and that
error otherwise. SOAP calls: 1 when there is nothing to do, 3 when a
task runs (the read and the task's submission, and its addition to the watch's view).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vmpooler.providers.base import Capability
from vmpooler.providers.errors import PermanentProviderError, ProviderError, VmNotFoundError
from vmpooler.providers.vsphere.collector import retrieve
from vmpooler.providers.vsphere.exchange import Vcenter
from vmpooler.providers.vsphere.faults import fault_name

__all__ = ["POWERED_OFF", "POWERED_ON", "SUSPENDED", "enter_standby", "resume"]

POWERED_ON = "poweredOn"
POWERED_OFF = "poweredOff"
SUSPENDED = "suspended"
_ALREADY_THERE = frozenset({"InvalidPowerState"})

Find = Callable[[Any], Any]
"""``find(session)``: the VM's reference; raises VmNotFoundError when it does not exist."""


def _power_state(session: Any, ref: Any) -> str | None:
    props = retrieve(session, ref, ["runtime.powerState"])
    if props is None:
        raise VmNotFoundError(f"VM {getattr(ref, '_moId', ref)} no longer exists")
    state = props.get("runtime.powerState")
    return None if state is None else str(state)


def _run(vc: Vcenter, find: Find, what: str, done: frozenset[str], method: str) -> None:
    """Submit ``method`` on the VM unless its power state is in ``done``, and wait for it."""
    def submit(session: Any) -> Any:
        ref = find(session)
        if _power_state(session, ref) in done:
            return None
        return getattr(ref, method)()

    try:
        vc.task(submit, what)
    except ProviderError as exc:
        if isinstance(exc, VmNotFoundError) or fault_name(exc) not in _ALREADY_THERE:
            raise
        if vc.call(lambda session: _power_state(session, find(session))) not in done:
            raise  # refused for a state that is not the one asked for


def enter_standby(vc: Vcenter, find: Find, vm: str, mode: Capability) -> None:
    """Suspend the VM (``mode=SUSPEND``; one already powered off stays so) or power it off
    (``mode=POWER_OFF``; a suspended one too). Returns when it is there; raises a
    ProviderError (VmNotFoundError when the VM does not exist)."""
    if mode is Capability.SUSPEND:
        _run(vc, find, f"suspend of {vm}", frozenset({SUSPENDED, POWERED_OFF}), "SuspendVM_Task")
    elif mode is Capability.POWER_OFF:
        _run(vc, find, f"power-off of {vm}", frozenset({POWERED_OFF}), "PowerOffVM_Task")
    else:
        raise PermanentProviderError(f"{mode!r} is not a standby mode")


def resume(vc: Vcenter, find: Find, vm: str) -> None:
    """Power the VM on (from suspended or powered off; one running already is left alone).
    Returns when it is powered on; raises as :func:`enter_standby`."""
    _run(vc, find, f"power-on of {vm}", frozenset({POWERED_ON}), "PowerOnVM_Task")
