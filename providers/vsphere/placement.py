"""Where a checked-out VM should run: the gem's host selection, as pure functions.

vmpooler's provider measures each host of the VM's cluster and keeps the *eligible* ones:
not in maintenance mode, status green, no configuration issue, CPU and memory usage known,
non-zero and at most ``utilization_limit`` percent, and the same CPU model as the VM's
host (the fifth word of the first CPU package's description, ``v4`` in ``Intel(R) Xeon(R)
CPU E5-2680 v4 @ 2.40GHz``, so vMotion stays compatible). The VM stays where it is when
its host is among the eligible hosts whose CPU use is at or below their average; otherwise
it moves to the least used eligible host.
The gem rotates through that set; we take the least used one, which is the same choice
when the figures are fresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["HOST_PROPERTIES", "HostLoad", "choose_target", "host_load", "least_used_hosts"]

_EPSILON = 1e-9  # equal loads must compare equal to their average despite rounding

HOST_PROPERTIES = (
    "name", "runtime.inMaintenanceMode", "overallStatus", "configIssue",
    "summary.quickStats.overallCpuUsage", "summary.quickStats.overallMemoryUsage",
    "summary.hardware.cpuMhz", "summary.hardware.numCpuCores", "summary.hardware.memorySize",
    "hardware.cpuPkg",
)
"""What :func:`host_load` reads of each host, in one property retrieval for a cluster."""


@dataclass(frozen=True, slots=True)
class HostLoad:
    """One host as placement sees it. Utilisations are percentages; None = unknown."""

    name: str
    cpu: float | None
    memory: float | None
    model: str | None
    maintenance: bool = False
    healthy: bool = True

    def eligible(self, limit: float, model: str | None) -> bool:
        """Whether a VM of CPU ``model`` may be placed here (see the module docstring)."""
        if self.maintenance or not self.healthy:
            return False
        if model is not None and self.model != model:
            return False
        if not self.cpu or not self.memory:  # unknown or zero: the gem skips such hosts
            return False
        return self.cpu <= limit and self.memory <= limit


def _model(cpu_packages: Sequence[Any] | None) -> str | None:
    if not cpu_packages:
        return None
    words = str(getattr(cpu_packages[0], "description", "") or "").split()
    return words[4] if len(words) > 4 else None


def host_load(props: Mapping[str, Any]) -> HostLoad:
    """A :class:`HostLoad` from the properties :data:`HOST_PROPERTIES` of one host."""
    cpu_used = props.get("summary.quickStats.overallCpuUsage")
    mhz = props.get("summary.hardware.cpuMhz") or 0
    cores = props.get("summary.hardware.numCpuCores") or 0
    memory_used = props.get("summary.quickStats.overallMemoryUsage")
    memory_mb = (props.get("summary.hardware.memorySize") or 0) / 1024 / 1024
    return HostLoad(
        name=str(props.get("name")),
        cpu=None if cpu_used is None or not mhz * cores else 100.0 * cpu_used / (mhz * cores),
        memory=None if memory_used is None or not memory_mb else 100.0 * memory_used / memory_mb,
        model=_model(props.get("hardware.cpuPkg")),
        maintenance=bool(props.get("runtime.inMaintenanceMode")),
        healthy=props.get("overallStatus") == "green" and not props.get("configIssue"),
    )


def choose_target(hosts: Iterable[HostLoad], current: str, limit: float) -> str | None:
    """The host a VM on ``current`` should move to, or None to leave it there.

    Also None when no host is eligible (nothing better to go to).
    """
    hosts = list(hosts)
    source = next((h for h in hosts if h.name == current), None)
    model = source.model if source is not None else None
    eligible = [h for h in hosts if h.eligible(limit, model)]
    if not eligible:
        return None
    average = sum(h.cpu or 0.0 for h in eligible) / len(eligible)
    least_used = [h for h in eligible if (h.cpu or 0.0) <= average + _EPSILON]
    if any(h.name == current for h in least_used):
        return None
    return min(least_used, key=lambda h: (h.cpu or 0.0, h.name)).name


def least_used_hosts(hosts: Iterable[HostLoad], limit: float) -> list[str]:
    """Eligible hosts (any CPU model) whose CPU use is at or below their average, least used
    first: where ``manage_host_selection`` places new clones, in turn (as the gem does)."""
    eligible = [h for h in hosts if h.eligible(limit, None)]
    if not eligible:
        return []
    average = sum(h.cpu or 0.0 for h in eligible) / len(eligible)
    chosen = [h for h in eligible if (h.cpu or 0.0) <= average + _EPSILON]
    return [h.name for h in sorted(chosen, key=lambda h: (h.cpu or 0.0, h.name))]
