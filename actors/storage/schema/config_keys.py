"""Key names of the published pool configuration and of the overrides and markers others
write to change a pool.

Part of :mod:`vmpooler.actors.storage.schema`: import the names from there."""

from __future__ import annotations

from vmpooler.actors.storage.schema.prefix import PREFIX as _P

__all__ = [
    "config_clone_target",
    "config_poolsize",
    "config_template",
    "pool_hash",
    "poolreset",
    "pools",
    "template_deltas",
    "template_prepared",
    "undo_size_override",
    "undo_template_override",
]



def pools() -> str:
    """Set of configured pool names (published by the manager at start)."""
    return f"{_P}pools"


def pool_hash(pool: str) -> str:
    """Hash of a pool's configuration as published by the manager."""
    return f"{_P}pool__{pool}"


def config_poolsize() -> str:
    """Hash pool -> size override."""
    return f"{_P}config__poolsize"


def config_template() -> str:
    """Hash pool -> template override."""
    return f"{_P}config__template"


def config_clone_target() -> str:
    """Hash pool -> clone target override."""
    return f"{_P}config__clone_target"


def undo_size_override() -> str:
    """Set of pools whose size override was removed."""
    return f"{_P}pool__undo_size_override"


def undo_template_override() -> str:
    """Set of pools whose template override was removed."""
    return f"{_P}pool__undo_template_override"


def poolreset() -> str:
    """Set of pools asked to drain and refill."""
    return f"{_P}poolreset"


def template_prepared() -> str:
    """Hash pool -> template last prepared."""
    return f"{_P}template__prepared"


def template_deltas() -> str:
    """Set of templates that have delta disks."""
    return f"{_P}template__deltas"
