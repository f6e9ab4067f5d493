"""EBS disks and snapshots of one instance: ``create_disk``, ``create_snapshot`` and
``revert_snapshot`` of the EC2 provider (the gem leaves all three as comments).

What the instance carries, so that reading it costs no further call: a tag
``vmpooler-snapshot:<name>`` per snapshot taken (``get_vm`` lists them) and
``vmpooler-extras`` once it has disks or snapshots of ours (``destroy_vm`` then deletes the
volumes and snapshots tagged with its ``vm_name``). Every volume and snapshot made here is
tagged ``vm_name`` and ``pool``; snapshots also ``snapshot_name`` and ``device``.

A revert stops the instance, replaces every volume that has a snapshot of that name (root
included) by a new volume made from it, deletes the old one, and starts the instance again.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vmpooler.providers.aws.purge import tags_of
from vmpooler.providers.errors import PermanentProviderError, TransientProviderError

if TYPE_CHECKING:
    from vmpooler.providers.aws.client import Ec2

__all__ = ["EXTRAS_TAG", "SNAPSHOT_TAG", "Volumes", "snapshot_names"]

SNAPSHOT_TAG = "vmpooler-snapshot:"
EXTRAS_TAG = "vmpooler-extras"
_DEVICES = tuple(f"/dev/sd{letter}" for letter in "fghijklmnop")


def snapshot_names(tags: dict[str, str]) -> tuple[str, ...]:
    """The snapshots an instance's tags record, in name order."""
    return tuple(sorted(k[len(SNAPSHOT_TAG):] for k in tags if k.startswith(SNAPSHOT_TAG)))


def _tags(**tags: str) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


class Volumes:
    """Disks and snapshots through ``ec2``; ``power(instance_id, on)`` starts or stops an
    instance and blocks until it is running or stopped. Thread-safe (keeps no state)."""

    def __init__(self, ec2: Ec2, power: Callable[..., None], *,
                 poll_interval: float, timeout: float,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ec2 = ec2
        self._power = power
        self._poll = poll_interval
        self._timeout = timeout
        self._sleep = sleep
        self._clock = clock

    def _wait(self, what: str, read: Callable[[], Any], done: Callable[[Any], bool]) -> None:
        deadline = self._clock() + self._timeout
        while not done(read()):
            if self._clock() >= deadline:
                raise TransientProviderError(f"{what}: not done after {self._timeout:.0f} s")
            self._sleep(self._poll)

    def _volume_state(self, volume_id: str) -> str:
        found = self.ec2.call("describe_volumes", volume_id, VolumeIds=[volume_id])["Volumes"]
        return str(found[0]["State"]) if found else "gone"

    def _snapshot_state(self, snapshot_id: str) -> str:
        found = self.ec2.call("describe_snapshots", snapshot_id,
                              SnapshotIds=[snapshot_id])["Snapshots"]
        return str(found[0]["State"]) if found else "gone"

    def _new_volume(self, zone: str, tags: list[dict[str, str]], **params: Any) -> str:
        made = self.ec2.call("create_volume", "a volume", AvailabilityZone=zone,
                             VolumeType="gp3", TagSpecifications=[
                                 {"ResourceType": "volume", "Tags": tags}], **params)
        volume = str(made["VolumeId"])
        self._wait(f"volume {volume}", lambda: self._volume_state(volume),
                   lambda state: state == "available")
        return volume

    def create_disk(self, instance: dict[str, Any], pool: str, vm: str, size_gb: int) -> bool:
        """A new gp3 volume of ``size_gb`` GB in the instance's zone, attached at the first
        free ``/dev/sdf``…``/dev/sdp``, named ``<vm>-disk<n>``."""
        mappings = instance.get("BlockDeviceMappings") or []
        used = {m.get("DeviceName") for m in mappings}
        device = next((d for d in _DEVICES if d not in used), None)
        if device is None:
            raise PermanentProviderError(f"VM {vm} has no free device name for a disk")
        zone = str(instance["Placement"]["AvailabilityZone"])
        volume = self._new_volume(zone, _tags(vm_name=vm, pool=pool,
                                              Name=f"{vm}-disk{len(mappings)}"),
                                  Size=size_gb)
        self.ec2.call("attach_volume", vm, Device=device, InstanceId=instance["InstanceId"],
                      VolumeId=volume)
        self.ec2.call("create_tags", vm, Resources=[instance["InstanceId"]],
                      Tags=_tags(**{EXTRAS_TAG: "true"}))
        return True

    def create_snapshot(self, instance: dict[str, Any], pool: str, vm: str,
                        name: str) -> bool:
        """One EBS snapshot per attached volume, tagged ``snapshot_name`` ``name``; a name
        already taken is a PermanentProviderError."""
        if SNAPSHOT_TAG + name in tags_of(instance):
            raise PermanentProviderError(
                f"Snapshot {name} for VM {vm} in pool {pool} already exists")
        for mapping in instance.get("BlockDeviceMappings") or []:
            volume = (mapping.get("Ebs") or {}).get("VolumeId")
            if volume is None:
                continue
            self.ec2.call("create_snapshot", vm, VolumeId=volume,
                          Description=f"vmpooler snapshot {name} of {vm}",
                          TagSpecifications=[{"ResourceType": "snapshot", "Tags": _tags(
                              vm_name=vm, pool=pool, snapshot_name=name,
                              device=str(mapping["DeviceName"]))}])
        self.ec2.call("create_tags", vm, Resources=[instance["InstanceId"]],
                      Tags=_tags(**{SNAPSHOT_TAG + name: "", EXTRAS_TAG: "true"}))
        return True

    def _snapshots(self, vm: str, name: str | None = None) -> list[dict[str, Any]]:
        filters = [{"Name": "tag:vm_name", "Values": [vm]}]
        if name is not None:
            filters.append({"Name": "tag:snapshot_name", "Values": [name]})
        return list(self.ec2.call("describe_snapshots", vm, OwnerIds=["self"],
                                  Filters=filters)["Snapshots"])

    def revert_snapshot(self, instance: dict[str, Any], pool: str, vm: str,
                        name: str) -> bool:
        """Replace the instance's volumes by ones made from snapshot ``name`` (see the module
        docstring); False when the VM has no such snapshot."""
        snapshots = self._snapshots(vm, name)
        if not snapshots:
            return False
        for snap in snapshots:
            self._wait(f"snapshot {snap['SnapshotId']}",
                       functools.partial(self._snapshot_state, str(snap["SnapshotId"])),
                       lambda state: state == "completed")
        instance_id = str(instance["InstanceId"])
        zone = str(instance["Placement"]["AvailabilityZone"])
        current = {m["DeviceName"]: (m.get("Ebs") or {}).get("VolumeId")
                   for m in instance.get("BlockDeviceMappings") or []}
        self._power(instance_id, False)
        for snap in snapshots:
            device = tags_of(snap).get("device")
            old = current.get(device)
            if device is None:
                continue
            new = self._new_volume(zone, _tags(vm_name=vm, pool=pool, Name=f"{vm}-{device}"),
                                   SnapshotId=snap["SnapshotId"])
            if old is not None:
                self.ec2.call("detach_volume", vm, VolumeId=old, InstanceId=instance_id)
                self._wait(f"detach of {old}", functools.partial(self._volume_state, old),
                           lambda state: state in ("available", "gone"))
            self.ec2.call("attach_volume", vm, Device=device, InstanceId=instance_id,
                          VolumeId=new)
            if old is not None:
                self.ec2.call("delete_volume", vm, VolumeId=old)
        self._power(instance_id, True)
        return True

    def delete_extras(self, vm: str) -> None:
        """Delete the detached volumes and the snapshots tagged with ``vm``'s name (after
        its instance is terminated)."""
        volumes = self.ec2.call("describe_volumes", vm, Filters=[
            {"Name": "tag:vm_name", "Values": [vm]},
            {"Name": "status", "Values": ["available"]}])["Volumes"]
        for volume in volumes:
            self.ec2.call("delete_volume", vm, VolumeId=volume["VolumeId"])
        for snap in self._snapshots(vm):
            self.ec2.call("delete_snapshot", vm, SnapshotId=snap["SnapshotId"])
