"""Which instances ``purge_unconfigured_resources`` terminates, decided as the gem decides.

vmpooler-provider-ec2 documents the rule (shared with its GCE sibling): an instance is
purged when it has no ``pool`` tag, or a ``pool`` tag naming a pool that is not configured,
unless the allowlist spares it: an entry equal to its ``pool`` tag's value, the empty string
``""`` for instances without a ``pool`` tag, or ``name=value`` for an instance carrying the
tag ``name`` with that value. Instances already shutting down or terminated are left alone.
Pure: the caller lists the instances and terminates the ones returned.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

__all__ = ["doomed_instances", "tags_of"]

_DYING = frozenset({"shutting-down", "terminated"})


def tags_of(instance: Mapping[str, Any]) -> dict[str, str]:
    """An instance's tags as a dict (``Tags`` of a ``DescribeInstances`` answer)."""
    return {str(t.get("Key")): str(t.get("Value", "")) for t in instance.get("Tags") or ()}


def _spared(tags: Mapping[str, str], allowlist: Collection[str]) -> bool:
    pool = tags.get("pool")
    if pool is None and "" in allowlist:
        return True
    if pool is not None and pool in allowlist:
        return True
    return any(f"{key}={value}" in allowlist for key, value in tags.items())


def doomed_instances(
    instances: Iterable[Mapping[str, Any]],
    configured_pools: Collection[str],
    allowlist: Collection[str],
) -> list[tuple[str, str | None]]:
    """``(instance id, pool tag or None)`` of each instance to terminate."""
    doomed = []
    for instance in instances:
        if (instance.get("State") or {}).get("Name") in _DYING:
            continue
        tags = tags_of(instance)
        pool = tags.get("pool")
        if pool is not None and pool in configured_pools:
            continue
        if _spared(tags, allowlist):
            continue
        doomed.append((str(instance["InstanceId"]), pool))
    return doomed
