"""The online demand model of a pool with a standby tier: running and standby VMs to hold now.

:class:`TierForecast` is :class:`~vmpooler.actors.sizing.forecast.DemandForecast` with a
second window. Each checkout has its clone rank (checkouts within one clone time up to and
including it, as in the single-tier model) and its *resume rank* (within one resume time). It
is served at once when its resume rank is at most the running VMs held and its clone rank at
most the running plus standby VMs held (:mod:`~vmpooler.actors.sizing.tiers`). The weekly
plan is :func:`~vmpooler.actors.sizing.tiers.build_tier_plan` (the cheapest pair per slot
reaching the plan's target, a standby VM-hour costing ``standby_cost`` of a running one),
and the other terms follow the single-tier model, each on its window:

- **lookahead**: the running plan over ``[now, now + resume time]``, the total over
  ``[now, now + clone time]``;
- **recent demand**: running VMs never below the last hour's largest resume rank, the total
  never below its largest clone rank;
- **margin from its own misses**: a checkout is scored a miss when either rank was above what
  the model last gave, and the plan is refitted as in the single-tier model.

What a caller may rely on: as for ``DemandForecast`` (deterministic, bounded, 0 without
history); ``running <= total``; with ``standby_cost >= 1`` no standby VM is planned; the
total never falls below the single-tier model's recent-demand term.
"""

from __future__ import annotations

import bisect
from array import array
from collections import deque
from dataclasses import dataclass

from vmpooler.actors.sizing._plan import week_slot
from vmpooler.actors.sizing.forecast import (
    HISTORY_SECONDS,
    SLOT_SECONDS,
    DemandForecast,
    clone_window,
    latest_rank,
    plan_ahead,
    rerank,
)
from vmpooler.actors.sizing.tiers import TierPlan, build_tier_plan

__all__ = ["TierForecast", "TierValue"]

_MARGIN_STEP = 1.25


@dataclass(frozen=True, slots=True)
class TierValue:
    """Running VMs and running plus standby VMs to hold now, and the terms behind them."""

    running: int
    total: int
    seasonal_running: int
    seasonal_total: int
    recent_running: int
    recent_total: int
    plan_target: float

    @property
    def standby(self) -> int:
        """Standby VMs to hold now."""
        return self.total - self.running


class TierForecast(DemandForecast):
    """The two-tier demand model of one pool. Not thread-safe (its pool actor owns it)."""

    def __init__(self, target_hit: float, *, clone_time: float = 120.0,
                 resume_time: float = 30.0, standby_cost: float = 0.1) -> None:
        super().__init__(target_hit, clone_time=clone_time)
        if not standby_cost > 0.0:
            raise ValueError(f"standby_cost must be above 0, got {standby_cost!r}")
        self.standby_cost = standby_cost
        self._resume_window = clone_window(resume_time)
        self._resume_ranks = array("l")
        self._resume_recent: deque[tuple[float, int]] = deque()
        self._tier_plan = TierPlan([], [])
        self._held_running = 0
        self._last_resume_rank = 0

    def observe(self, t: float) -> None:
        """Record one checkout at ``t`` (time order; an earlier one counts at the last)."""
        times = self._times
        if times and t < times[-1]:
            t = times[-1]
        low = bisect.bisect_left(times, t - self._resume_window)
        rank = len(times) - low + 1
        self._last_resume_rank = rank
        self._resume_ranks.append(rank)
        recent = self._resume_recent
        while recent and recent[-1][1] <= rank:
            recent.pop()
        recent.append((t, rank))
        super().observe(t)  # may drop the oldest instants (``_drop``)

    def _missed(self, rank: int) -> bool:
        return rank > self._held or self._last_resume_rank > self._held_running

    def tiers(self, now: float, clone_time: float, resume_time: float) -> TierValue:
        """Running and total VMs to hold at ``now`` for the pool's current clone and resume
        times (seconds)."""
        window = clone_window(clone_time)
        if window != self._window:
            self._rerank(window)
        resume_window = min(clone_window(resume_time), window)
        if resume_window != self._resume_window:
            self._rerank_resume(resume_window)
        self._expire(now)
        latest_total = latest_rank(self._recent, now)
        latest_running = latest_rank(self._resume_recent, now)
        slot = week_slot(now, SLOT_SECONDS)
        wanted = self.plan_target(now)
        fitted, budget = 1.0 - self._plan_target, 1.0 - wanted
        moved = max(fitted, budget) / min(fitted, budget) >= _MARGIN_STEP
        if (slot != self._plan_slot and (self._dirty or not self._tier_plan.total)) or moved:
            begin = max(self._begin or now, now - HISTORY_SECONDS)
            self._plan_target = wanted
            self._tier_plan = build_tier_plan(
                self._times, self._resume_ranks, self._ranks, begin, now, wanted,
                SLOT_SECONDS, self.standby_cost)
            self._dirty = False
        self._plan_slot = slot
        seasonal_running = plan_ahead(self._tier_plan.running, now, resume_time)
        seasonal_total = plan_ahead(self._tier_plan.total, now, clone_time)
        running = max(seasonal_running, latest_running)
        total = max(seasonal_total, latest_total, running)
        self._held, self._held_running = total, running
        return TierValue(running, total, seasonal_running, seasonal_total, latest_running,
                         latest_total, self._plan_target)

    def _drop(self, count: int) -> None:
        del self._resume_ranks[:count]
        super()._drop(count)

    def _rerank_resume(self, window: float) -> None:
        """Recompute every kept resume rank for a new resume window."""
        self._resume_window = window
        self._resume_recent = rerank(self._times, self._resume_ranks, window)
        self._dirty = True
