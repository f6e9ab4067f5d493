"""Validation of a pool's standby tier (``standby``, ``standby_state``, ``standby_ttl``,
``standby_resume_limit``, ``standby_cost`` of ``:pools:`` entries, each defaulting to the
``:config:`` key of the same name).

``standby: 0`` (the default) is vmpooler's behaviour: no standby tier. ``standby: auto``
lets the demand sizer choose the count, so it needs ``sizing: demand``; a static pool
reads it as 0, with a note. Errors name the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vmpooler.actors.config._check import Checker
from vmpooler.actors.config.model import STANDBY_STATES, GlobalSettings, StandbyTier

__all__ = ["standby_tier"]

Path = tuple[str | int, ...]


def standby_tier(entry: Mapping[str, Any], path: Path, chk: Checker,
                 settings: GlobalSettings, *, demand: bool) -> StandbyTier | None:
    """The pool's :class:`StandbyTier`, or None without one (``standby`` 0, or ``auto`` on
    a pool not sized by demand, or an invalid value: the problem is recorded)."""
    count = chk.get(entry, "standby", path, "count_or_auto", settings.standby)
    state = chk.get(entry, "standby_state", path, "str", settings.standby_state)
    where = (*path, "standby_state") if "standby_state" in entry else ("config", "standby_state")
    if state not in STANDBY_STATES:
        chk.fail(where, f"unknown standby_state {state!r}: expected one of "
                        f"{', '.join(STANDBY_STATES)}")
        return None
    ttl = chk.get(entry, "standby_ttl", path, "int", settings.standby_ttl, minimum=1)
    limit = chk.get(entry, "standby_resume_limit", path, "int",
                    settings.standby_resume_limit, minimum=1)
    cost = chk.get(entry, "standby_cost", path, "number", settings.standby_cost,
                   positive=True, maximum=1)
    if count == "auto" and not demand:
        if "standby" in entry:
            chk.note(f"{_dotted(path)}.standby: auto needs sizing: demand; "
                     "the pool keeps no standby VMs")
        return None
    if count == 0:
        return None
    return StandbyTier(count=None if count == "auto" else int(count), state=state,
                       ttl=float(ttl) * 60.0, resume_limit=int(limit), cost=float(cost))


def _dotted(path: Path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p)
                   for i, p in enumerate(path))
