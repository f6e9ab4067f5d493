"""Why the demand plan falls short of its target on new traffic: coverage in and out of sample.

Per trace, clone time and target, the weekly plan (``_plan.build_plan``, without the
recent-demand term, the lookahead or the policy's hysteresis) is fitted per pool

- to the whole trace and scored on the same checkouts (in sample: a checkout is covered when
  its rank is at most the plan of its slot);
- to the first half, frozen, and scored on the second half (out of sample);

and the share of second-half checkouts falling in a slot whose plan is 0 is given (pools
without checkouts in the first half are left out of the second-half columns). A plan
that reaches its target in sample but not out of sample misses by generalisation (its
threshold starves the slots its history under-estimated), not by a biased model.

Usage: ``python bench/sizing_generalization.py TRACE.csv [...] [--clone 30,120,300]``; meant
for traces shorter than the model's four weeks of history (it fits whole halves).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import sys

from vmpooler.actors.sizing._plan import build_plan, week_slot
from vmpooler.actors.sizing.forecast import SLOT_SECONDS, DemandForecast
from vmpooler.actors.sizing.trace import read_trace

TARGETS = (0.90, 0.95, 0.98, 0.99)


def coverage(pools: dict[str, list[float]], clone: float, target: float,
             middle: float, last: float) -> tuple[float, float, float]:
    """In-sample coverage, out-of-sample coverage and the out-of-sample share in plan-0
    slots, over all pools."""
    inside = n_in = outside = n_out = zero = 0
    for times in pools.values():
        model = DemandForecast.from_history(times, now=last, target_hit=target,
                                            clone_time=clone)
        ts, rk = list(model._times), list(model._ranks)
        plan = build_plan(ts, rk, ts[0], last, target, SLOT_SECONDS)
        inside += sum(r <= plan[week_slot(t, SLOT_SECONDS)] for t, r in zip(ts, rk, strict=True))
        n_in += len(ts)
        k = bisect.bisect_left(ts, middle)
        if k == 0 or k == len(ts):
            continue
        early = build_plan(ts[:k], rk[:k], ts[0], middle, target, SLOT_SECONDS)
        later = [(early[week_slot(t, SLOT_SECONDS)], r) for t, r in zip(ts[k:], rk[k:],
                                                                         strict=True)]
        outside += sum(r <= held for held, r in later)
        zero += sum(held == 0 for held, _ in later)
        n_out += len(later)
    return inside / n_in, outside / max(1, n_out), zero / max(1, n_out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--clone", default="30,120,300")
    args = parser.parse_args()
    print("| trace | clone time | target | in sample | next days | next days, plan 0 |")
    print("|---|---|---|---|---|---|")
    for path in args.traces:
        rows = read_trace(path, skip_negative=lambda _line: None)  # GitHub's -1: aborted
        pools: dict[str, list[float]] = collections.defaultdict(list)
        for row in rows:
            pools[row.pool].append(row.t)
        middle, last = (rows[0].t + rows[-1].t) / 2, rows[-1].t
        for clone in (float(c) for c in args.clone.split(",")):
            for target in TARGETS:
                inside, outside, zero = coverage(pools, clone, target, middle, last)
                print(f"| {path.rsplit('/', 1)[-1][:14]} | {clone:.0f} s | {target:.2f} "
                      f"| {inside:.4f} | {outside:.4f} | {zero:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
