"""A fast discrete-event model of one pool, for ``bench/sizing_frontier.py`` and its test.

The pool holds ready VMs. A checkout takes a ready VM if there is one (a warm hit), else it
waits for the next clone to finish (a miss). The pool keeps ``ready + cloning - waiting`` at its
target: a checkout lowers that level by one, so each checkout (hit or miss) starts a
replacement clone, which takes ``clone_time``; a higher target starts clones at once, a lower
one retires idle ready VMs (oldest first: the count is what matters here). The cost is the
idle VM-hours, the integral of the ready count. The target is a fixed size, or a sizer asked
at every checkout, every clone finished and every ``tick`` seconds in between.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["PoolRun", "run_demand", "run_fixed", "smallest_fixed"]


@dataclass(frozen=True, slots=True)
class PoolRun:
    """The outcome of one replay: checkouts, warm hits, idle VM-hours, clones started and the
    mean wait of a miss (seconds)."""

    checkouts: int
    hits: int
    idle_vm_hours: float
    clones: int
    mean_miss_wait: float

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.checkouts if self.checkouts else 1.0


def run_fixed(times: Sequence[float], size: int, clone_time: float,
              end: float | None = None) -> PoolRun:
    """Replay sorted checkout ``times`` on a pool of fixed ``size``, full at the first one,
    until ``end`` (default: the last checkout)."""
    if not times:
        return PoolRun(0, 0, 0.0, 0, 0.0)
    ready, hits, idle, waits = size, 0, 0.0, 0.0
    waiting: list[float] = []  # arrival instants of waiting checkouts, in order
    head = 0
    pending: list[float] = []
    last = times[0]

    def clones_done(until: float) -> None:
        """Finish the clones due by ``until``: each serves the oldest waiting checkout, else
        adds a ready VM."""
        nonlocal ready, idle, waits, head, last
        while pending and pending[0] <= until:
            done = heapq.heappop(pending)
            idle += ready * (done - last)
            last = done
            if head < len(waiting):
                waits += done - waiting[head]
                head += 1
            else:
                ready += 1

    for t in times:
        clones_done(t)
        idle += ready * (t - last)
        last = t
        if ready > 0:
            ready -= 1
            hits += 1
        else:
            waiting.append(t)
        heapq.heappush(pending, t + clone_time)
    stop = times[-1] if end is None else end
    clones_done(stop)
    idle += ready * max(0.0, stop - last)
    return PoolRun(len(times), hits, idle / 3600.0, len(times), waits / head if head else 0.0)


def smallest_fixed(times: Sequence[float], clone_time: float, target_hit: float,
                   end: float | None = None) -> tuple[int, PoolRun]:
    """The smallest fixed size whose replay reaches ``target_hit``, and that replay (hits grow
    with the size, so a binary search finds it)."""
    low, high = 0, 1
    while run_fixed(times, high, clone_time, end).hit_ratio < target_hit:
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        if run_fixed(times, mid, clone_time, end).hit_ratio >= target_hit:
            high = mid
        else:
            low = mid
    if run_fixed(times, low, clone_time, end).hit_ratio >= target_hit:
        high = low
    return high, run_fixed(times, high, clone_time, end)


def run_demand(times: Sequence[float], clone_time: float, target: Callable[[float], int],
               observe: Callable[[float], None], *, start: float | None = None,
               end: float | None = None, tick: float = 60.0,
               measure_from: float | None = None) -> PoolRun:
    """Replay sorted checkout ``times`` with a target asked of ``target(now)``;
    ``observe(t)`` is told each checkout after it was served (or not). The pool
    starts at its target at ``start`` (default: the first checkout) and the replay ends at
    ``end`` (default: the last one); only what happens from ``measure_from`` on is counted
    (default: everything)."""
    if not times:
        return PoolRun(0, 0, 0.0, 0, 0.0)
    now = times[0] if start is None else start
    stop = times[-1] if end is None else end
    ready = max(0, target(now))
    hits, idle, waits, clones, served = 0, 0.0, 0.0, 0, 0
    counted = 0  # checkouts counted
    origin = now if measure_from is None else measure_from
    waiting: list[float] = []
    pending: list[float] = []
    next_tick = now + tick
    index, count = 0, len(times)
    while True:
        upcoming = times[index] if index < count else float("inf")
        done = pending[0] if pending else float("inf")
        moment = min(upcoming, done, next_tick)
        if moment > stop and index >= count:
            idle += ready * max(0.0, stop - max(now, origin))
            break
        idle += ready * max(0.0, moment - max(now, origin))
        now = moment
        if done == moment:
            heapq.heappop(pending)
            if served < len(waiting):
                if waiting[served] >= origin:
                    waits += now - waiting[served]
                served += 1
            else:
                ready += 1
        elif upcoming == moment:
            index += 1
            measured = now >= origin
            counted += measured
            hit = ready > 0
            if hit:
                ready -= 1
                hits += measured
            else:
                waiting.append(now)
            observe(now)
        else:
            next_tick += tick
        size = target(now)
        level = ready + len(pending) - (len(waiting) - served)
        if level < size:
            for _ in range(size - level):
                heapq.heappush(pending, now + clone_time)
            clones += (size - level) if now >= origin else 0
        elif level > size and ready:
            ready -= min(ready, level - size)
    missed = sum(1 for t in waiting if t >= origin)
    return PoolRun(counted, hits, idle / 3600.0, clones, waits / missed if missed else 0.0)
