"""Is an instance ready for its user? The ``vm_ready_check`` probes of the EC2 provider.

* ``ssh`` (vmpooler's): a TCP connection to port ``vm_ready_port`` of ``<vm>.<domain>``
  opens within ``vm_ready_timeout`` seconds; without a domain, of the instance's private DNS
  name (as the gem does).
* ``ssh_ip``: the same connection to the instance's private address.
* ``instance_status``: EC2's own status checks (``DescribeInstanceStatus``) both ``ok``,
  for hosts without SSH; nothing connects to the instance.

A probe that fails raises :class:`NotReadyError` saying why; the core stores that text as
the VM's ``open_socket_error``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vmpooler.providers.probes import Connector, NotReadyError, probe_tcp

__all__ = ["Connector", "NotReadyError", "probe_status", "probe_tcp"]

def probe_status(status: Mapping[str, Any] | None) -> bool:
    """True when an entry of ``DescribeInstanceStatus`` shows the instance running with
    both its instance and system status ``ok``; NotReadyError naming what is not."""
    if status is None:
        raise NotReadyError("EC2 reports no status for the instance yet")
    state = (status.get("InstanceState") or {}).get("Name")
    if state != "running":
        raise NotReadyError(f"instance is {state or 'in an unknown state'}")
    instance = (status.get("InstanceStatus") or {}).get("Status")
    system = (status.get("SystemStatus") or {}).get("Status")
    if instance != "ok" or system != "ok":
        raise NotReadyError(f"EC2 status checks: instance {instance}, system {system}")
    return True
