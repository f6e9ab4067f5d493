"""The specifications the provider sends to vCenter: clones, NIC edits, disks, snapshots.

Pure builders over pyvmomi data objects; no calls to vCenter happen here.

A clone is marked as the gem marks it: ``extraConfig`` ``guestinfo.hostname`` = the VM's
name (which the guest reads with ``vmtoolsd --cmd "info-get guestinfo.hostname"`` to set
its hostname), plus ``guestinfo.vmpooler.pool`` and ``guestinfo.vmpooler.created_by``
(ours), and an annotation holding JSON with ``name``, ``created_by``, ``base_template``,
``creation_timestamp`` and (ours) ``pool``. It is powered on by the clone task itself.

Linked clones: with a snapshot named ``linked_clone_snapshot`` on the template (what
``create_template_delta_disks`` makes), the clone shares the template's disks from that
snapshot (``createNewChildDiskBacking``). Without one it falls back to the gem's
``moveChildMostDiskBacking``; full clones use ``moveAllDiskBackingsAndConsolidate``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from pyVmomi import vim

from vmpooler.providers.vsphere.settings import PoolPlacement

__all__ = [
    "clone_spec",
    "disk_add_spec",
    "find_snapshot",
    "nic_edit_spec",
    "snapshot_names",
]


def _annotation(placement: PoolPlacement, vm: str, username: str, template: str) -> str:
    return json.dumps({
        "name": vm,
        "created_by": username,
        "base_template": template,
        "creation_timestamp": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "pool": placement.name,
    }, indent=2)


def clone_spec(
    *,
    placement: PoolPlacement,
    vm: str,
    username: str,
    template: str,
    datastore: Any,
    resource_pool: Any,
    snapshot: Any | None,
    device_changes: Sequence[Any] = (),
    host: Any | None = None,
) -> Any:
    """The ``CloneSpec`` for VM ``vm`` of ``placement``'s pool (powered on, not a template),
    on ``host`` when one is chosen (``manage_host_selection``)."""
    extra = [("guestinfo.hostname", vm), ("guestinfo.vmpooler.pool", placement.name),
             ("guestinfo.vmpooler.created_by", username), *placement.extra_config]
    config = vim.vm.ConfigSpec(
        annotation=_annotation(placement, vm, username, template),
        extraConfig=[vim.option.OptionValue(key=k, value=v) for k, v in extra],
        deviceChange=list(device_changes),
    )
    if not placement.linked_clone:
        move = "moveAllDiskBackingsAndConsolidate"
    elif snapshot is not None:
        move = "createNewChildDiskBacking"
    else:
        move = "moveChildMostDiskBacking"
    location = vim.vm.RelocateSpec(datastore=datastore, pool=resource_pool, diskMoveType=move,
                                   host=host)
    return vim.vm.CloneSpec(location=location, config=config, powerOn=True, template=False,
                            snapshot=snapshot if placement.linked_clone else None)


def nic_edit_spec(template_nic: Any, network: Any, network_name: str,
                  port_group: tuple[str, str] | None) -> Any:
    """Edit the template's first NIC so the clone joins ``network``.

    ``port_group`` is ``(switch uuid, port group key)`` for a distributed port group, None
    for a standard network. The NIC keeps its type and key, as the gem keeps them.
    """
    nic = type(template_nic)()
    nic.key = template_nic.key
    nic.controllerKey = template_nic.controllerKey
    nic.unitNumber = template_nic.unitNumber
    nic.addressType = "assigned"
    nic.deviceInfo = vim.Description(label=template_nic.deviceInfo.label, summary=network_name)
    if port_group is not None:
        switch_uuid, key = port_group
        nic.backing = vim.vm.device.VirtualEthernetCard.DistributedVirtualPortBackingInfo(
            port=vim.dvs.PortConnection(switchUuid=switch_uuid, portgroupKey=key))
    else:
        nic.backing = vim.vm.device.VirtualEthernetCard.NetworkBackingInfo(
            deviceName=network_name, network=network, useAutoDetect=False)
    nic.connectable = vim.vm.device.VirtualDevice.ConnectInfo(
        allowGuestControl=True, startConnected=True, connected=True)
    return vim.vm.device.VirtualDeviceSpec(operation="edit", device=nic)


def first_nic(devices: Iterable[Any]) -> Any | None:
    """The first virtual Ethernet card among ``devices``."""
    return next((d for d in devices if isinstance(d, vim.vm.device.VirtualEthernetCard)), None)


def disk_add_spec(devices: Sequence[Any], size_gb: int, datastore_name: str) -> Any | None:
    """A ``ConfigSpec`` adding a thin ``size_gb`` GB disk on the first SCSI controller with a
    free unit (the gem's choice: fewer than 15 disks, lowest free unit, never the
    controller's own unit 7); None when every controller is full."""
    controllers = sorted((d for d in devices if isinstance(d, vim.vm.device.VirtualSCSIController)),
                         key=lambda d: d.key)
    for controller in controllers:
        used = {d.unitNumber for d in devices
                if isinstance(d, vim.vm.device.VirtualDisk) and d.controllerKey == controller.key}
        used.add(controller.scsiCtlrUnitNumber if controller.scsiCtlrUnitNumber is not None else 7)
        free = [unit for unit in range(16) if unit not in used]
        if len(used) - 1 >= 15 or not free:
            continue
        backing = vim.vm.device.VirtualDisk.FlatVer2BackingInfo(
            diskMode="persistent", thinProvisioned=True, fileName=f"[{datastore_name}]")
        disk = vim.vm.device.VirtualDisk(
            key=-1, controllerKey=controller.key, unitNumber=free[0], backing=backing,
            capacityInKB=size_gb * 1024 * 1024)
        change = vim.vm.device.VirtualDeviceSpec(operation="add", fileOperation="create",
                                                 device=disk)
        return vim.vm.ConfigSpec(deviceChange=[change])
    return None


def _walk(tree: Iterable[Any] | None) -> Iterable[Any]:
    for node in tree or ():
        yield node
        yield from _walk(node.childSnapshotList)


def find_snapshot(tree: Iterable[Any] | None, name: str) -> Any | None:
    """The snapshot named ``name`` in a ``snapshot.rootSnapshotList`` tree (first found,
    depth first as the gem searches), or None."""
    return next((node.snapshot for node in _walk(tree) if node.name == name), None)


def snapshot_names(tree: Iterable[Any] | None) -> tuple[str, ...]:
    """Every snapshot name in the tree, depth first."""
    return tuple(node.name for node in _walk(tree))
