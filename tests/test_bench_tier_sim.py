"""The two-tier pool model of bench/standby_frontier.py on synthetic traces: without standby
VMs it is the single-tier model; a burst within the resume time needs running VMs; one spread
over the clone time is served by standby VMs; its VM-hours add up."""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import pytest

from vmpooler.actors.sizing.demand_sizer import DemandSizer, SizingPolicy
from vmpooler.actors.sizing.tier_forecast import TierForecast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import sizing_sim
import tier_sim


def _trace(seed: int, days: float = 2.0) -> list[float]:
    """Poisson checkouts (one every 10 min on average) and bursts of 3-20 in one second."""
    rng = random.Random(seed)
    out: list[float] = []
    t = 0.0
    while t < days * 86400:
        t += rng.expovariate(1 / 600)
        out.append(t)
        if rng.random() < 0.05:
            out.extend([t + 0.5] * rng.randint(3, 20))
    return sorted(out)


def _single(run: tier_sim.TierRun) -> sizing_sim.PoolRun:
    assert run.standby_vm_hours == 0.0 and run.resumes == 0
    return sizing_sim.PoolRun(run.checkouts, run.hits, run.running_vm_hours, run.clones,
                              run.mean_miss_wait)


@pytest.mark.parametrize("seed", [1, 2])
def test_without_standby_it_is_the_single_tier_model(seed: int) -> None:
    times = _trace(seed)
    end = times[-1] + 3600
    for size in (0, 1, 3, 8, 25):
        assert (_single(tier_sim.run_fixed(times, size, 0, 120, 15, end))
                == sizing_sim.run_fixed(times, size, 120, end))
    # a target moving on its own: clones and retirements with clones on their way
    def wave(now: float) -> int:
        return max(0, round(6 + 6 * math.sin(now / 1700)))

    middle = times[len(times) // 2]
    for measure_from in (None, middle):
        one = sizing_sim.run_demand(times, 300, wave, lambda _t: None, tick=60,
                                    measure_from=measure_from, start=times[0] - 600)
        two = tier_sim.run_demand(times, 300, 10, lambda now: (wave(now), 0), lambda _t: None,
                                  tick=60, measure_from=measure_from, start=times[0] - 600)
        assert _single(two) == one
        assert one.clones > len(times) // 2 and one.hits < one.checkouts
    first = DemandSizer(SizingPolicy(0, 1000, 0.99), clone_time=120)
    second = DemandSizer(SizingPolicy(0, 1000, 0.99), clone_time=120)
    one = sizing_sim.run_demand(times, 120, lambda now: first.target(now, 120).size,
                                first.observe, tick=60, measure_from=middle)
    two = tier_sim.run_demand(times, 120, 15, lambda now: (second.target(now, 120).size, 0),
                              second.observe, tick=60, measure_from=middle)
    assert _single(two) == one


def test_a_burst_within_the_resume_time_needs_running_vms() -> None:
    burst = [1000.0 + 0.1 * k for k in range(5)]  # 5 checkouts within half a second
    standby_only = tier_sim.run_fixed(burst, 0, 10, clone_time=300, resume_time=30,
                                      end=1100)
    assert standby_only.hits == 0
    assert standby_only.resumes == 5
    assert standby_only.mean_miss_wait == pytest.approx(30, abs=0.5)  # resumed, not cloned
    two_running = tier_sim.run_fixed(burst, 2, 10, clone_time=300, resume_time=30)
    assert two_running.hits == 2
    assert tier_sim.run_fixed(burst, 5, 0, clone_time=300, resume_time=30).hits == 5
    a, s, run = tier_sim.cheapest_fixed(burst, 300, 30, 0.99, 0.1, largest=5)
    assert (a, s, run.hits) == (5, 0, 5)


def test_a_burst_spread_over_the_clone_time_is_served_by_standby_vms() -> None:
    spread = [1000.0 + 60 * k for k in range(5)]  # one a minute, clone time 5 minutes
    single = tier_sim.run_fixed(spread, 1, 0, clone_time=300, resume_time=10)
    assert single.hits == 1
    two = tier_sim.run_fixed(spread, 1, 4, clone_time=300, resume_time=10)
    assert two.hits == 5
    assert two.clones == 5 and two.resumes == 4  # the last takes the 4th resumed VM
    a, s, run = tier_sim.cheapest_fixed(spread, 300, 10, 0.99, 0.1, largest=5)
    assert (a, s) == (1, 4) and run.hits == 5
    assert run.cost(0.1) < tier_sim.run_fixed(spread, 5, 0, 300, 10).cost(0.1)


def test_running_and_standby_vm_hours_add_up() -> None:
    # t=0: the checkout takes 1 of 2 ready VMs, a resume (done at 10) and a clone (done at
    # 100, then parked in standby) refill; t=7200 the same again: 1 ready VM for 10 s and 2
    # for 7190 s; 2 standby VMs for 100 s and 3 for 7100 s.
    run = tier_sim.run_fixed([0.0, 7200.0], 2, 3, clone_time=100, resume_time=10)
    assert run.hits == 2 and run.resumes == 2 and run.clones == 2
    assert run.running_vm_hours * 3600 == pytest.approx(1 * 10 + 2 * 7190)
    assert run.standby_vm_hours * 3600 == pytest.approx(2 * 100 + 3 * 7100)
    assert run.cost(0.1) == pytest.approx((14390 + 0.1 * 21500) / 3600)
    # Retired when the targets fall; counted only from measure_from.
    targets = {True: (2, 3), False: (1, 0)}
    late = tier_sim.run_demand([0.0, 7200.0], 100, 10, lambda now: targets[now < 3600],
                               lambda _t: None, tick=3600, measure_from=3600)
    assert (late.checkouts, late.hits, late.clones, late.resumes) == (1, 1, 1, 0)
    assert late.running_vm_hours * 3600 == pytest.approx(3600)  # 1 ready VM from 3600 on
    assert late.standby_vm_hours == 0.0


def test_the_two_tier_demand_sizer_runs_in_the_model() -> None:
    times = _trace(3, days=3.0)
    sizer = DemandSizer(SizingPolicy(0, 1000, 0.99), forecast=TierForecast(
        0.99, clone_time=300, resume_time=15, standby_cost=0.1))
    run = tier_sim.run_demand(times, 300, 15, lambda now: _pair(sizer, now), sizer.observe)
    assert run.checkouts == len(times) and run.resumes > 0 and run.standby_vm_hours > 0


def _pair(sizer: DemandSizer, now: float) -> tuple[int, int]:
    target = sizer.target(now, 300, 15)
    return target.size, target.standby
