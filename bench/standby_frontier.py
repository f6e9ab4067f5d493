"""What the standby tier buys: static and demand sizing with and without standby VMs, on real
CI traces (a discrete-event replay, ``bench/tier_sim.py``).

For each trace, clone time and resume time, per pool (the trace's platform), summed:

- (a) static: the smallest fixed size reaching the target, no standby VMs;
- (b) static with standby: the fixed pair (running, standby) reaching the target at the
  least held cost ``running + k * standby`` (``tier_sim.cheapest_fixed``);
- (c) demand: ``DemandSizer`` with the single-tier forecast;
- (d) demand with standby: ``DemandSizer`` with ``TierForecast`` (``standby_cost`` k, told
  the resume time);
- (a') static at (d)'s hit: the fixed sizes reaching the hit ratio (d) reached.

Cost = running VM-hours + k * standby VM-hours (idle VMs). Measured on the whole trace (the
demand policies learning from nothing) and on the second half (learning from the first
checkout, counted from the middle; the static choices made knowing the second half; every
policy counted until the trace's end).

Usage: ``python bench/standby_frontier.py TRACE.csv [...] [--clone 30,120,300]
[--resume 10,30] [--extra 120:15] [--tick 60] [--json out.json]``; prints one Markdown table
per trace and period.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from sizing_sim import smallest_fixed
from tier_sim import TierRun, cheapest_fixed, run_demand, run_fixed

from vmpooler.actors.sizing.demand_sizer import DemandSizer, SizingPolicy
from vmpooler.actors.sizing.tier_forecast import TierForecast
from vmpooler.actors.sizing.trace import read_trace

Pools = dict[str, list[float]]
PERIODS = ("whole", "half")


def _load(path: str) -> tuple[Pools, float, float, float]:
    rows = read_trace(path, skip_negative=lambda _line: None)  # GitHub's -1: aborted
    pools: Pools = collections.defaultdict(list)
    for row in rows:
        pools[row.pool].append(row.t)
    first, last = rows[0].t, rows[-1].t
    return dict(pools), first, (first + last) / 2, last


def _total(runs: list[TierRun], k: float, pairs: object = None) -> dict[str, object]:
    hits, n = sum(r.hits for r in runs), sum(r.checkouts for r in runs)
    running = sum(r.running_vm_hours for r in runs)
    standby = sum(r.standby_vm_hours for r in runs)
    out: dict[str, object] = {"hits": hits, "checkouts": n, "hit": hits / n if n else 1.0,
                              "running": running, "standby": standby,
                              "cost": running + k * standby,
                              "resumes": sum(r.resumes for r in runs)}
    if pairs is not None:
        out["pairs"] = pairs
    return out


def _lead(run: TierRun, running: int, standby: int, lead: float) -> TierRun:
    """``run`` with the fixed pool also held for ``lead`` seconds before its first checkout."""
    return TierRun(run.checkouts, run.hits, run.running_vm_hours + running * lead / 3600.0,
                   run.standby_vm_hours + standby * lead / 3600.0, run.clones, run.resumes,
                   run.mean_miss_wait)


def _periods(pools: Pools, middle: float, last: float
             ) -> dict[str, tuple[Pools, float | None, float | None]]:
    """Per period: the checkouts counted per pool, where counting starts and where it ends
    (None: the pool's own first and last checkouts)."""
    seconds = {p: [t for t in ts if t >= middle] for p, ts in pools.items()}
    return {"whole": (pools, None, None),
            "half": ({p: ts for p, ts in seconds.items() if ts}, middle, last)}


def _static(chosen: Pools, clone: float, target: float, start: float | None,
            end: float | None, k: float) -> dict[str, object]:
    runs = []
    for times in chosen.values():
        size, _ = smallest_fixed(times, clone, target, end)
        one = run_fixed(times, size, 0, clone, 0.0, end)
        runs.append(_lead(one, size, 0, times[0] - start if start is not None else 0.0))
    return _total(runs, k)


def _demand(pools: Pools, chosen: Pools, clone: float, resume: float | None, target: float,
            tick: float, start: float | None, end: float | None,
            k: float) -> dict[str, object]:
    """The demand policy over the ``chosen`` pools, each replayed whole from ``pools`` and
    counted from ``start``; with a ``resume`` time, the two-tier forecast."""
    runs = []
    for pool in chosen:
        policy = SizingPolicy(0, 100_000, target)
        if resume is None:
            sizer = DemandSizer(policy, clone_time=clone)
            ask = _single(sizer, clone)
        else:
            sizer = DemandSizer(policy, forecast=TierForecast(
                target, clone_time=clone, resume_time=resume, standby_cost=k))
            ask = _pair(sizer, clone, resume)
        runs.append(run_demand(pools[pool], clone, resume or 0.0, ask, sizer.observe,
                               tick=tick, end=end, measure_from=start))
    return _total(runs, k)


def _single(sizer: DemandSizer, clone: float) -> Callable[[float], tuple[int, int]]:
    return lambda now: (sizer.target(now, clone).size, 0)


def _pair(sizer: DemandSizer, clone: float, resume: float
          ) -> Callable[[float], tuple[int, int]]:
    def ask(now: float) -> tuple[int, int]:
        t = sizer.target(now, clone, resume)
        return t.size, t.standby
    return ask


def evaluate(path: str, clone: float, resume: float | None, tick: float, target: float,
             k: float) -> dict[str, object]:
    """Without ``resume``: (a) and (c); with it: (b), (d) and (a'), for both periods."""
    pools, _first, middle, last = _load(path)
    started = time.perf_counter()
    out: dict[str, object] = {"trace": Path(path).name, "clone": clone, "resume": resume,
                              "checkouts": sum(map(len, pools.values())), "pools": len(pools)}
    for period, (chosen, start, end) in _periods(pools, middle, last).items():
        found: dict[str, object] = {}
        if resume is None:
            found["a"] = _static(chosen, clone, target, start, end, k)
            found["c"] = _demand(pools, chosen, clone, None, target, tick, start, end, k)
        else:
            runs, pairs = [], {}
            for pool, times in chosen.items():
                largest, _ = smallest_fixed(times, clone, target, end)
                a, s, run = cheapest_fixed(times, clone, resume, target, k, largest, end)
                pairs[pool] = (a, s)
                runs.append(_lead(run, a, s, times[0] - start if start is not None else 0.0))
            found["b"] = _total(runs, k, pairs)
            found["d"] = d = _demand(pools, chosen, clone, resume, target, tick, start, end, k)
            found["a'"] = _static(chosen, clone, min(float(d["hit"]), 0.9999),  # type: ignore[arg-type]
                                  start, end, k)
        out[period] = found
    out["seconds"] = time.perf_counter() - started
    return out


def merge(results: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    """Per trace: the checkouts, pools, seconds and, per period and clone time, the
    single-tier rows and the two-tier rows per resume time."""
    traces: dict[str, dict[str, object]] = {}
    for r in results:
        t = traces.setdefault(str(r["trace"]), {"checkouts": r["checkouts"],
                                                "pools": r["pools"], "seconds": 0.0,
                                                "rows": {}})
        t["seconds"] = float(t["seconds"]) + float(r["seconds"])  # type: ignore[arg-type]
        rows: dict[tuple[float, float | None], object] = t["rows"]  # type: ignore[assignment]
        rows[(float(r["clone"]), r["resume"])] = r  # type: ignore[arg-type,index]
    return traces


def table(name: str, trace: dict[str, object], period: str, k: float) -> str:
    title = ("whole trace, demand learning from nothing" if period == "whole" else
             "second half, demand learning from the first checkout, static knowing the half")
    rows: dict[tuple[float, float | None], dict[str, dict[str, dict[str, float]]]]
    rows = trace["rows"]  # type: ignore[assignment]
    counted = next(iter(rows.values()))[period]
    n = next(iter(counted.values()))["checkouts"]
    out = [f"**{name}**, {title} ({n:.0f} checkouts counted, {trace['pools']} pools)",
           "", "| clone | resume | policy | hit | running VM-h | standby VM-h "
           f"| cost (k = {k:g}) | cost / (a) |", "|---|---|---|---|---|---|---|---|"]
    labels = {"a": "(a) static", "c": "(c) demand", "b": "(b) static + standby",
              "d": "(d) demand + standby", "a'": "(a') static at (d)'s hit"}
    for clone in sorted({c for c, _ in rows}):
        single = rows[(clone, None)][period]
        base = single["a"]["cost"]
        lines = [("–", key, single[key]) for key in ("a", "c")]
        for resume in sorted(r for c, r in rows if c == clone and r is not None):
            found = rows[(clone, resume)][period]
            lines += [(f"{resume:.0f} s", key, found[key]) for key in ("b", "d", "a'")]
        for resume_cell, key, f in lines:
            out.append(f"| {clone:.0f} s | {resume_cell} | {labels[key]} | {f['hit']:.4f} "
                       f"| {f['running']:,.0f} | {f['standby']:,.0f} | {f['cost']:,.0f} "
                       f"| {f['cost'] / base:.2f} |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--clone", default="30,120,300")
    parser.add_argument("--resume", default="10,30")
    parser.add_argument("--extra", default="120:15", help="more clone:resume pairs")
    parser.add_argument("--tick", type=float, default=60.0)
    parser.add_argument("--target", type=float, default=0.99)
    parser.add_argument("--standby-cost", type=float, default=0.1)
    parser.add_argument("--json")
    args = parser.parse_args()
    clones = [float(c) for c in args.clone.split(",")]
    pairs = [(c, float(r)) for c in clones for r in args.resume.split(",")]
    pairs += [(float(c), float(r)) for c, r in
              (p.split(":") for p in args.extra.split(",") if p)]
    singles = sorted({c for c, _ in pairs})
    jobs: list[tuple[str, float, float | None]] = [
        (path, c, None) for path in args.traces for c in singles]
    jobs += [(path, c, r) for path in args.traces for c, r in pairs]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(evaluate, path, c, r, args.tick, args.target,
                               args.standby_cost) for path, c, r in jobs]
        results = [f.result() for f in futures]
    wall = time.perf_counter() - started
    for name, trace in merge(results).items():
        for period in PERIODS:
            print(table(name, trace, period, args.standby_cost), end="\n\n")
        print(f"{name}: {trace['seconds']:.0f} s of replay", end="\n\n")
    print(f"wall time {wall:.0f} s on 2 processes")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "wall_seconds": wall,
                                               "tick": args.tick, "target": args.target,
                                               "standby_cost": args.standby_cost}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
