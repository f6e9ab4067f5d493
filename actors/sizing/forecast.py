"""The online demand model of one pool: how many ready VMs to hold now.

The principle. A pool refills one clone per checkout, each taking the clone time ``C``. A
checkout is served warm when fewer than ``S`` other checkouts arrived within the ``C`` seconds
before it (their replacements are not ready yet), ``S`` being the ready count held. So each
checkout has a *rank*, the number of checkouts in ``[t - C, t]`` up to and including it, and it
is a warm hit exactly when its rank is at most the ready count. Holding ``S`` through a period
serves the checkouts of rank ``≤ S``; the number to hold is a high quantile of the rank,
weighted by checkouts (a burst of 20 in one second has ranks 1…20).

The model (``docs/sizing.md`` says why each value):

- **History**: the checkout instants of the last ``HISTORY_SECONDS`` (28 days), at most
  ``CAPACITY`` (20,000) of them, oldest dropped first; each with its rank for the current clone
  window. Clone times are rounded up to a grid of ratio 2^(1/4), so a drifting average clone
  time does not recompute ranks at every call.
- **Seasonal plan**: per time-of-week slot (``SLOT_SECONDS``, 30 minutes, UTC), the ready count
  that reaches ``target_hit`` of the expected checkouts with the fewest idle VM-slots (see
  ``_plan``): a daily profile of ranks times a learned day-of-week factor, allocated by one
  threshold on checkouts served per VM-slot. Rebuilt at most once per slot, when the history
  changed since the last build.
- **Lookahead**: a VM asked for now is ready one clone time later, so the seasonal value at
  ``now`` is the largest plan over ``[now, now + C]``: the pool grows before a busy slot.
- **Recent demand**: the largest rank seen in the last ``RECENT_SECONDS`` (an hour). The target
  is never below it, so an unseen burst or a step up is followed within one clone window (the
  ranks of the new checkouts are the new demand), and it is forgotten an hour after it stopped.
- **Margin from its own misses**: a plan fitted to the past misses on traffic it has not seen
  (new ranks, a busier week). The model scores each checkout against the value it last gave
  (a miss: its rank was above it) over the last ``MARGIN_SECONDS`` (a week), from
  ``MARGIN_AFTER`` (a day) after its first checkout on, drawn toward the
  asked-for miss ratio by ``MARGIN_PRIOR`` checkouts' worth of evidence. When it misses more
  than asked, the plan is fitted to a smaller miss budget, in proportion (the budget times
  asked over measured), at most ``MARGIN_FLOOR`` of the asked-for budget; never a larger one.

What a caller may rely on: ``target`` is deterministic given the observations and calls; it is
0 with no history; it never goes below the recent-demand term; state is bounded by
``CAPACITY`` instants plus one plan of ``7 · 86400 / SLOT_SECONDS`` integers (about 240 KB at
most: two arrays of ``CAPACITY`` entries); ``target`` costs O(1) amortised (one plan build, linear
in the history, per slot at most). Not promised: any particular value on history shorter than
a day, or time-of-day cycles that follow a local time zone (slots are UTC: a daily cycle that
follows a DST change is relearned within the history).
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Self

from vmpooler.actors.sizing._plan import build_plan, week_slot

__all__ = [
    "CAPACITY",
    "HISTORY_SECONDS",
    "MARGIN_AFTER",
    "MARGIN_FLOOR",
    "MARGIN_PRIOR",
    "MARGIN_SECONDS",
    "RECENT_SECONDS",
    "SLOT_SECONDS",
    "DemandForecast",
    "Forecast",
    "clone_window",
    "latest_rank",
    "plan_ahead",
    "rerank",
]

SLOT_SECONDS = 1800.0
HISTORY_SECONDS = 28 * 86400.0
CAPACITY = 20_000
RECENT_SECONDS = 3600.0
MARGIN_SECONDS = 7 * 86400.0
MARGIN_PRIOR = 200.0
MARGIN_FLOOR = 1 / 16
MARGIN_AFTER = 86400.0
_MARGIN_STEP = 1.25  # the plan is refitted when the miss budget moves by this factor
_GRID_STEPS = 4  # clone windows are rounded up to powers of 2^(1/4)


@dataclass(frozen=True, slots=True)
class Forecast:
    """How many ready VMs to hold now (``value``) and why: ``basis`` is ``"seasonal"`` (the
    learned plan, looking one clone time ahead), ``"recent"`` (the largest rank of the last
    hour) or ``"none"`` (no demand known); both terms are given, with the clone window used
    and the warm-hit ratio the plan was fitted to (``plan_target``: the asked-for one, or
    higher after misses)."""

    value: int
    basis: str
    seasonal: int
    recent: int
    window: float
    plan_target: float = 0.0


def clone_window(clone_time: float) -> float:
    """The clone window used for ranks: ``clone_time`` rounded up to a power of 2^(1/4)
    (at least 1 s)."""
    exponent = math.ceil(_GRID_STEPS * math.log2(max(clone_time, 1.0)) - 1e-9)
    return float(2.0 ** (exponent / _GRID_STEPS))


class DemandForecast:
    """The demand model of one pool. Not thread-safe: one owner calls ``observe`` and
    ``target`` (the pool actor does, from its mailbox)."""

    def __init__(self, target_hit: float, *, clone_time: float = 120.0) -> None:
        if not 0.0 < target_hit < 1.0:
            raise ValueError(f"target_hit must be in (0, 1), got {target_hit!r}")
        self.target_hit = target_hit
        self._window = clone_window(clone_time)
        self._times = array("d")
        self._ranks = array("l")
        self._begin: float | None = None
        # (instant, rank) with decreasing ranks: the last hour's largest rank at the front.
        self._recent: deque[tuple[float, int]] = deque()
        self._plan: list[int] = []
        self._plan_slot = -1
        self._plan_target = target_hit
        self._dirty = True
        # (instant, missed) of the checkouts of the last MARGIN_SECONDS, scored against the
        # value the model last gave (``_held``)
        self._outcomes: deque[tuple[float, bool]] = deque()
        self._misses = 0
        self._held = 0

    @classmethod
    def from_history(cls, times: Iterable[float], *, now: float, target_hit: float,
                     clone_time: float = 120.0, **options: Any) -> Self:
        """A model that observed ``times`` (any order; instants after ``now`` are ignored);
        ``options`` go to the constructor of a subclass (``TierForecast``'s)."""
        model = cls(target_hit, clone_time=clone_time, **options)
        for t in sorted(t for t in times if t <= now):
            model.observe(t)
        return model

    @property
    def size(self) -> int:
        """How many checkout instants the model keeps (at most ``CAPACITY``)."""
        return len(self._times)

    def observe(self, t: float) -> None:
        """Record one checkout at ``t`` (epoch seconds). Instants come in time order; one
        earlier than the last is recorded at the last instant."""
        times = self._times
        if times and t < times[-1]:
            t = times[-1]
        if self._begin is None:
            self._begin = t
        low = bisect.bisect_left(times, t - self._window)
        rank = len(times) - low + 1
        times.append(t)
        self._ranks.append(rank)
        if t >= self._begin + MARGIN_AFTER:  # misses while it knows nothing are not its plan's
            missed = self._missed(rank)
            self._outcomes.append((t, missed))
            self._misses += missed
        recent = self._recent
        while recent and recent[-1][1] <= rank:
            recent.pop()
        recent.append((t, rank))
        self._dirty = True
        if len(times) > CAPACITY + CAPACITY // 8:
            self._drop(len(times) - CAPACITY)

    def _missed(self, rank: int) -> bool:
        """Whether the checkout just observed, of ``rank``, missed the value last given."""
        return rank > self._held

    def target(self, now: float, clone_time: float) -> Forecast:
        """Ready VMs to hold at ``now`` for the pool's current ``clone_time`` (seconds)."""
        window = clone_window(clone_time)
        if window != self._window:
            self._rerank(window)
        self._expire(now)
        latest = latest_rank(self._recent, now)
        slot = week_slot(now, SLOT_SECONDS)
        wanted = self.plan_target(now)
        fitted, budget = 1.0 - self._plan_target, 1.0 - wanted  # miss budgets
        moved = max(fitted, budget) / min(fitted, budget) >= _MARGIN_STEP
        if (slot != self._plan_slot and (self._dirty or not self._plan)) or moved:
            begin = max(self._begin or now, now - HISTORY_SECONDS)
            self._plan_target = wanted
            self._plan = build_plan(self._times, self._ranks, begin, now,
                                    self._plan_target, SLOT_SECONDS)
            self._dirty = False
        self._plan_slot = slot
        seasonal = plan_ahead(self._plan, now, clone_time)
        value = max(seasonal, latest)
        self._held = value
        basis = "none" if value == 0 else "recent" if latest > seasonal else "seasonal"
        return Forecast(value, basis, seasonal, latest, window, self._plan_target)

    def plan_target(self, now: float) -> float:
        """The warm-hit ratio to fit the plan to at ``now``: the asked-for one, or higher
        when the checkouts of the last ``MARGIN_SECONDS`` missed more than asked (see the
        module docstring)."""
        outcomes = self._outcomes
        while outcomes and outcomes[0][0] < now - MARGIN_SECONDS:
            self._misses -= outcomes.popleft()[1]
        asked = 1.0 - self.target_hit
        measured = (self._misses + asked * MARGIN_PRIOR) / (len(outcomes) + MARGIN_PRIOR)
        if measured <= asked:
            return self.target_hit
        return 1.0 - asked * max(MARGIN_FLOOR, asked / measured)

    def _expire(self, now: float) -> None:
        times = self._times
        cut = bisect.bisect_left(times, now - HISTORY_SECONDS)
        if cut > len(times) // 8 or (cut and cut == len(times)):
            self._drop(cut)

    def _drop(self, count: int) -> None:
        del self._times[:count]
        del self._ranks[:count]
        if self._times:
            self._begin = max(self._begin or self._times[0], self._times[0])
        self._dirty = True

    def _rerank(self, window: float) -> None:
        """Recompute every kept rank for a new clone window (linear, two pointers)."""
        self._window = window
        self._recent = rerank(self._times, self._ranks, window)
        self._dirty = True


def rerank(times: array, ranks: array, window: float) -> deque[tuple[float, int]]:
    """Recompute ``ranks`` in place for ``window`` (each instant's count of ``times`` in
    ``[t - window, t]``, linear, two pointers); returns the deque of ``(instant, rank)``
    with decreasing ranks that the recent-demand term reads (:func:`latest_rank`)."""
    low = 0
    for i, t in enumerate(times):
        while times[low] < t - window:
            low += 1
        ranks[i] = i - low + 1
    recent: deque[tuple[float, int]] = deque()
    for t, rank in zip(times, ranks, strict=True):
        while recent and recent[-1][1] <= rank:
            recent.pop()
        recent.append((t, rank))
    return recent


def latest_rank(recent: deque[tuple[float, int]], now: float) -> int:
    """The largest rank of the last ``RECENT_SECONDS`` (older entries are dropped)."""
    while recent and recent[0][0] < now - RECENT_SECONDS:
        recent.popleft()
    return recent[0][1] if recent else 0


def plan_ahead(plan: list[int], now: float, horizon: float) -> int:
    """The largest of a weekly ``plan`` over the slots of ``[now, now + horizon]`` (0 for
    no plan)."""
    if not plan:
        return 0
    first = week_slot(now, SLOT_SECONDS)
    steps = int((now % SLOT_SECONDS + horizon) // SLOT_SECONDS)
    count = len(plan)
    return max(plan[(first + k) % count] for k in range(min(steps, count - 1) + 1))
