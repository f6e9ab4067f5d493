"""Key names of the work in flight: clone counters and slot sets, the task queues (disk,
snapshot) and the migrations running.

Part of :mod:`vmpooler.actors.storage.schema`: import the names from there."""

from __future__ import annotations

from vmpooler.actors.storage.schema.prefix import PREFIX as _P

__all__ = [
    "migration",
    "tasks_clone",
    "tasks_clone_slots",
    "tasks_disk",
    "tasks_ondemandclone",
    "tasks_ondemandclone_slots",
    "tasks_slot_owners",
    "tasks_snapshot",
    "tasks_snapshot_revert",
]



def tasks_clone() -> str:
    """Integer: pooled clones in flight."""
    return f"{_P}tasks__clone"


def tasks_ondemandclone() -> str:
    """Integer: on-demand clones in flight."""
    return f"{_P}tasks__ondemandclone"


def tasks_clone_slots(manager: str) -> str:
    """Set (ours): the VMs whose pooled clone slot ``manager`` holds (their clone not
    answered yet). ``tasks__clone`` is kept equal to the sum of these sets' sizes."""
    return f"{_P}tasks__clone__{manager}"


def tasks_ondemandclone_slots(manager: str) -> str:
    """Set (ours): the VMs whose on-demand clone slot ``manager`` holds."""
    return f"{_P}tasks__ondemandclone__{manager}"


def tasks_slot_owners() -> str:
    """Hash (ours): the managers that may hold clone slots (have slot sets), one field each
    (value ``1``)."""
    return f"{_P}tasks__slot_owners"


def tasks_disk() -> str:
    """Set of ``"<vm>:<gb>"`` disk requests."""
    return f"{_P}tasks__disk"


def tasks_snapshot() -> str:
    """Set of ``"<vm>:<name>"`` snapshot requests."""
    return f"{_P}tasks__snapshot"


def tasks_snapshot_revert() -> str:
    """Set of ``"<vm>:<name>"`` snapshot-revert requests."""
    return f"{_P}tasks__snapshot-revert"


def migration() -> str:
    """Set of VMs migrating now (vSphere provider)."""
    return f"{_P}migration"
