"""The ``vsphere`` provider: vmpooler's pools on VMware vCenter, through pyvmomi.

Modules: :mod:`.settings` (keys, defaults, checks; no pyvmomi), :mod:`.connection` (the
session pool), :mod:`.collector` (property retrievals), :mod:`.inventory` (lookups and their
memory), :mod:`.clone` (specifications), :mod:`.placement` (host choice for migrations),
:mod:`.readiness` (probes), :mod:`.purge`, :mod:`.faults` and :mod:`.provider` (the
contract). Importing this package does not import pyvmomi; ``VsphereProvider`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vmpooler.providers.vsphere.provider import VsphereProvider

__all__ = ["VsphereProvider"]


def __getattr__(name: str) -> Any:
    if name == "VsphereProvider":
        from vmpooler.providers.vsphere.provider import VsphereProvider

        return VsphereProvider
    raise AttributeError(name)
