"""The weekly plan for two tiers: running ready VMs, refilled by resuming standby VMs, and
standby (suspended) VMs, refilled by clones.

The rank model of :mod:`~vmpooler.actors.sizing.forecast`, with two windows. A checked-out
running VM is replaced by resuming a standby one (the resume time ``R``); the standby VM
taken is replaced by a clone (the clone time ``C``). So a checkout at ``t`` finds a running VM
when fewer than ``a`` checkouts came in ``[t - R, t]`` (their resumes are not done) and fewer
than ``b`` in ``[t - C, t]`` (their clones are not done), holding ``a`` running VMs and
``b - a`` standby ones: each checkout has a *resume rank* ``r`` and a *clone rank* ``c``
(``r ≤ c``) and is served warm exactly when ``r ≤ a`` and ``c ≤ b``. Holding ``(a, b)`` costs
``a + k · (b - a)`` running-VM equivalents, ``k`` the price of a standby VM-hour against a
running one (``standby_cost``).

The plan is :func:`~vmpooler.actors.sizing._plan.build_plan`'s, with the pair in place of
the single size: the pool's joint distribution of ``(r, c)`` over its history gives the share
``P(a, b)`` of checkouts each pair serves; only the pairs on the upper concave hull of
``(cost, P)`` are worth holding (each costs more and serves more than the one before, at a
falling rate). A slot expecting ``m`` checkouts per visit serves ``m · ΔP`` more for ``Δcost``
by stepping up the hull; the fewest cost-slots reaching ``target_hit`` of all expected
checkouts take the steps of largest ``m · ΔP / Δcost`` first (one threshold for the week), and
each slot holds the last hull pair it steps to.

What a caller may rely on: pure functions, deterministic; with ``standby_cost ≥ 1`` no
standby VM is ever planned (a running VM serves every checkout a standby one would); with
the resume window equal to the clone window, the running plan serves what the single-tier
plan serves. Cost: linear in the history plus the hull (distinct ranks squared, bounded by
the largest burst).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from vmpooler.actors.sizing._plan import DAY, WEEK, seasons

__all__ = ["Step", "TierPlan", "build_tier_plan", "frontier", "window_ranks"]


def window_ranks(times: Sequence[float], window: float) -> list[int]:
    """Each instant's rank: how many of ``times`` (sorted) fall in ``[t - window, t]`` up to
    and including it."""
    ranks: list[int] = []
    low = 0
    for i, t in enumerate(times):
        while times[low] < t - window:
            low += 1
        ranks.append(i - low + 1)
    return ranks


@dataclass(frozen=True, slots=True)
class Step:
    """A pair on the hull: ``running`` VMs and ``total`` (running plus standby), what it costs
    in running-VM equivalents and the share of checkouts it serves."""

    running: int
    total: int
    cost: float
    share: float


@dataclass(frozen=True, slots=True)
class TierPlan:
    """Per time-of-week slot (index as :func:`~vmpooler.actors.sizing._plan.week_slot`):
    the running VMs to hold and the total (running plus standby)."""

    running: list[int]
    total: list[int]

    def standby(self, slot: int) -> int:
        """The standby VMs of ``slot``."""
        return self.total[slot] - self.running[slot]


def frontier(resume_ranks: Sequence[int], clone_ranks: Sequence[int],
             weights: Sequence[float], standby_cost: float) -> list[Step]:
    """The upper concave hull of (cost, share served) over every pair worth holding, from
    ``(0, 0)`` to a pair serving every checkout; shares are weighted by ``weights``."""
    whole = sum(weights)
    hull = [Step(0, 0, 0.0, 0.0)]
    if whole <= 0:
        return hull
    b_values = sorted(set(clone_ranks))
    a_values = sorted(set(resume_ranks) | set(b_values))  # b running VMs: no standby
    a_index = {a: i for i, a in enumerate(a_values)}
    b_index = {b: j for j, b in enumerate(b_values)}
    grid = [[0.0] * len(b_values) for _ in a_values]
    for r, c, w in zip(resume_ranks, clone_ranks, weights, strict=True):
        grid[a_index[r]][b_index[c]] += w
    # served[i][j]: the weight of checkouts with r <= a_values[i] and c <= b_values[j]
    served: list[list[float]] = []
    above = [0.0] * len(b_values)
    for row in grid:
        above = [x + y for x, y in zip(above, accumulate(row), strict=True)]
        served.append(above)
    points: list[Step] = []
    for i, a in enumerate(a_values):
        for j, b in enumerate(b_values):
            if b < a:
                continue  # the total holds the running VMs
            points.append(Step(a, b, a + standby_cost * (b - a), served[i][j] / whole))
    points.sort(key=lambda p: (p.cost, -p.share, -p.running))  # ties: fewer standby VMs
    for point in points:
        if point.share <= hull[-1].share:
            continue
        while len(hull) >= 2 and _not_concave(hull[-2], hull[-1], point):
            hull.pop()
        hull.append(point)
    return hull


def _not_concave(first: Step, middle: Step, last: Step) -> bool:
    """Whether ``middle`` lies on or under the line from ``first`` to ``last``."""
    return ((middle.share - first.share) * (last.cost - first.cost)
            <= (last.share - first.share) * (middle.cost - first.cost))


def build_tier_plan(times: Sequence[float], resume_ranks: Sequence[int],
                    clone_ranks: Sequence[int], begin: float, now: float, target_hit: float,
                    slot_seconds: float, standby_cost: float) -> TierPlan:
    """Running and total VMs per time-of-week slot reaching ``target_hit`` of the expected
    checkouts at the least cost. All zeros without history."""
    slots = int(WEEK // slot_seconds)
    per_day = int(DAY // slot_seconds)
    plan = TierPlan([0] * slots, [0] * slots)
    found = seasons(times, begin, now, slot_seconds)
    if found is None:
        return plan
    hull = frontier(resume_ranks, clone_ranks, found.weight, standby_cost)
    expected = [found.factor[s // per_day] * found.rate[s % per_day] for s in range(slots)]
    steps = [(hull[k].share - hull[k - 1].share, hull[k].cost - hull[k - 1].cost)
             for k in range(1, len(hull))]
    items = sorted(((m * gain / cost, m * gain) for m in expected if m > 0
                    for gain, cost in steps), reverse=True)
    needed = target_hit * sum(expected)
    covered = 0.0
    threshold = items[-1][0] if items else 0.0
    for value, amount in items:
        covered += amount
        if covered >= needed:
            threshold = value
            break
    for s, m in enumerate(expected):
        taken = 0
        for k, (gain, cost) in enumerate(steps, start=1):
            if m <= 0 or m * gain / cost < threshold:
                break
            taken = k
        plan.running[s], plan.total[s] = hull[taken].running, hull[taken].total
    return plan
