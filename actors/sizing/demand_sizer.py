"""The demand-sizing policy of one pool: the forecast within the pool's bounds, with hysteresis.

``DemandSizer.target(now, clone_time)`` combines

- the forecast (``forecast.DemandForecast``: ready VMs to hold for the coming clone time),
- the schedule floor (the largest window size over ``[now, now + clone_time]``, so VMs are
  ready when a window opens),
- the operator floor (``POST /config/poolsize`` sets it; None when unset),
- ``size_min`` (a floor) and ``size_max`` (a ceiling, which wins over every floor),

and grows at once but shrinks only after the wanted size stayed lower for a hold time
(``HOLD_CLONE_TIMES`` clone times, at least ``HOLD_MIN_SECONDS``), then to the largest size
wanted during that hold and by at most half the current size per hold: ready VMs are not
retired and recloned back and forth on noisy demand. A lower ceiling applies at once.

Cost: O(1) amortised per call (the forecast rebuilds its plan at most once per slot; the
schedule's largest floor is cached until the next window boundary).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vmpooler.actors.sizing.forecast import DemandForecast, Forecast, clone_window
from vmpooler.actors.sizing.schedule import Window, max_floor, next_change
from vmpooler.actors.sizing.tier_forecast import TierForecast

__all__ = ["HOLD_CLONE_TIMES", "HOLD_MIN_SECONDS", "DemandSizer", "Shrink", "SizingPolicy",
           "Target"]

HOLD_CLONE_TIMES = 3.0
HOLD_MIN_SECONDS = 300.0
REASONS = ("forecast", "schedule", "floor", "minimum", "ceiling")


@dataclass(frozen=True, slots=True)
class SizingPolicy:
    """A pool's ``sizing: demand`` settings. ``target_hit`` is the share of checkouts that
    should find a ready VM; ``schedule`` windows set floors at given local times."""

    size_min: int
    size_max: int
    target_hit: float = 0.99
    schedule: tuple[Window, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.size_min < 0 or self.size_max < self.size_min:
            raise ValueError(
                f"need 0 <= size_min <= size_max, got {self.size_min} and {self.size_max}")
        if not 0.0 < self.target_hit < 1.0:
            raise ValueError(f"target_warm_hit must be in (0, 1), got {self.target_hit!r}")


@dataclass(frozen=True, slots=True)
class Target:
    """The ready count a pool should hold now. ``reason`` names what decided it: the
    ``forecast``, a ``schedule`` window, the operator ``floor``, ``size_min`` (``minimum``) or
    ``size_max`` (``ceiling``). ``forecast`` is the raw forecast, ``floor`` the largest floor
    in force (schedule, operator, size_min), ``ceiling`` is ``size_max``; ``held`` is True when
    the size is above what is wanted now because a shrink waits out its hold time."""

    size: int
    reason: str
    forecast: int
    floor: int
    ceiling: int
    held: bool = False
    standby: int = 0  # standby VMs to hold besides ``size`` (a pool with ``standby: auto``)


class DemandSizer:
    """Sizes one pool by demand. Not thread-safe: its pool actor owns it."""

    def __init__(self, policy: SizingPolicy, *, forecast: DemandForecast | None = None,
                 clone_time: float = 120.0) -> None:
        self.policy = policy
        self.forecast = forecast or DemandForecast(policy.target_hit, clone_time=clone_time)
        self.operator_floor: int | None = None
        self._running = Shrink()
        self._total = Shrink()
        self._floor_cache: tuple[float, float, float, int] | None = None  # from, until, h, max

    def observe(self, t: float) -> None:
        """Record one checkout at ``t`` (epoch seconds, in time order)."""
        self.forecast.observe(t)

    def set_operator_floor(self, size: int | None) -> None:
        """Set (or clear with None) the operator's floor; it applies at the next ``target``."""
        if size is not None and size < 0:
            raise ValueError(f"an operator floor is >= 0, got {size}")
        self.operator_floor = size

    def target(self, now: float, clone_time: float, resume_time: float | None = None
               ) -> Target:
        """The ready count to hold at ``now`` given the pool's current ``clone_time``; with
        a :class:`TierForecast` and the pool's ``resume_time``, the standby count too
        (running and standby together never above ``size_max``)."""
        policy = self.policy
        total_wanted = 0
        if isinstance(self.forecast, TierForecast) and resume_time is not None:
            tiers = self.forecast.tiers(now, clone_time, resume_time)
            predicted: Forecast = Forecast(tiers.running, "tiers", tiers.seasonal_running,
                                           tiers.recent_running, clone_window(resume_time),
                                           tiers.plan_target)
            total_wanted = tiers.total
        else:
            predicted = self.forecast.target(now, clone_time)
        scheduled = self._schedule_floor(now, clone_window(clone_time))
        operator = self.operator_floor or 0
        floor = max(scheduled, operator, policy.size_min)
        wanted = max(predicted.value, floor)
        if wanted > policy.size_max:
            reason, wanted = "ceiling", policy.size_max
        elif predicted.value >= floor:
            reason = "forecast"
        elif operator == floor:
            reason = "floor"
        elif scheduled == floor:
            reason = "schedule"
        else:
            reason = "minimum"
        hold = max(HOLD_CLONE_TIMES * clone_time, HOLD_MIN_SECONDS)
        size = min(self._running.step(now, hold, wanted), policy.size_max)
        self._running.size = size
        standby = 0
        if total_wanted:
            total = min(self._total.step(now, hold, max(total_wanted, size)), policy.size_max)
            self._total.size = total
            standby = max(0, total - size)
        return Target(size, reason, predicted.value, min(floor, policy.size_max),
                      policy.size_max, size > wanted, standby)

    def _schedule_floor(self, now: float, horizon: float) -> int:
        windows = self.policy.schedule
        if not windows:
            return 0
        cache = self._floor_cache
        if cache is not None and cache[0] <= now < cache[1] and cache[2] == horizon:
            return cache[3]
        value = max_floor(windows, now, horizon) or 0
        first = next_change(windows, now)
        later = next_change(windows, now + horizon)
        until = min(first if first is not None else float("inf"),
                    later - horizon if later is not None else float("inf"))
        self._floor_cache = (now, until, horizon, value)
        return value


class Shrink:
    """A size that grows at once and shrinks only after the wanted size stayed lower for a
    hold time, then to the largest size wanted during it, by at most half per hold."""

    def __init__(self) -> None:
        self.size: int | None = None
        self._below_since = 0.0
        self._below_max = 0
        self._shrinking = False

    def step(self, now: float, hold: float, wanted: int) -> int:
        """The size to hold at ``now`` when ``wanted`` is wanted (the caller may clamp it
        and store the clamped value in ``size``)."""
        current = self.size
        if current is None or wanted >= current:
            self.size = wanted
            self._shrinking = False
            return wanted
        if not self._shrinking:
            self._shrinking = True
            self._below_since, self._below_max = now, wanted
            return current
        self._below_max = max(self._below_max, wanted)
        if now - self._below_since < hold:
            return current
        size = max(self._below_max, current - max(1, current // 2))
        self.size = size
        self._below_since, self._below_max = now, wanted
        return size
