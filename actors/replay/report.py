"""What a replay measures, per pool and in total, and how it is printed.

A row (:class:`PoolStats`) counts checkouts, warm hits (a ready VM was there), the waits of
missed checkouts (simulated seconds until they got a VM), idle VM-seconds (the integral of
the pool's ready count over the measured window), clones started, standby VM-seconds (the
integral of the pool's standby count) and the VMs resumed from standby into ``ready``; its
cost weighs a standby VM-hour at the run's ``standby_cost`` of an idle running one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vmpooler.actors.replay.series import SeriesRecorder

__all__ = ["STANDBY_COST", "PoolStats", "RunResult", "as_json", "as_table", "percentile"]

STANDBY_COST = 0.1
"""The default price of a standby VM-hour against an idle running one (``--standby-cost``)."""


def percentile(values: Sequence[float], share: float) -> float:
    """The ``share`` (0..1) percentile of ``values`` by the nearest-rank rule (0 if empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


@dataclass(slots=True)
class PoolStats:
    """One pool's (or the total's) numbers; mutable while the replay runs."""

    checkouts: int = 0
    hits: int = 0
    waits: list[float] = field(default_factory=list)
    idle_vm_seconds: float = 0.0
    clones: int = 0
    standby_vm_seconds: float = 0.0
    resumes: int = 0

    def add(self, other: PoolStats) -> None:
        """Fold ``other`` into this one (for the total)."""
        self.checkouts += other.checkouts
        self.hits += other.hits
        self.waits.extend(other.waits)
        self.idle_vm_seconds += other.idle_vm_seconds
        self.clones += other.clones
        self.standby_vm_seconds += other.standby_vm_seconds
        self.resumes += other.resumes

    def document(self, standby_cost: float = STANDBY_COST) -> dict[str, Any]:
        """The JSON fields: checkouts, hits, hit_ratio, wait_mean_s, wait_p95_s,
        idle_vm_hours, clones, standby_vm_hours, resumes, cost_vm_hours (ratio 0 without
        checkouts; waits 0 without misses; cost: idle VM-hours plus ``standby_cost`` times
        standby VM-hours, each rounded from the unrounded seconds)."""
        waits = self.waits
        cost = self.idle_vm_seconds + standby_cost * self.standby_vm_seconds
        return {
            "checkouts": self.checkouts,
            "hits": self.hits,
            "hit_ratio": round(self.hits / self.checkouts, 4) if self.checkouts else 0.0,
            "wait_mean_s": round(sum(waits) / len(waits), 1) if waits else 0.0,
            "wait_p95_s": round(percentile(waits, 0.95), 1),
            "idle_vm_hours": round(self.idle_vm_seconds / 3600, 2),
            "clones": self.clones,
            "standby_vm_hours": round(self.standby_vm_seconds / 3600, 2),
            "resumes": self.resumes,
            "cost_vm_hours": round(cost / 3600, 2),
        }


@dataclass(slots=True)
class RunResult:
    """One policy's replay: per pool, the simulated span, the wall time it took."""

    policy: str
    pools: dict[str, PoolStats]
    simulated_s: float
    wall_s: float
    unserved: int = 0
    warmup_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    standby_cost: float = STANDBY_COST
    """The price of a standby VM-hour against an idle running one, in ``cost_vm_hours``."""
    series: SeriesRecorder | None = None
    """The run's time series per pool (:mod:`.series`), for the page; None if not recorded."""

    def seconds_per_day(self) -> float:
        """Wall seconds per simulated day, the warm-up included (0 when nothing ran)."""
        simulated = self.simulated_s + self.warmup_s
        return self.wall_s / simulated * 86400 if simulated > 0 else 0.0

    def total(self) -> PoolStats:
        """The pools' rows added up."""
        total = PoolStats()
        for stats in self.pools.values():
            total.add(stats)
        return total

    def document(self) -> dict[str, Any]:
        """``{pool: fields, …, "total": fields}`` (see :meth:`PoolStats.document`)."""
        doc = {name: stats.document(self.standby_cost) for name, stats in self.pools.items()}
        doc["total"] = self.total().document(self.standby_cost)
        return doc


def as_json(results: Sequence[RunResult]) -> str:
    """One JSON document keyed by policy, then by pool and ``total``."""
    return json.dumps({r.policy: r.document() for r in results}, indent=2)


_HEADERS = ("pool", "checkouts", "hits", "hit ratio", "wait mean s", "wait p95 s",
            "idle VM-h", "clones", "standby VM-h", "resumes", "cost VM-h")


def _cells(name: str, doc: Mapping[str, Any]) -> list[str]:
    return [name, str(doc["checkouts"]), str(doc["hits"]), f"{doc['hit_ratio']:.3f}",
            f"{doc['wait_mean_s']:.1f}", f"{doc['wait_p95_s']:.1f}",
            f"{doc['idle_vm_hours']:.2f}", str(doc["clones"]),
            f"{doc['standby_vm_hours']:.2f}", str(doc["resumes"]),
            f"{doc['cost_vm_hours']:.2f}"]


def as_table(result: RunResult) -> str:
    """An aligned text table of one policy's rows, the total last, and a timing line."""
    rows = [list(_HEADERS)] + [_cells(n, d) for n, d in result.document().items()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADERS))]
    lines = [f"policy: {result.policy}"]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(row, widths, strict=True))))
    lines.append(f"simulated {result.simulated_s / 3600:.1f} h (and {result.warmup_s / 60:.0f}"
                 f" min of warm-up) in {result.wall_s:.1f} s ({result.seconds_per_day():.1f} s"
                 " per simulated day)")
    lines.append(f"cost VM-h: idle VM-h + {result.standby_cost:g} x standby VM-h")
    if result.unserved:
        lines.append(f"{result.unserved} missed checkout(s) still had no VM when the replay "
                     "stopped (their wait is counted up to then)")
    lines.extend(result.notes)
    return "\n".join(lines)
