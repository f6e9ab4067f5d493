"""Demand sizing against the best fixed size, on real CI traces (a discrete-event replay).

For each trace, clone time and target warm-hit ratio, per pool (the trace's platform):

- static: the smallest fixed size whose replay reaches the target, summed idle VM-hours;
- demand, online: ``DemandSizer`` learning from nothing over the whole trace;
- demand, second half: learning online from the first checkout (as a pool does once turned
  on), measured on the second half only, against the static frontier of the second half (the
  fixed sizes chosen knowing it);
- static at the demand's hit ratio: the fixed sizes reaching the hit ratio the demand policy
  actually reached (so the two are compared at the same warm-hit ratio).

Usage: ``python bench/sizing_frontier.py TRACE.csv [...] [--clone 30,120,300] [--tick 60]
[--json out.json]``; prints one Markdown table per trace and clone time, and the cost of
one ``DemandSizer.target`` call.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from sizing_sim import PoolRun, run_demand, smallest_fixed

from vmpooler.actors.sizing.demand_sizer import DemandSizer, SizingPolicy
from vmpooler.actors.sizing.forecast import DemandForecast
from vmpooler.actors.sizing.trace import read_trace

TARGETS = (0.90, 0.95, 0.98, 0.99)


def _demand(times: list[float], clone: float, target: float, tick: float,
            measure_from: float | None = None) -> PoolRun:
    """The demand policy learning online from the first checkout (what a pool does once
    turned on); counted from ``measure_from`` (default: all)."""
    sizer = DemandSizer(SizingPolicy(0, 100_000, target), clone_time=clone)
    return run_demand(times, clone, lambda now: sizer.target(now, clone).size, sizer.observe,
                      tick=tick, measure_from=measure_from)


def _demand_total(chosen: dict[str, list[float]], pools: dict[str, list[float]],
                  clone: float, target: float, tick: float,
                  measure_from: float | None) -> tuple[int, float]:
    """Warm hits and idle VM-hours of the demand policy over the ``chosen`` pools, each
    replayed whole from ``pools`` and counted from ``measure_from``."""
    runs = [_demand(pools[pool], clone, target, tick, measure_from=measure_from)
            for pool in chosen]
    return sum(r.hits for r in runs), sum(r.idle_vm_hours for r in runs)


def _static(pools: dict[str, list[float]], clone: float, target: float,
            start: float | None, end: float | None) -> tuple[int, int, float]:
    hits = checkouts = 0
    idle = 0.0
    for times in pools.values():
        size, run = smallest_fixed(times, clone, target, end)
        hits += run.hits
        checkouts += run.checkouts
        # The fixed pool is full from ``start`` (the demand replay's start) to its first checkout.
        lead = (times[0] - start) if start is not None else 0.0
        idle += run.idle_vm_hours + size * lead / 3600.0
    return hits, checkouts, idle


def evaluate(path: str, clone: float, tick: float) -> dict[str, object]:
    rows = read_trace(path, skip_negative=lambda _line: None)  # GitHub's -1: aborted
    pools: dict[str, list[float]] = collections.defaultdict(list)
    for row in rows:
        pools[row.pool].append(row.t)
    first, last = rows[0].t, rows[-1].t
    middle = (first + last) / 2
    seconds = {p: [t for t in ts if t >= middle] for p, ts in pools.items()}
    seconds = {p: ts for p, ts in seconds.items() if ts}
    lines = []
    started = time.perf_counter()
    for target in TARGETS:
        line: dict[str, float] = {"target": target}
        s_hits, n, s_idle = _static(pools, clone, target, None, None)
        d_hits, d_idle = _demand_total(pools, pools, clone, target, tick, None)
        reached = d_hits / n
        _, _, same = _static(pools, clone, min(reached, 0.9999), None, None)
        line.update(static_hit=s_hits / n, static_idle=s_idle, online_hit=reached,
                    online_idle=d_idle, static_idle_at_online_hit=same)
        s_hits, n, s_idle = _static(seconds, clone, target, middle, last)
        d_hits, d_idle = _demand_total(seconds, pools, clone, target, tick, middle)
        reached = d_hits / n
        _, _, same = _static(seconds, clone, min(reached, 0.9999), middle, last)
        line.update(half_static_hit=s_hits / n, half_static_idle=s_idle, half_hit=reached,
                    half_idle=d_idle, half_static_idle_at_hit=same)
        lines.append(line)
    return {"trace": Path(path).name, "clone_time": clone, "tick": tick,
            "checkouts": len(rows), "pools": len(pools), "lines": lines,
            "seconds": time.perf_counter() - started}


def table(result: dict[str, object]) -> str:
    out = [f"**{result['trace']}**, clone time {result['clone_time']:.0f} s "
           f"({result['checkouts']} checkouts, {result['pools']} pools; "
           f"replayed in {result['seconds']:.0f} s)", "",
           "| target | static hit | static VM-h | online hit | online VM-h "
           "| static VM-h at that hit "
           "| 2nd half: static hit | static VM-h | demand hit | demand VM-h "
           "| static VM-h at that hit |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for line in result["lines"]:  # type: ignore[attr-defined]
        out.append(
            f"| {line['target']:.2f} | {line['static_hit']:.4f} | {line['static_idle']:,.0f} "
            f"| {line['online_hit']:.4f} | {line['online_idle']:,.0f} "
            f"| {line['static_idle_at_online_hit']:,.0f} "
            f"| {line['half_static_hit']:.4f} | {line['half_static_idle']:,.0f} "
            f"| {line['half_hit']:.4f} | {line['half_idle']:,.0f} "
            f"| {line['half_static_idle_at_hit']:,.0f} |")
    return "\n".join(out)


def call_cost(path: str, calls: int = 200_000) -> float:
    """Nanoseconds per ``DemandSizer.target`` call with a pool's two weeks of history, the
    clock advancing 5 s a call (so plan rebuilds at slot changes are included)."""
    rows = read_trace(path, skip_negative=lambda _line: None)  # GitHub's -1: aborted
    pools: dict[str, list[float]] = collections.defaultdict(list)
    for row in rows:
        pools[row.pool].append(row.t)
    times = max(pools.values(), key=len)
    now = times[-1]
    forecast = DemandForecast.from_history(times, now=now, target_hit=0.99, clone_time=120)
    sizer = DemandSizer(SizingPolicy(0, 1000, 0.99), forecast=forecast)
    started = time.perf_counter_ns()
    for k in range(calls):
        sizer.target(now + 5.0 * k, 120.0)
    return (time.perf_counter_ns() - started) / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--clone", default="30,120,300")
    parser.add_argument("--tick", type=float, default=60.0)
    parser.add_argument("--json")
    args = parser.parse_args()
    clones = [float(c) for c in args.clone.split(",")]
    jobs = [(path, clone) for path in args.traces for clone in clones]
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(evaluate, *zip(*jobs, strict=True),
                                [args.tick] * len(jobs)))
    for result in results:
        print(table(result), end="\n\n")
    cost = call_cost(args.traces[0])
    print(f"DemandSizer.target: {cost / 1000:.2f} µs per call")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "ns_per_call": cost},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
