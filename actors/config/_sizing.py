"""Validation of demand sizing (``sizing``, ``size_min``, ``size_max``, ``target_warm_hit``,
``schedule`` of ``:pools:`` entries, with ``:config:`` defaults for the first three but
``size_max``).

A pool with ``sizing: demand`` keeps between ``size_min`` (default ``:config: size_min``, 0)
and ``size_max`` (default: its ``size``, so turning demand sizing on never adds VMs) ready
VMs. Errors name the key; keys that are valid but do nothing on a static pool (``size_min``,
``target_warm_hit``, ``schedule``) are noted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vmpooler.actors.config._check import Checker
from vmpooler.actors.config.model import DemandSizing, GlobalSettings
from vmpooler.actors.sizing.schedule import ScheduleError, parse_schedule

__all__ = ["POLICIES", "demand_sizing"]

POLICIES = ("static", "demand")

Path = tuple[str | int, ...]


def demand_sizing(entry: Mapping[str, Any], path: Path, chk: Checker,
                  settings: GlobalSettings, *, size: int,
                  limit: int) -> DemandSizing | None:
    """The pool's :class:`DemandSizing`, or None when it is sized statically (or invalid:
    the problem is recorded). ``size`` is the pool's ``size``; ``limit`` its largest allowed
    size (``max_pool_size``)."""
    policy = chk.get(entry, "sizing", path, "str", settings.sizing)
    if policy not in POLICIES:
        where = (*path, "sizing") if "sizing" in entry else ("config", "sizing")
        chk.fail(where, f"unknown sizing {policy!r}: expected one of {', '.join(POLICIES)}")
        return None
    if policy == "static":
        for key in ("size_min", "target_warm_hit", "schedule"):
            if entry.get(key) is not None:
                chk.note(f"{_dotted(path)}.{key} does nothing without sizing: demand")
        return None
    size_min = chk.get(entry, "size_min", path, "int", settings.size_min, minimum=0)
    size_max = entry.get("size_max")
    ceiling = size if size_max is None or not isinstance(size_max, int) else size_max
    hit = chk.get(entry, "target_warm_hit", path, "share", settings.target_warm_hit)
    problems = False
    if not 0 < hit < 1:
        where = (*path, "target_warm_hit") if "target_warm_hit" in entry else (
            "config", "target_warm_hit")
        chk.fail(where, f"target_warm_hit must be above 0 and below 1 (99% or 0.99), got {hit}")
        problems = True
    if size_min > ceiling:
        chk.fail((*path, "size_min"),
                 f"size_min {size_min} is above the pool's ceiling {ceiling} "
                 f"({'size_max' if size_max is not None else 'its size, as size_max is unset'})")
        problems = True
    if ceiling > limit:
        problems = True  # recorded by the size checks
    raw = entry.get("schedule") or []
    if isinstance(raw, (list, tuple)):  # the entry is frozen: tuples and read-only mappings
        raw = [dict(item) if isinstance(item, Mapping) else item for item in raw]
    try:
        schedule = parse_schedule(raw)
    except ScheduleError as exc:
        chk.fail((*path, "schedule"), str(exc))
        return None
    if problems:
        return None
    return DemandSizing(size_min=size_min, size_max=ceiling, target_warm_hit=float(hit),
                        schedule=schedule)


def _dotted(path: Path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p)
                   for i, p in enumerate(path))
