"""What ``/status`` shows of alias failover: the ``failover`` entry of a failover pool.

Which backends of an alias can deliver now, for checkout and on-demand, is placement's
(:mod:`vmpooler.actors.placement.health`, read through
:class:`~vmpooler.actors.placement.health.BackendHealth`); which names and pools take part
is :func:`vmpooler.actors.placement.choose.failover_names` and ``failover_pools``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.failover_store import parse_state

__all__ = ["failover_section"]


def failover_section(pool: str, size: int, published: Mapping[str, str] | None,
                     ) -> dict[str, Any]:
    """One failover pool's ``failover`` entry of ``/status`` (ours): its ``state`` (``ok``,
    ``down``, ``recovering``, or ``unknown`` when no manager published it lately), why it
    is down (``reason``), since when (ISO 8601), its ``size`` and the ``effective`` size it
    keeps now, and ``covering``: sibling → VMs it holds for that sibling."""
    state = parse_state(pool, published or {})
    if state is None:
        return {"state": "unknown", "size": size, "effective": size, "covering": {}}
    return {
        "state": state.state,
        "reason": state.reason,
        "since": (timefmt.rfc3339(datetime.fromtimestamp(state.since, UTC))
                  if state.since else ""),
        "size": state.size,
        "effective": state.effective,
        "covering": dict(state.covering),
    }
