"""Is a VM ready for its user? The three ``vm_ready_check`` probes.

* ``ssh`` (vmpooler's): a TCP connection to port 22 of ``<vm>.<domain>`` (the bare VM name
  without a domain) opens within ``vm_ready_timeout`` seconds. Needs DNS and SSH.
* ``ssh_ip``: the same connection to the IP address vCenter reports for the guest, for
  labs without DNS.
* ``guest_tools``: VMware Tools runs in the guest and reports a usable IP address, for
  guests without SSH.

A probe that fails raises :class:`NotReadyError` saying why; the core stores that text as
the VM's ``open_socket_error``. IP addresses follow the gem: only what VMware Tools reports
while it is ``toolsOk`` or ``toolsOld``, never 0.0.x.x or link-local 169.254.x.x.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from vmpooler.providers.probes import NotReadyError, probe_tcp

__all__ = [
    "GUEST_PROPERTIES",
    "NotReadyError",
    "guest_ip",
    "probe_guest_tools",
    "probe_tcp",
]

GUEST_PROPERTIES = ("guest.ipAddress", "guest.toolsStatus", "guest.toolsRunningStatus")
"""What :func:`guest_ip` and :func:`probe_guest_tools` read of a VM (one retrieval)."""

_UNUSABLE_IP = re.compile(r"^(0|169)\.(0|254)\.\d+\.\d+$")

def guest_ip(guest: Mapping[str, Any]) -> str | None:
    """The guest's usable IP address from :data:`GUEST_PROPERTIES`, or None."""
    ip = guest.get("guest.ipAddress")
    if not ip or guest.get("guest.toolsStatus") not in ("toolsOk", "toolsOld"):
        return None
    return None if _UNUSABLE_IP.match(str(ip)) else str(ip)


def probe_guest_tools(guest: Mapping[str, Any]) -> bool:
    """True when VMware Tools runs and reports a usable IP; NotReadyError otherwise."""
    running = guest.get("guest.toolsRunningStatus")
    if running != "guestToolsRunning":
        raise NotReadyError(f"VMware Tools not running in the guest ({running or 'unknown'})")
    if guest_ip(guest) is None:
        raise NotReadyError("VMware Tools reports no usable IP address yet")
    return True
