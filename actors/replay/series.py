"""The time series a replay records for its page (``--report``), per pool and per interval.

The measured window ``[start, end)`` is cut into intervals of one length
(:func:`interval_for`: the shortest of :data:`INTERVALS` that gives at most
:data:`MAX_POINTS` of them, so a replay of weeks stays a few hundred points per series; the
last interval may be shorter). For each pool and interval a :class:`PoolSeries` holds:

* ``checkouts``: checkouts that arrived in it, asking for the pool (an alias's: the pool drawn
  first), and ``misses``: those of them that found no ready VM;
* ``ready_min``, ``ready_max``: the fewest and most ready VMs held in it for any time;
  ``ready_mean``: their time-weighted mean (the ready count is constant between two of the
  replay's samples, so these are exact, not sampled);
* ``target``: the pool's demand target as published in it (the first read there), None
  where demand sizing published none.

Nothing here reads a clock or Redis: the replay hands in what it saw. Not thread-safe (the
replay's loop is its only user).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["INTERVALS", "MAX_POINTS", "PoolSeries", "SeriesRecorder", "interval_for"]

INTERVALS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
"""The interval lengths a series may use, seconds."""

MAX_POINTS = 400
"""The most intervals a series has (unless the window is longer than 400 days of 1 day)."""


def interval_for(span_s: float) -> int:
    """The shortest of :data:`INTERVALS` cutting ``span_s`` seconds into at most
    :data:`MAX_POINTS` intervals (the longest when none does)."""
    for interval in INTERVALS:
        if span_s <= interval * MAX_POINTS:
            return interval
    return INTERVALS[-1]


@dataclass(slots=True)
class PoolSeries:
    """One pool's series; every list has one entry per interval (see the module docstring)."""

    checkouts: list[int]
    misses: list[int]
    ready_min: list[int | None]
    """None: no time of the interval was observed (only before the first sample)."""
    ready_max: list[int | None]
    ready_seconds: list[float]
    """The integral of the ready count over the interval, VM-seconds."""
    target: list[int | None]

    @classmethod
    def empty(cls, n: int) -> PoolSeries:
        """``n`` intervals with nothing recorded."""
        return cls([0] * n, [0] * n, [None] * n, [None] * n, [0.0] * n, [None] * n)


@dataclass(slots=True)
class SeriesRecorder:
    """Records the series of ``pools`` over ``[start, end)`` in intervals of ``interval``
    seconds (default: :func:`interval_for` the window)."""

    pools: Sequence[str]
    start: float
    end: float
    interval: float = 0.0
    series: dict[str, PoolSeries] = field(init=False)
    _target_read: list[bool] = field(init=False)

    def __post_init__(self) -> None:
        self.end = max(self.end, self.start)
        if self.interval <= 0:
            self.interval = interval_for(self.end - self.start)
        n = max(1, math.ceil((self.end - self.start) / self.interval))
        self.series = {pool: PoolSeries.empty(n) for pool in self.pools}
        self._target_read = [False] * n

    @property
    def count(self) -> int:
        """How many intervals the window has."""
        return len(self._target_read)

    def bounds(self, i: int) -> tuple[float, float]:
        """Interval ``i``'s ``[from, to)`` in epoch seconds (the last one ends at ``end``)."""
        low = self.start + i * self.interval
        return low, min(low + self.interval, self.end)

    def index(self, t: float) -> int | None:
        """The interval holding ``t`` (the last one for ``end`` itself), or None outside the
        window."""
        if t == self.end > self.start:
            return self.count - 1
        if not self.start <= t < self.end:
            return None
        return min(self.count - 1, int((t - self.start) // self.interval))

    def hold(self, since: float, until: float, ready: Mapping[str, int]) -> None:
        """The pools held ``ready`` VMs from ``since`` to ``until`` (clipped to the window;
        nothing when that is empty). Pools not in ``ready`` are left alone."""
        low, high = max(since, self.start), min(until, self.end)
        if high <= low:
            return
        first = self.index(low)
        last = self.index(math.nextafter(high, -math.inf))
        if first is None or last is None:
            return
        for i in range(first, last + 1):
            a, b = self.bounds(i)
            span = min(b, high) - max(a, low)
            if span <= 0:
                continue
            for pool, count in ready.items():
                series = self.series.get(pool)
                if series is None:
                    continue
                series.ready_seconds[i] += count * span
                low_seen, high_seen = series.ready_min[i], series.ready_max[i]
                series.ready_min[i] = count if low_seen is None else min(low_seen, count)
                series.ready_max[i] = count if high_seen is None else max(high_seen, count)

    def checkout(self, t: float, pool: str, *, hit: bool) -> None:
        """A checkout asking for ``pool`` arrived at ``t``; ``hit``: it found a ready VM."""
        i = self.index(t)
        series = self.series.get(pool)
        if i is None or series is None:
            return
        series.checkouts[i] += 1
        if not hit:
            series.misses[i] += 1

    def wants_target(self, t: float) -> bool:
        """Whether no target was recorded yet for the interval holding ``t`` (read the
        targets then, once an interval)."""
        i = self.index(t)
        return i is not None and not self._target_read[i]

    def targets(self, t: float, targets: Mapping[str, int]) -> None:
        """The pools' demand targets as published at ``t`` (pools without one: absent)."""
        i = self.index(t)
        if i is None:
            return
        self._target_read[i] = True
        for pool, target in targets.items():
            series = self.series.get(pool)
            if series is not None and series.target[i] is None:
                series.target[i] = target

    def ready_mean(self, pool: str, i: int) -> float | None:
        """The time-weighted mean ready count of ``pool`` in interval ``i`` (None where
        nothing of it was observed)."""
        series = self.series[pool]
        if series.ready_min[i] is None:
            return None
        a, b = self.bounds(i)
        return series.ready_seconds[i] / (b - a) if b > a else float(series.ready_min[i] or 0)
