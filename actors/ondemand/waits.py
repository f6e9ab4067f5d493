"""Honest waits: each in-flight request's place in the clone queue and an estimate of when
it is ready, published for ``GET /ondemandvm/<id>`` (docs/fairness.md, "Honest waits").

:class:`WaitBoard` belongs to the on-demand manager (the single granter of clone slots) and
runs in its mailbox. It plays the manager's queue forward without changing it: the queued
VMs in the order :meth:`FairQueue.order` gives (so it follows whatever order the queue
implements), each taking the first of ``ondemand_clone_limit`` slots to come free for its
pool's clone time (:class:`~vmpooler.actors.storage.wait_store.PoolTimes`, published by the
pools' owners) and becoming ready its pool's ready time after it started. Slots in use free
when the clones this manager knows of end; the others (another manager's, grants not yet
answered) are taken to be spread evenly over one clone time. A request's position is the
number of VMs played before its first queued one (0 when it has none queued: every VM it
misses is cloning); its estimate is when its last VM, queued or cloning, is ready. The
requests expected to arrive meanwhile (:class:`~.arrivals.Arrivals`, learned from the
manager's :meth:`WaitBoard.arrived`) join the played queue when their time comes: a request's
later VMs wait for them too, one turn each.

Publication: only the entries that changed (a position, or an estimate by a second or more),
and those of requests no longer running deleted, in one round trip, at most once per
:data:`MIN_INTERVAL`. A Redis error leaves the board as it was (the next publication
writes the whole difference again).
"""

from __future__ import annotations

import copy
import heapq
import logging
import statistics
import time
from collections.abc import Iterable, Mapping

import redis

from vmpooler.actors.fairness.fair_share import Owner
from vmpooler.actors.ondemand.arrivals import Arrival, Arrivals
from vmpooler.actors.ondemand.clone_grants import CloneGrants, Want
from vmpooler.actors.runtime.clock import Clock
from vmpooler.actors.storage.wait_store import DEFAULT_TIME, PoolTimes, Wait, WaitStore

__all__ = ["MIN_INTERVAL", "WaitBoard", "estimate"]

log = logging.getLogger(__name__)

MIN_INTERVAL = 1.0
PLAY_SHARE = 10.0
"""A publication waits at least this many times as long as the last play took, so the play
never takes more than a tenth of the manager's time (0.8 s plays with 10,000 requests queued:
one every 8 s)."""
"""Seconds between two publications, at least."""

FORESEEN_PER_QUEUED = 4
"""Foreseen VMs played, at most, per VM queued (or per clone slot, whichever is more): at
80 % busy the requests arriving while a queue drains bring four VMs for each one queued
(rho / (1 - rho)); the bound keeps an overloaded queue's play finite."""

FORESEEN_MAX = 1000
"""Foreseen VMs played, at most, whatever the queue's length: a long queue's far future is
guessed from its arrivals as they come (the play is redone at every change), and the play's
cost stays within about twice that of the queue alone."""

_DEFAULT = PoolTimes(DEFAULT_TIME, DEFAULT_TIME)
_FORESEEN = "\0foreseen:"  # the key prefix of expected requests (no request id has a NUL)


def estimate(slots: CloneGrants, running: Iterable[str], times: Mapping[str, PoolTimes],
             in_use: int, *, now: float,
             arrivals: Iterable[Arrival] | None = None) -> dict[str, tuple[int, float]]:
    """``request -> (position, ready at)`` (monotonic seconds, like ``now``) for the
    ``running`` requests that have VMs queued or cloning; ``in_use``: on-demand clone slots
    taken (``tasks__ondemandclone``, every manager's). ``arrivals``: the requests expected
    to arrive meanwhile, soonest first (:meth:`Arrivals.expected`), each joining the queue
    when its time comes (at most :data:`FORESEEN_PER_QUEUED` VMs per VM queued, or per
    slot, and :data:`FORESEEN_MAX`, in all); a position counts queued VMs only. Trims
    ``slots.cloning`` of clones long over. O((queued + foreseen) x log) after a copy of the
    queue."""
    def of(pool: str) -> PoolTimes:
        return times.get(pool, _DEFAULT)

    limit = max(1, slots.clone_limit)
    known: list[float] = []  # when the clones this manager knows of free their slots
    for request_id in list(slots.cloning):
        kept = [(p, t) for p, t in slots.cloning[request_id] if t + 2 * of(p).ready > now]
        if kept:
            slots.cloning[request_id] = kept
        else:
            del slots.cloning[request_id]
        known.extend(end for p, t in kept if (end := t + of(p).clone) > now)
    busy = min(limit, max(0, in_use) + len(slots.granted))
    known.sort()
    ends = known[len(known) - busy:] if busy else []  # the earliest started are over
    unknown = busy - len(ends)
    spread = statistics.median(t.clone for t in times.values()) if times else _DEFAULT.clone
    ends.extend(now + spread * (i + 1) / (unknown + 1) for i in range(unknown))
    queued = len(slots.wants)
    ends.extend([now] * min(limit - busy, queued))
    heapq.heapify(ends)
    wanted = set(running)
    result: dict[str, tuple[int, float]] = {}
    queue = copy.deepcopy(slots.wants)  # played forward; the manager's queue is left alone
    coming = iter(arrivals if arrivals is not None else ())
    arrival = next(coming, None)
    room = min(FORESEEN_MAX, FORESEEN_PER_QUEUED * (queued + limit))  # the cost's bound
    index = 0  # real VMs played
    while index < queued:
        start = max(ends[0], now)
        while arrival is not None and arrival.at <= start and room > 0:
            queue.extend(f"{_FORESEEN}{arrival.at}:{room}",
                         [Want("", pool, arrival.at) for pool in arrival.pools], arrival.owner)
            room -= len(arrival.pools)
            arrival = next(coming, None)
        popped = queue.pop()
        if popped is None:
            break
        request_id, want = popped
        heapq.heapreplace(ends, start + of(want.pool).clone)
        if request_id.startswith(_FORESEEN):
            continue
        index += 1
        if request_id not in wanted:
            continue
        position, ready = result.get(request_id, (index - 1, now))
        result[request_id] = (position, max(ready, start + of(want.pool).ready))
    for request_id, started in slots.cloning.items():
        if request_id not in wanted:
            continue
        position, ready = result.get(request_id, (0, now))
        last = max(t + of(p).ready for p, t in started)
        result[request_id] = (position, max(ready, last))
    return result


class WaitBoard:
    """The waits of the requests one on-demand manager runs. Not thread-safe."""

    def __init__(self, *, slots: CloneGrants, store: WaitStore, clock: Clock) -> None:
        self.slots = slots
        self.store = store
        self.clock = clock
        self.published: dict[str, Wait] = {}
        self.last = float("-inf")  # monotonic time of the last publication
        self.dirty = False  # something changed since
        self.spacing = MIN_INTERVAL  # seconds between publications (longer for long plays)
        self.arrivals = Arrivals(start=clock.monotonic())

    def arrived(self, request_id: str, wants: tuple[tuple[str, str], ...],
                owner: Owner) -> None:
        """A request asked for clones (``(alias, pool)`` each): learned as an arrival
        (:meth:`Arrivals.arrived`) for the estimates to foresee its like."""
        self.arrivals.arrived(request_id, tuple(pool for _alias, pool in wants), owner,
                              at=self.clock.monotonic())

    def due_in(self) -> float:
        """Seconds until a publication is allowed (0: now)."""
        return max(0.0, self.last + self.spacing - self.clock.monotonic())

    def publish(self, running: Iterable[str], in_use: int) -> None:
        """Write the waits that changed since the last publication and delete those of
        requests no longer running. May raise ``redis.RedisError`` (nothing recorded)."""
        now_m, now_e = self.clock.monotonic(), self.clock.now()
        self.last, self.dirty = now_m, False
        running = set(running)
        self.arrivals.forget(running)
        started = time.perf_counter()  # the play's own cost, whatever the clock
        found = estimate(self.slots, running, self.store.times(), in_use, now=now_m,
                         arrivals=self.arrivals.expected(now=now_m))
        self.spacing = max(MIN_INTERVAL, PLAY_SHARE * (time.perf_counter() - started))
        current = {r: Wait(position, now_e + (ready - now_m), now_e)
                   for r, (position, ready) in found.items()}
        changed = {r: w for r, w in current.items()
                   if (old := self.published.get(r)) is None or old.position != w.position
                   or abs(old.ready_at - w.ready_at) >= 1.0}
        gone = [r for r in self.published if r not in current]
        try:
            self.store.publish_waits(changed, gone)
        except redis.RedisError:
            self.dirty = True
            raise
        for request_id in gone:
            del self.published[request_id]
        self.published.update(changed)
