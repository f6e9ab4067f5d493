"""The two-tier plan (actors/sizing/tiers.py) on synthetic demand: a burst within the resume
time needs running VMs; a burst spread over the clone time is served by standby VMs at a
fraction of the cost; silence holds nothing; standby that costs as much as a running VM is
never planned; and the plan reaches the target it is given."""

from __future__ import annotations

import itertools
import random

import pytest

from vmpooler.actors.sizing._plan import MONDAY_EPOCH, build_plan, seasons, week_slot
from vmpooler.actors.sizing.tiers import build_tier_plan, frontier, window_ranks

SLOT = 1800.0
DAY = 86400.0
START = MONDAY_EPOCH + 1000 * 7 * DAY  # a Monday, 00:00 UTC
RESUME, CLONE = 15.0, 120.0


def daily(offsets: list[float], days: int = 14, hour: float = 10.0) -> list[float]:
    """Checkouts at ``hour`` UTC plus each offset (seconds), every day."""
    return [START + d * DAY + hour * 3600 + o for d in range(days) for o in offsets]


def plan_for(times: list[float], *, target: float = 0.99, cost: float = 0.1,
             resume: float = RESUME, clone: float = CLONE):
    times = sorted(times)
    return build_tier_plan(times, window_ranks(times, resume), window_ranks(times, clone),
                           times[0] if times else START, START + 14 * DAY, target, SLOT, cost)


def served(times: list[float], plan, *, resume: float = RESUME,
           clone: float = CLONE) -> float:
    """The share of ``times`` the plan serves warm (each checkout by its slot's pair)."""
    times = sorted(times)
    hits = 0
    for t, r, c in zip(times, window_ranks(times, resume), window_ranks(times, clone),
                       strict=True):
        s = week_slot(t, SLOT)
        hits += r <= plan.running[s] and c <= plan.total[s]
    return hits / len(times)


def test_ranks_count_the_window_up_to_each_instant() -> None:
    assert window_ranks([0, 1, 2, 20, 21], 5) == [1, 2, 3, 1, 2]
    assert window_ranks([], 5) == []


def test_a_burst_within_the_resume_time_needs_running_vms() -> None:
    times = daily([i * 0.1 for i in range(10)])  # 10 checkouts in one second
    plan = plan_for(times)
    burst = week_slot(times[0], SLOT)
    assert (plan.running[burst], plan.standby(burst)) == (10, 0)
    assert served(times, plan) >= 0.99


def test_a_burst_over_the_clone_time_is_served_from_standby() -> None:
    times = daily([i * 10.0 for i in range(10)])  # 10 checkouts 10 s apart: 90 s
    plan = plan_for(times, resume=5.0)
    burst = week_slot(times[0], SLOT)
    assert plan.running[burst] == 1
    assert plan.standby(burst) == 9  # a single tier would hold 10 running VMs
    assert served(times, plan, resume=5.0) >= 0.99
    single = plan_for(times, resume=5.0, cost=1.0)
    assert (single.running[burst], single.standby(burst)) == (10, 0)


def test_silence_holds_nothing() -> None:
    plan = plan_for([])
    assert set(plan.running) == {0} and set(plan.total) == {0}
    quiet = plan_for(daily([0.0, 600.0]))
    busy = week_slot(START + 10 * 3600, SLOT)
    night = week_slot(START + 3 * 3600, SLOT)
    assert (quiet.running[night], quiet.total[night]) == (0, 0)
    assert quiet.total[busy] >= 1


@pytest.mark.parametrize("cost", [1.0, 1.5])
def test_standby_as_dear_as_running_is_never_planned(cost: float) -> None:
    rng = random.Random(4)
    times = sorted(START + rng.random() * 14 * DAY for _ in range(3000))
    plan = plan_for(times, cost=cost)
    assert plan.running == plan.total


def test_a_step_up_in_demand_is_held_where_it_happened() -> None:
    # one checkout a day for a week, then bursts of 6 over a minute every day
    times = daily([0.0], days=7) + [t + 7 * DAY for t in daily(
        [i * 10.0 for i in range(6)], days=7)]
    plan = plan_for(times, resume=5.0)
    burst = week_slot(times[-1], SLOT)
    assert plan.total[burst] >= 6 and plan.running[burst] <= 2


@pytest.mark.parametrize("target", [0.9, 0.95, 0.99])
def test_the_target_is_reached_and_costs_no_more_than_one_tier(target: float) -> None:
    rng = random.Random(7)
    times: list[float] = []
    for day in range(14):
        for _ in range(rng.randint(3, 8)):  # CI runs: a few jobs each, spread over a minute
            start = START + day * DAY + rng.uniform(8, 18) * 3600
            times += [start + rng.uniform(0, 60) for _ in range(rng.randint(1, 12))]
    times.sort()
    plan = plan_for(times, target=target)
    assert served(times, plan) >= target - 0.005
    single = build_plan(times, window_ranks(times, CLONE), times[0], START + 14 * DAY,
                        target, SLOT)
    two = sum(r + 0.1 * (t - r) for r, t in zip(plan.running, plan.total, strict=True))
    assert two < 0.7 * sum(single)


def test_the_frontier_is_concave_and_ends_serving_everything() -> None:
    rng = random.Random(3)
    times = sorted(START + rng.random() * 3 * DAY for _ in range(2000))
    weights = [1.0] * len(times)
    hull = frontier(window_ranks(times, RESUME), window_ranks(times, CLONE), weights, 0.1)
    assert hull[0].share == 0 and hull[-1].share == pytest.approx(1.0)
    slopes = [(b.share - a.share) / (b.cost - a.cost) for a, b in itertools.pairwise(hull)]
    assert all(x >= y for x, y in itertools.pairwise(slopes))
    assert all(p.running <= p.total for p in hull)


def test_seasons_say_how_many_checkouts_a_slot_expects() -> None:
    times = daily([0.0, 1.0, 2.0])
    found = seasons(times, times[0], START + 14 * DAY, SLOT)
    assert found is not None
    busy = int((10 * 3600) // SLOT)
    assert found.rate[busy] > found.rate[(busy + 12) % 48] >= 0
