"""Starting and stopping an instance, waiting through the shared instance watch: standby VMs
(``suspend_vm``/``resume_vm``: a stopped or hibernated instance) and the stop and start
around a snapshot's revert."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vmpooler.providers.aws.watch import InstanceWatch, Seen
from vmpooler.providers.errors import VmNotFoundError

if TYPE_CHECKING:
    from vmpooler.providers.aws.client import Ec2

__all__ = ["Power"]

_GONE = frozenset({"shutting-down", "terminated"})


class Power:
    """Powers instances on and off through ``ec2``; waits at most ``timeout`` seconds for
    each state. Thread-safe (keeps no state)."""

    def __init__(self, ec2: Ec2, watch: InstanceWatch, timeout: float) -> None:
        self.ec2 = ec2
        self.watch = watch
        self.timeout = timeout

    def set(self, instance_id: str, on: bool, *, hibernate: bool = False) -> None:
        """Start (``on``) or stop (hibernate, with ``hibernate``) the instance and block
        until it is running or stopped; an instance still stopping or pending is waited
        for first. VmNotFoundError when it is terminated meanwhile."""
        want = "running" if on else "stopped"
        self.watch.wait(instance_id, lambda s: s is None or s.state not in (
            "stopping", "pending"), self.timeout, f"{instance_id} settling")
        operation = "start_instances" if on else "stop_instances"
        params: dict[str, Any] = {"InstanceIds": [instance_id]}
        if hibernate and not on:
            params["Hibernate"] = True
        self.ec2.call(operation, instance_id, **params)

        def arrived(seen: Seen | None) -> bool:
            if seen is None or seen.state in _GONE:
                raise VmNotFoundError(f"{instance_id} was terminated")
            return seen.state == want

        self.watch.wait(instance_id, arrived, self.timeout, f"{operation} of {instance_id}")
