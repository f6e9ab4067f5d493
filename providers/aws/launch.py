"""What a ``RunInstances`` of one VM asks for: tags, placement, network, key, hibernation
and the root volume's size (:func:`launch_params`); the AMIs' device mappings that the size
needs, looked up once per AMI (:class:`Images`); and when a launch is done
(:func:`running_with_ip`)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vmpooler.providers.aws.settings import PoolSpec
from vmpooler.providers.aws.watch import Seen
from vmpooler.providers.errors import (
    PermanentProviderError,
    TemplateNotFoundError,
    TransientProviderError,
)

if TYPE_CHECKING:
    from vmpooler.providers.aws.client import Ec2

__all__ = ["Images", "launch_params", "running_with_ip"]


class Images:
    """The block device mappings of AMIs, each looked up once (``DescribeImages``).
    Thread-safe."""

    def __init__(self, ec2: Ec2) -> None:
        self.ec2 = ec2
        self._lock = threading.Lock()
        self._known: dict[str, list[dict[str, Any]]] = {}

    def devices(self, ami: str) -> list[dict[str, Any]]:
        """The AMI's mappings; TemplateNotFoundError when EC2 has no such AMI, a
        PermanentProviderError when its root device is not EBS."""
        with self._lock:
            known = self._known.get(ami)
        if known is not None:
            return known
        images = self.ec2.call("describe_images", ami, ImageIds=[ami])["Images"]
        if not images:
            raise TemplateNotFoundError(f"template (AMI) {ami} not found")
        if images[0].get("RootDeviceType") != "ebs":
            raise PermanentProviderError(f"configuration error: AMI {ami} has no EBS root "
                                         f"device, so volume_size cannot apply")
        devices = list(images[0].get("BlockDeviceMappings") or [])
        with self._lock:
            self._known[ami] = devices
        return devices


def launch_params(spec: PoolSpec, vm: str, ami: str, lifetime_hours: int,
                  key_name: str | None,
                  devices: Callable[[str], list[dict[str, Any]]]) -> dict[str, Any]:
    """``RunInstances``' parameters for VM ``vm`` of the pool ``spec`` from ``ami``, with a
    fresh ``ClientToken`` (a call sends the same parameters on each try)."""
    name = f"{vm}.{spec.domain}" if spec.domain else vm
    tags = {**dict(spec.instance_tags), "vm_name": vm, "pool": spec.name, "Name": name,
            "lifetime": f"{lifetime_hours}h"}
    params: dict[str, Any] = {
        "ImageId": ami, "InstanceType": spec.amisize, "MinCount": 1, "MaxCount": 1,
        "ClientToken": f"{vm}-{uuid.uuid4().hex[:16]}",
        "InstanceInitiatedShutdownBehavior": "stop" if spec.hibernate else "terminate",
        "TagSpecifications": [
            {"ResourceType": "instance",
             "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]},
            {"ResourceType": "volume", "Tags": [{"Key": "vm_name", "Value": vm},
                                                {"Key": "pool", "Value": spec.name}]}],
    }
    if spec.subnet_id:
        params["SubnetId"] = spec.subnet_id
    elif spec.zone:
        params["Placement"] = {"AvailabilityZone": spec.zone}
    if spec.security_group_ids:
        params["SecurityGroupIds"] = list(spec.security_group_ids)
    if key_name:
        params["KeyName"] = key_name
    if spec.hibernate:
        params["HibernationOptions"] = {"Configured": True}
    if spec.volume_size:
        params["BlockDeviceMappings"] = [
            {"DeviceName": m["DeviceName"],
             "Ebs": {"VolumeSize": spec.volume_size, "DeleteOnTermination": True}}
            for m in devices(ami) if "Ebs" in m]
    return params


def running_with_ip(seen: Seen | None) -> bool:
    """A launch's wait: done once running with an address; an error once it is gone."""
    if seen is None:
        raise TransientProviderError("the new instance vanished")
    if seen.state in ("shutting-down", "terminated"):
        raise TransientProviderError(f"the new instance is {seen.state}: "
                                     f"{seen.reason or 'no reason given'}")
    return seen.state == "running" and seen.private_ip is not None
