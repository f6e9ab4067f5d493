"""The demand forecast on synthetic demand: daily and weekly cycles, a burst, a step, silence."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from vmpooler.actors.sizing.forecast import CAPACITY, DemandForecast, clone_window

DAY = 86400.0
MONDAY = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
CLONE = 300.0


def working_hours(days: int, *, weekends: bool = True) -> Iterator[float]:
    """Bursts of 5 checkouts every 10 minutes from 09:00 to 17:00 UTC."""
    for day in range(days):
        if not weekends and day % 7 >= 5:
            continue
        for step in range(9 * 6, 17 * 6):
            for _ in range(5):
                yield MONDAY + day * DAY + step * 600.0


def test_daily_cycle_high_before_the_peak_low_at_night() -> None:
    now = MONDAY + 7 * DAY
    model = DemandForecast.from_history(working_hours(7), now=now, target_hit=0.99,
                                        clone_time=CLONE)
    assert model.target(now + 3 * 3600, CLONE).value == 0                 # 03:00
    # The 08:30 slot holds (its neighbour 09:00 is busy); the 08:00 slot does not, but from
    # one clone time before 08:30 the pool looks ahead into it.
    assert model.target(now + 8 * 3600 + 20 * 60, CLONE).value == 0       # 08:20
    assert model.target(now + 8 * 3600 + 26 * 60, CLONE).value == 5       # 08:26, ahead
    assert model.target(now + 8 * 3600 + 26 * 60, CLONE).basis == "seasonal"
    assert model.target(now + 12 * 3600, CLONE).value == 5
    assert model.target(now + 20 * 3600, CLONE).value == 0


def test_weekly_cycle_weekend_low() -> None:
    now = MONDAY + 14 * DAY
    model = DemandForecast.from_history(working_hours(14, weekends=False), now=now,
                                        target_hit=0.99, clone_time=CLONE)
    assert model.target(now + 12 * 3600, CLONE).value == 5                # Monday noon
    assert model.target(now + 5 * DAY + 12 * 3600, CLONE).value == 0      # Saturday noon
    assert model.target(now + 6 * DAY + 12 * 3600, CLONE).value == 0      # Sunday noon


def test_unseen_burst_raises_the_target_at_once_and_is_forgotten_after_an_hour() -> None:
    now = MONDAY + 7 * DAY
    model = DemandForecast.from_history(working_hours(7), now=now, target_hit=0.99,
                                        clone_time=CLONE)
    burst = now + 3 * 3600 + 600          # 03:10, inside one slot
    assert model.target(burst - 1, CLONE).value == 0
    for _ in range(20):
        model.observe(burst)
    after = model.target(burst + 1, CLONE)
    assert (after.value, after.basis) == (20, "recent")
    assert model.target(burst + 3599, CLONE).value == 20
    assert model.target(burst + 3601, CLONE).value == 0


def test_step_change_is_followed_within_one_clone_time() -> None:
    start = MONDAY + 7 * DAY
    history = [MONDAY + k * 60.0 for k in range(int(7 * DAY / 60))]   # one a minute
    model = DemandForecast.from_history(history, now=start, target_hit=0.99, clone_time=CLONE)
    window = clone_window(CLONE)
    before = model.target(start, CLONE).value
    assert before == int(window // 60) + 1
    t = start
    while t < start + window:                    # the rate doubles: one every 30 s
        t += 30.0
        model.observe(t)
    assert model.target(t, CLONE).value >= 2 * before - 1


def test_silence_shrinks_to_nothing_and_state_is_bounded() -> None:
    model = DemandForecast(0.99, clone_time=CLONE)
    assert model.target(MONDAY, CLONE).value == 0
    for k in range(CAPACITY * 2):
        model.observe(MONDAY + k * 10.0)
    assert model.size <= CAPACITY + CAPACITY // 8
    last = MONDAY + (CAPACITY * 2 - 1) * 10.0
    assert model.target(last, CLONE).value > 0
    # Forty days of silence: the history is forgotten.
    assert model.target(last + 40 * DAY, CLONE).value == 0
    assert model.size == 0


def test_deterministic() -> None:
    now = MONDAY + 7 * DAY
    one = DemandForecast.from_history(working_hours(7), now=now, target_hit=0.95)
    two = DemandForecast.from_history(list(working_hours(7))[::-1], now=now, target_hit=0.95)
    for hour in range(0, 48, 3):
        assert one.target(now + hour * 3600, 120) == two.target(now + hour * 3600, 120)
