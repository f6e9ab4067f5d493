"""Which folders ``purge_unconfigured_resources`` may remove, decided as the gem decides.

Each pool's folder ``a/b/pool`` makes ``<datacenter>/vm/a/b`` a *base* folder and ``pool`` a
configured title there. Every other folder directly inside a base folder is unconfigured,
unless the allowlist names it. Ours, for safety: a folder holding a template, a folder
holding further folders, and the base folders themselves are never removed (the gem would
try to destroy whatever it found); each one spared is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Any

from pyVmomi import vim

from vmpooler.providers.vsphere.collector import children, find_by_path
from vmpooler.providers.vsphere.inventory import Inventory
from vmpooler.providers.vsphere.sessions import Session
from vmpooler.providers.vsphere.settings import PoolPlacement

__all__ = ["unconfigured_folders"]

log = logging.getLogger(__name__)

Doomed = tuple[str, list[str], str]
"""(folder path, ids of the VMs inside it, the folder's id)."""


def configured_titles(placements: Sequence[PoolPlacement]) -> dict[str, set[str]]:
    """Base folder path -> the folder titles pools use there."""
    bases: dict[str, set[str]] = {}
    for placement in placements:
        *parents, title = placement.folder.split("/")
        base = "/".join([f"{placement.datacenter}/vm", *parents])
        bases.setdefault(base, set()).add(title)
    return bases


def unconfigured_folders(
    session: Session,
    inventory: Inventory,
    placements: Sequence[PoolPlacement],
    allowlist: Collection[str],
) -> list[Doomed]:
    """The folders to remove, with the VMs each holds. Reads only; removes nothing."""
    templates = {_template_id(session, inventory, p) for p in placements} - {None}
    doomed: list[Doomed] = []
    for base, titles in sorted(configured_titles(placements).items()):
        base_folder = find_by_path(session, base)
        if not isinstance(base_folder, vim.Folder):
            continue
        for folder, props in children(session, base_folder, vim.Folder):
            title = str(props.get("name"))
            path = f"{base}/{title}"
            if title in titles or title in allowlist:
                continue
            vms = children(session, folder, vim.VirtualMachine, ("name", "config.template"))
            if any(p.get("config.template") or vm._moId in templates for vm, p in vms):
                log.warning("[!] not removing unconfigured folder %s: it holds a template", path)
                continue
            if children(session, folder, vim.Folder):
                log.warning("[!] not removing unconfigured folder %s: it holds folders", path)
                continue
            doomed.append((path, [vm._moId for vm, _ in vms], folder._moId))
    return doomed


def _template_id(session: Session, inventory: Inventory, placement: PoolPlacement) -> Any:
    try:
        return inventory.template(session, placement, None)._moId
    except Exception:  # a pool whose template is missing protects nothing
        return None
