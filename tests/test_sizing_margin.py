"""The forecast's margin from its own misses (actors/sizing/forecast.py): a plan that misses
more than asked on traffic it had not seen is refitted to a smaller miss budget, in
proportion and within a floor; misses of its first day do not count; a week without misses
forgets the margin."""

from __future__ import annotations

import random

from vmpooler.actors.sizing.forecast import (
    MARGIN_AFTER,
    MARGIN_FLOOR,
    MARGIN_SECONDS,
    DemandForecast,
)

DAY = 86400.0
START = 1_700_000_000.0
CLONE = 120.0


def run(model: DemandForecast, times: list[float]) -> None:
    """As a pool does: asks for its target, then a checkout comes."""
    for t in times:
        model.target(t, CLONE)
        model.observe(t)


def growing_bursts(days: int, rng: random.Random) -> list[float]:
    """A burst a day at a random hour, each day's bigger than the day before: ranks the plan
    has never seen, so it misses."""
    times: list[float] = []
    for day in range(days):
        start = START + day * DAY + rng.uniform(0, 20) * 3600
        times += [start + 2 * i for i in range(3 + day)]
    return times


def test_without_misses_the_plan_fits_the_asked_for_ratio() -> None:
    model = DemandForecast(0.99, clone_time=CLONE)
    run(model, [START + h * 3600 for h in range(24 * 10)])  # one an hour: always served
    assert model.plan_target(START + 10 * DAY) == 0.99
    assert model.target(START + 10 * DAY, CLONE).plan_target == 0.99


def test_misses_on_unseen_traffic_raise_the_plan_target_within_the_floor() -> None:
    model = DemandForecast(0.99, clone_time=CLONE)
    times = growing_bursts(10, random.Random(5))
    run(model, times)
    raised = model.plan_target(times[-1])
    assert 0.99 < raised <= 1 - 0.01 * MARGIN_FLOOR + 1e-12
    fitted = model.target(times[-1], CLONE).plan_target  # refitted when it moved by 1/4
    assert fitted > 0.99 and (1 - fitted) / (1 - raised) < 1.25


def test_the_first_days_misses_do_not_count() -> None:
    model = DemandForecast(0.99, clone_time=CLONE)
    burst = [START + 2 * i for i in range(50)]  # 49 misses while it knows nothing
    run(model, burst)
    assert burst[-1] < START + MARGIN_AFTER
    assert model.plan_target(burst[-1]) == 0.99


def test_a_week_without_misses_forgets_the_margin() -> None:
    model = DemandForecast(0.99, clone_time=CLONE)
    times = growing_bursts(10, random.Random(5))
    run(model, times)
    assert model.plan_target(times[-1]) > 0.99
    assert model.plan_target(times[-1] + MARGIN_SECONDS + 1) == 0.99
