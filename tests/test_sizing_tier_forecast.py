"""The online two-tier demand model (``standby: auto`` with ``sizing: demand``) on synthetic
demand: a burst within the resume time, a burst within the clone time, silence, a step up,
and the price of a standby VM deciding whether the tier is used at all."""

from __future__ import annotations

import pytest

from vmpooler.actors.sizing.demand_sizer import DemandSizer, SizingPolicy
from vmpooler.actors.sizing.tier_forecast import TierForecast

DAY = 86400.0
START = 1_700_006_400.0  # a Wednesday, 00:00 UTC
CLONE, RESUME = 300.0, 15.0


def bursts(days: int, size: int, gap: float, every: float = 1800.0) -> list[float]:
    """``size`` checkouts ``gap`` seconds apart, every ``every`` seconds for ``days``."""
    return [START + k * every + i * gap for k in range(int(days * DAY / every))
            for i in range(size)]


def model(times: list[float], *, cost: float = 0.1, hit: float = 0.99) -> TierForecast:
    return TierForecast.from_history(times, now=times[-1], target_hit=hit, clone_time=CLONE,
                                   resume_time=RESUME, standby_cost=cost)


def test_a_burst_within_the_resume_time_is_held_running() -> None:
    times = bursts(3, 5, gap=1.0)  # 5 checkouts within a second: resume rank 1..5
    value = model(times).tiers(times[-1] + 600, CLONE, RESUME)
    assert value.running >= 5
    assert value.standby == 0  # nothing the running VMs would not serve anyway


def test_a_burst_spread_over_the_clone_time_is_held_on_standby() -> None:
    times = bursts(3, 6, gap=40.0)  # 6 checkouts 40 s apart: resume rank 1, clone rank 1..6
    value = model(times).tiers(times[-1] + 600, CLONE, RESUME)
    assert value.running <= 2
    assert value.total >= 6 and value.standby >= 4


def test_standby_as_dear_as_running_is_never_planned() -> None:
    times = bursts(3, 6, gap=40.0)
    value = model(times, cost=1.0).tiers(times[-1] + 600, CLONE, RESUME)
    assert value.standby == 0 and value.running >= 6


def test_silence_holds_nothing() -> None:
    empty = TierForecast(0.99, clone_time=CLONE, resume_time=RESUME)
    value = empty.tiers(START, CLONE, RESUME)
    assert (value.running, value.total) == (0, 0)


def test_a_step_up_is_followed_within_one_window() -> None:
    times = bursts(3, 2, gap=40.0)
    forecast = model(times)
    before = forecast.tiers(times[-1] + 60, CLONE, RESUME)
    now = times[-1] + 900
    for i in range(12):  # a new, larger burst: 12 checkouts 20 s apart
        forecast.observe(now + 20 * i)
    after = forecast.tiers(now + 240, CLONE, RESUME)
    assert after.total >= 12 > before.total
    assert after.running >= 1 and after.standby >= 10  # none within 15 s of another


def test_the_sizer_keeps_both_tiers_under_size_max_together() -> None:
    times = bursts(3, 8, gap=40.0)
    sizer = DemandSizer(SizingPolicy(size_min=0, size_max=5, target_hit=0.99),
                        forecast=model(times))
    target = sizer.target(times[-1] + 600, CLONE, RESUME)
    assert target.size + target.standby <= 5
    assert target.standby > 0


def test_the_sizer_without_a_resume_time_plans_no_standby() -> None:
    times = bursts(3, 8, gap=40.0)
    sizer = DemandSizer(SizingPolicy(size_min=0, size_max=20, target_hit=0.99),
                        forecast=model(times))
    target = sizer.target(times[-1] + 600, CLONE)
    assert target.standby == 0 and target.size >= 8


def test_a_shrinking_standby_target_waits_out_its_hold_time() -> None:
    times = bursts(3, 8, gap=40.0)
    sizer = DemandSizer(SizingPolicy(size_min=0, size_max=20, target_hit=0.99),
                        forecast=model(times))
    first = sizer.target(times[-1] + 60, CLONE, RESUME)
    later = sizer.target(times[-1] + 3 * 3600, CLONE, RESUME)  # the recent burst is forgotten
    assert first.standby > 0
    assert later.size + later.standby <= first.size + first.standby


def test_a_cost_of_zero_is_refused() -> None:
    with pytest.raises(ValueError):
        TierForecast(0.99, standby_cost=0.0)
