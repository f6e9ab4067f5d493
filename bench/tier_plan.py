"""The two-tier weekly plan (``actors/sizing/tiers.py``) against the single-tier one, on
real traces, without the pool or the replay: what each plan costs per week (VM-slots, a
standby VM-slot at ``--standby-cost``) and the share of checkouts it covers, in sample (fitted
to the whole trace) and on the days after the first half (fitted to the first half).

    .venv/bin/python bench/tier_plan.py ../shared/data/traces/*.csv

A checkout is covered when its clone rank is within the slot's (total) plan and, for two
tiers, its resume rank within the slot's running plan. The plans' cost is what they hold
through a week: a lower bound on the idle VM-hours a pool pays (the replay adds the VMs in
use, refills and shrinking delays).
"""

from __future__ import annotations

import argparse
import bisect
import collections

from vmpooler.actors.sizing._plan import build_plan, week_slot
from vmpooler.actors.sizing.forecast import SLOT_SECONDS
from vmpooler.actors.sizing.tiers import build_tier_plan, window_ranks
from vmpooler.actors.sizing.trace import read_trace


def score(pools: dict[str, list[float]], clone: float, resume: float, target: float,
          cost: float, middle: float, last: float) -> dict[str, float]:
    """Covered shares (in sample, next days) and weekly cost of both plans, over all pools."""
    out: collections.Counter[str] = collections.Counter()
    for raw in pools.values():
        ts = sorted(raw)
        rc, rr = window_ranks(ts, clone), window_ranks(ts, resume)
        k = bisect.bisect_left(ts, middle)
        for label, end, fit in (("in", len(ts), last), ("next", k, middle)):
            if end == 0 or (label == "next" and end == len(ts)):
                continue
            one = build_plan(ts[:end], rc[:end], ts[0], fit, target, SLOT_SECONDS)
            two = build_tier_plan(ts[:end], rr[:end], rc[:end], ts[0], fit, target,
                                  SLOT_SECONDS, cost)
            scored = range(len(ts)) if label == "in" else range(end, len(ts))
            for i in scored:
                s = week_slot(ts[i], SLOT_SECONDS)
                out[f"{label}_one"] += rc[i] <= one[s]
                out[f"{label}_two"] += rr[i] <= two.running[s] and rc[i] <= two.total[s]
                out[f"{label}_n"] += 1
            if label == "in":
                out["cost_one"] += sum(one)
                out["cost_two"] += sum(r + cost * (t - r)
                                       for r, t in zip(two.running, two.total, strict=True))
    return {"in_one": out["in_one"] / out["in_n"], "in_two": out["in_two"] / out["in_n"],
            "next_one": out["next_one"] / max(1, out["next_n"]),
            "next_two": out["next_two"] / max(1, out["next_n"]),
            "cost_ratio": out["cost_two"] / max(1e-9, out["cost_one"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--clone", default="30,120,300")
    parser.add_argument("--resume", default="10,30")
    parser.add_argument("--target", type=float, default=0.99)
    parser.add_argument("--standby-cost", type=float, default=0.1)
    args = parser.parse_args()
    print("| trace | clone | resume | in sample: one / two tiers | next days: one / two "
          "| weekly cost, two / one |")
    print("|---|---|---|---|---|---|")
    for path in args.traces:
        rows = read_trace(path, skip_negative=lambda _line: None)
        pools: dict[str, list[float]] = collections.defaultdict(list)
        for row in rows:
            pools[row.pool].append(row.t)
        middle, last = (rows[0].t + rows[-1].t) / 2, rows[-1].t
        for clone in (float(c) for c in args.clone.split(",")):
            for resume in (float(r) for r in args.resume.split(",")):
                f = score(pools, clone, resume, args.target, args.standby_cost, middle, last)
                print(f"| {path.rsplit('/', 1)[-1][:14]} | {clone:.0f} s | {resume:.0f} s "
                      f"| {f['in_one']:.4f} / {f['in_two']:.4f} "
                      f"| {f['next_one']:.4f} / {f['next_two']:.4f} "
                      f"| {f['cost_ratio']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
