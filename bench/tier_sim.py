"""A fast discrete-event model of one pool with a standby tier, for ``bench/standby_frontier.py``.

The two-tier version of ``bench/sizing_sim.py``. The pool holds ready VMs (running, idle) and
standby VMs (suspended); some are resuming (done ``resume_time`` after the resume) or cloning
(done ``clone_time`` after the clone). A checkout takes a ready VM if there is one (a warm
hit), else it waits (a miss; waiting checkouts are served in arrival order). With targets
``a`` running and ``s`` standby, after every event:

- ready VMs above ``a`` (the running level ``ready + resuming - waiting`` above it) are
  parked in standby while it holds fewer than ``s`` (at once);
- while the running level is below ``a`` and a standby VM is there, it is resumed;
- clones keep ``ready + resuming + standby + cloning - waiting`` at ``a + s``; above it, idle
  VMs are retired: standby above ``s``, then ready above ``a``, then (for clones on their
  way) standby before ready;
- a finished resume or clone serves the oldest waiting checkout, else adds a ready VM (which
  the step above parks in standby when the running level is already ``a``).

Costs: running VM-hours (the integral of the ready count: idle running VMs, as in the
single-tier model) and standby VM-hours (the integral of the standby count). With ``s = 0``
every replay is exactly the single-tier model's (``sizing_sim.run_fixed`` and
``run_demand``: same hits, VM-hours, clones and waits).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["TierRun", "cheapest_fixed", "run_demand", "run_fixed"]

INF = float("inf")


@dataclass(frozen=True, slots=True)
class TierRun:
    """The outcome of one replay: checkouts, warm hits, idle running and standby VM-hours,
    clones and resumes started, and the mean wait of a miss (seconds)."""

    checkouts: int
    hits: int
    running_vm_hours: float
    standby_vm_hours: float
    clones: int
    resumes: int
    mean_miss_wait: float

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.checkouts if self.checkouts else 1.0

    def cost(self, standby_cost: float) -> float:
        """Running VM-hours plus ``standby_cost`` times standby VM-hours."""
        return self.running_vm_hours + standby_cost * self.standby_vm_hours


@dataclass(slots=True)
class _Counts:
    checkouts: int = 0
    hits: int = 0
    running: float = 0.0  # VM-seconds
    standby: float = 0.0
    clones: int = 0
    resumes: int = 0
    waits: float = 0.0  # seconds waited by the counted misses that were served
    served: int = 0  # counted misses served
    missed: int = 0  # counted misses


def _replay(times: Sequence[float], clone_time: float, resume_time: float,
            target: Callable[[float], tuple[int, int]], observe: Callable[[float], None],
            start: float, stop: float, tick: float, origin: float) -> _Counts:
    """The event loop (see the module's docstring); counts what happens from ``origin`` on."""
    out = _Counts()
    now = start
    a, s = target(now)
    ready, standby = max(0, a), max(0, s)
    waiting: list[float] = []  # arrival instants of waiting checkouts, in order
    served = 0
    cloning: deque[float] = deque()  # finish instants: pushed in time order, so sorted
    resuming: deque[float] = deque()
    next_tick = now + tick
    index, count = 0, len(times)
    while True:
        upcoming = times[index] if index < count else INF
        cloned = cloning[0] if cloning else INF
        resumed = resuming[0] if resuming else INF
        moment = min(upcoming, cloned, resumed, next_tick)
        if moment > stop and index >= count:
            span = max(0.0, stop - max(now, origin))
            out.running += ready * span
            out.standby += standby * span
            break
        span = max(0.0, moment - max(now, origin))
        out.running += ready * span
        out.standby += standby * span
        now = moment
        if cloned == moment or resumed == moment:
            (cloning if cloned == moment else resuming).popleft()
            if served < len(waiting):
                if waiting[served] >= origin:
                    out.waits += now - waiting[served]
                    out.served += 1
                served += 1
            else:
                ready += 1
        elif upcoming == moment:
            index += 1
            measured = now >= origin
            out.checkouts += measured
            if ready > 0:
                ready -= 1
                out.hits += measured
            else:
                waiting.append(now)
                out.missed += measured
            observe(now)
        else:
            next_tick += tick
        a, s = target(now)
        running = ready + len(resuming) - (len(waiting) - served)
        park = min(ready, running - a, s - standby)
        if park > 0:
            ready, standby, running = ready - park, standby + park, running - park
        wake = min(standby, a - running)
        if wake > 0:
            standby -= wake
            running += wake
            resuming.extend([now + resume_time] * wake)
            out.resumes += wake if now >= origin else 0
        excess = running + standby + len(cloning) - (a + s)
        if excess < 0:
            cloning.extend([now + clone_time] * -excess)
            out.clones += -excess if now >= origin else 0
        elif excess > 0:
            drop = min(excess, max(0, standby - s))
            standby -= drop
            excess -= drop
            drop = min(excess, ready, max(0, running - a))
            ready -= drop
            excess -= drop
            drop = min(excess, standby)  # clones on their way refill what is retired here
            standby -= drop
            ready -= min(excess - drop, ready)
    return out


def run_fixed(times: Sequence[float], running: int, standby: int, clone_time: float,
              resume_time: float, end: float | None = None) -> TierRun:
    """Replay sorted checkout ``times`` on a pool of fixed ``running`` and ``standby`` VMs,
    full at the first checkout, until ``end`` (default: the last checkout). The mean miss
    wait is over the misses served by then (as ``sizing_sim.run_fixed``)."""
    if not times:
        return TierRun(0, 0, 0.0, 0.0, 0, 0, 0.0)
    stop = times[-1] if end is None else end
    c = _replay(times, clone_time, resume_time, lambda _now: (running, standby),
                lambda _t: None, times[0], stop, INF, times[0])
    return TierRun(c.checkouts, c.hits, c.running / 3600.0, c.standby / 3600.0, c.clones,
                   c.resumes, c.waits / c.served if c.served else 0.0)


def run_demand(times: Sequence[float], clone_time: float, resume_time: float,
               target: Callable[[float], tuple[int, int]],
               observe: Callable[[float], None], *, start: float | None = None,
               end: float | None = None, tick: float = 60.0,
               measure_from: float | None = None) -> TierRun:
    """Replay sorted checkout ``times`` with ``target(now)`` giving (running, standby);
    ``observe(t)`` is told each checkout after it was served (or not). The pool starts at
    its targets at ``start`` (default: the first checkout), the replay ends at ``end``
    (default: the last one), and only what happens from ``measure_from`` on is counted. The
    sizer is asked at every event and every ``tick`` seconds; the mean miss wait is over
    every counted miss (as ``sizing_sim.run_demand``)."""
    if not times:
        return TierRun(0, 0, 0.0, 0.0, 0, 0, 0.0)
    now = times[0] if start is None else start
    c = _replay(times, clone_time, resume_time, target, observe, now,
                times[-1] if end is None else end, tick,
                now if measure_from is None else measure_from)
    return TierRun(c.checkouts, c.hits, c.running / 3600.0, c.standby / 3600.0, c.clones,
                   c.resumes, c.waits / c.missed if c.missed else 0.0)


def cheapest_fixed(times: Sequence[float], clone_time: float, resume_time: float,
                   target_hit: float, standby_cost: float, largest: int,
                   end: float | None = None) -> tuple[int, int, TierRun]:
    """The fixed pair (running, standby) reaching ``target_hit`` at the least held cost
    ``running + standby_cost * standby``, and its replay. ``largest`` is a single-tier size
    reaching the target (the pair ``(largest, 0)``); for each running count below it the
    fewest standby VMs reaching the target are found by binary search (the hit ratio grows
    with the standby VMs at a fixed running count), among pairs costing less than
    ``largest``. Ties go to fewer standby VMs."""
    best = (largest, 0)
    best_cost = float(largest)
    for a in range(largest):
        if a >= best_cost:
            break
        high = int((best_cost - a) / standby_cost)  # cheaper than the best so far
        if a + standby_cost * high >= best_cost:
            high -= 1
        if high < 0 or run_fixed(times, a, high, clone_time, resume_time,
                                 end).hit_ratio < target_hit:
            continue
        low = -1  # reaches below ``high``: high is the fewest found so far
        while high - low > 1:
            mid = (low + high) // 2
            if run_fixed(times, a, mid, clone_time, resume_time, end).hit_ratio >= target_hit:
                high = mid
            else:
                low = mid
        if a + standby_cost * high < best_cost:
            best, best_cost = (a, high), a + standby_cost * high
    a, s = best
    return a, s, run_fixed(times, a, s, clone_time, resume_time, end)
