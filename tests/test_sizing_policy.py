"""DemandSizer: bounds and their reasons, growth at once, shrink hysteresis without flapping."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime

import pytest

from vmpooler.actors.sizing.demand_sizer import DemandSizer, SizingPolicy
from vmpooler.actors.sizing.forecast import Forecast
from vmpooler.actors.sizing.schedule import parse_schedule

MONDAY = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
CLONE = 120.0


def test_reasons_name_the_bound_that_decided() -> None:
    windows = parse_schedule(["mon 10:00-11:00 4"])
    sizer = DemandSizer(SizingPolicy(1, 6, 0.99, windows), clone_time=CLONE)
    got = sizer.target(MONDAY + 3600, CLONE)
    assert (got.size, got.reason, got.floor, got.ceiling) == (1, "minimum", 1, 6)
    got = sizer.target(MONDAY + 10 * 3600 - 60, CLONE)           # one clone time ahead
    assert (got.size, got.reason) == (4, "schedule")
    sizer.set_operator_floor(5)
    got = sizer.target(MONDAY + 10 * 3600, CLONE)
    assert (got.size, got.reason) == (5, "floor")
    for _ in range(9):
        sizer.observe(MONDAY + 10 * 3600 + 1)
    got = sizer.target(MONDAY + 10 * 3600 + 2, CLONE)
    assert (got.size, got.reason, got.forecast) == (6, "ceiling", 9)
    sizer.set_operator_floor(None)
    sizer.policy = SizingPolicy(1, 12, 0.99, windows)
    got = sizer.target(MONDAY + 10 * 3600 + 3, CLONE)
    assert (got.size, got.reason) == (9, "forecast")
    sizer.policy = SizingPolicy(1, 3, 0.99, windows)              # a lower ceiling: at once
    assert sizer.target(MONDAY + 10 * 3600 + 4, CLONE).size == 3


def test_policy_checks_its_bounds() -> None:
    with pytest.raises(ValueError, match="size_min <= size_max"):
        SizingPolicy(5, 2)
    with pytest.raises(ValueError, match="target_warm_hit"):
        SizingPolicy(0, 2, 1.0)


def test_grows_at_once_shrinks_after_the_hold_by_half_at_most() -> None:
    sizer = DemandSizer(SizingPolicy(2, 50), clone_time=CLONE)
    t = MONDAY
    for _ in range(16):
        sizer.observe(t)
    assert sizer.target(t, CLONE).size == 16
    # An hour later the burst is forgotten: the wanted size is 2; the hold is 3 clone times.
    t += 3601
    first = sizer.target(t, CLONE)
    assert (first.size, first.held) == (16, True)
    assert sizer.target(t + 359, CLONE).size == 16
    assert sizer.target(t + 360, CLONE).size == 8
    assert sizer.target(t + 719, CLONE).size == 8
    assert sizer.target(t + 720, CLONE).size == 4
    assert sizer.target(t + 1080, CLONE).size == 2
    assert sizer.target(t + 90000, CLONE).size == 2                # never below size_min


class NoisyForecast:
    """Steady demand seen through noise: the wanted size jumps between 3 and 6 each call."""

    def __init__(self) -> None:
        self.rng = random.Random(7)

    def observe(self, t: float) -> None:
        pass

    def target(self, now: float, clone_time: float) -> Forecast:
        value = self.rng.randint(3, 6)
        return Forecast(value, "seasonal", value, 0, clone_time)


def test_no_flapping_on_steady_noisy_demand() -> None:
    """Asked every 10 s for two days, the size holds the top of the noise: it never shrinks
    and then grows back, and it is not retired and recloned back and forth."""
    sizer = DemandSizer(SizingPolicy(0, 100), forecast=NoisyForecast())  # type: ignore[arg-type]
    sizes = [sizer.target(MONDAY + k * 10.0, CLONE).size for k in range(2 * 8640)]
    changes = sum(1 for a, b in itertools.pairwise(sizes) if a != b)
    assert changes <= 1
    assert max(sizes) == 6
