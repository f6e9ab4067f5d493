"""One replay: the real pool actors on a fake clock, fed a trace of checkouts.

How time moves: the simulated clock (a :class:`FakeClock`, the actors' clock and scheduler)
jumps from one event to the next, never in fixed steps. The next event is the soonest of:
the next checkout or return of the trace, the next timer due in the clock
(:meth:`FakeClock.next_due`), the end of a clone in progress
(:meth:`SimulatedSleep.next_wake`: a clone, suspend or resume in progress). After each
jump the driver waits until the actors are idle (:meth:`PoolerSystem.wait_idle`, provider
calls waiting for simulated time excepted), reads the ready and standby counts (idle and
standby VM-time are their integrals, constant between events), hands VMs that became ready
to the missed checkouts, in arrival order, and goes on.

A checkout is the API's: :meth:`CheckoutStore.checkout` (one script), then the pool is told
(``PoolChanged``); a return is DELETE /vm's :meth:`CheckoutStore.return_vm`. A checkout
that finds no ready VM is a miss: like a client falling back to on-demand, it files an
on-demand request for one VM of its pool, and takes whichever comes first, a VM becoming
ready in its pool(s) (missed checkouts in arrival order) or its own request's VM (that one
when both come at once); a request no longer needed is deleted (its VM destroyed). Its wait
runs from its arrival until then.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis

from vmpooler.actors.config import Config
from vmpooler.actors.metrics.backends import NullMetrics
from vmpooler.actors.placement.weights import draw_first
from vmpooler.actors.pool.hostnames import HostnameGenerator
from vmpooler.actors.replay.configuration import ReplaySetup
from vmpooler.actors.replay.progress import NoProgress, ProgressListener
from vmpooler.actors.replay.provider import (
    CALL,
    CLONE,
    SUSPEND_TIME_S,
    ReplayProvider,
    SimulatedSleep,
)
from vmpooler.actors.replay.report import STANDBY_COST, PoolStats, RunResult
from vmpooler.actors.replay.series import SeriesRecorder
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.sizing.trace import Checkout
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.checkout_store import CheckoutStore
from vmpooler.actors.storage.demand_store import DemandStore
from vmpooler.actors.system import PoolerSystem
from vmpooler.providers.base import ProviderContext

__all__ = ["RESUME_TIME_S", "replay", "warmup_s"]

RESUME_TIME_S = 15.0
"""The default simulated seconds a resume takes (``--resume-time``)."""


def _standby_count(config: Config, *, auto_at_most: bool = False) -> int:
    """The standby VMs the pools keep at first (a ``standby: auto`` pool none: its target
    is the demand sizer's, from 0), or with ``auto_at_most`` at most (such a pool its
    ``size_max``: running and standby VMs together never above it)."""
    total = 0
    for pool in config.pools:
        if pool.standby is not None and pool.standby.count is not None:
            total += pool.standby.count
        elif pool.standby is not None and auto_at_most and pool.demand is not None:
            total += pool.demand.size_max
    return total


def warmup_s(config: Config, clone_time: float) -> float:
    """Simulated seconds the actors run before the first checkout, for the pools to fill
    both tiers (rounds of ``task_limit`` clones, one more clone time, a suspend and a minute;
    at least 5 minutes). Nothing is measured during them."""
    standby = _standby_count(config)
    total = sum(p.size for p in config.pools) + standby
    rounds = math.ceil(total / max(1, config.settings.task_limit)) + 1
    return max(300.0, rounds * clone_time + (SUSPEND_TIME_S if standby else 0.0) + 60.0)


OVERTIME_S = 6 * 3600.0
"""How long past the end of the trace the replay goes on for missed checkouts still waiting."""


@dataclass(slots=True)
class _Waiter:
    """A missed checkout waiting for a VM."""

    arrived: float
    units: tuple[str, ...]
    duration: float
    request_id: str | None = None


@dataclass(order=True, slots=True)
class _Event:
    t: float
    seq: int
    checkout: Checkout | None = field(compare=False, default=None)
    returned: tuple[str, str] | None = field(compare=False, default=None)  # (pool, vm)


class _Replay:
    def __init__(self, setup: ReplaySetup, trace: Sequence[Checkout], *, policy: str,
                 clone_time: float, resume_time: float, standby_cost: float,
                 client: redis.Redis, end: float, seed: int,
                 progress: ProgressListener) -> None:
        self.setup, self.policy, self.end = setup, policy, end
        self.progress = progress
        self.clone_time, self.standby_cost = clone_time, standby_cost
        self.clone_ended, self.poll_requests, self.polled_at = False, False, 0.0
        self.start = trace[0].t if trace else end
        self.warmup = warmup_s(setup.config, clone_time)
        self.clock = FakeClock(start=self.start - self.warmup)
        self.sleeper = SimulatedSleep(self.clock.monotonic)
        config = setup.config
        # a call worker for every standby VM besides the usual four: the simulated
        # hypervisor suspends and resumes them all at once, none queued behind another
        context = ProviderContext(
            name="dummy",
            settings={"connection_pool_size": 4 + _standby_count(config, auto_at_most=True)},
            pools={p.name: dict(p.raw) for p in config.pools},
            global_settings={}, dns_domains={p.name: None for p in config.pools})
        self.provider = ReplayProvider(context, clone_time=clone_time, sleeper=self.sleeper,
                                       resume_time=resume_time)
        self.client = client
        self.store = CheckoutStore(client)
        self.rng = random.Random(seed)
        self.seq = itertools.count()
        self.events: list[_Event] = [_Event(c.t, next(self.seq), checkout=c) for c in trace]
        heapq.heapify(self.events)
        self.waiters: list[_Waiter] = []
        self.stats = {p.name: PoolStats() for p in config.pools}
        self.ready = {p.name: 0 for p in config.pools}
        self.standby = {p.name: 0 for p in config.pools}
        self.sampled_at = self.clock.now()
        self.series = SeriesRecorder(list(self.stats), self.start, end)
        self.demand_pools = [p.name for p in config.pools if p.demand is not None]
        self.system = PoolerSystem.start(
            config, redis_client=client, clock=self.clock, scheduler=self.clock,
            metrics=NullMetrics(), providers={"dummy": self.provider},
            hostnames=HostnameGenerator(rng=random.Random(seed)), resolver=lambda _f: False,
            task_interval=3600.0, consume_commands=False)

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> RunResult:
        wall = time.monotonic()
        self.progress.begin(self.policy, self.clock.now(), self.end)
        try:
            self._loop()
            self.progress.done()
        finally:
            self.sleeper.stop()
            self.system.stop()
        for name, count in self.provider.clones.items():
            if name in self.stats:
                self.stats[name].clones = count
        for name, count in self.provider.resumes.items():
            if name in self.stats:
                self.stats[name].resumes = count
        unserved = len(self.waiters)
        for waiter in self.waiters:  # counted up to when the replay stopped
            self.stats[waiter.units[0]].waits.append(self.clock.now() - waiter.arrived)
        return RunResult(self.policy, self.stats, simulated_s=max(0.0, self.end - self.start),
                         wall_s=time.monotonic() - wall, unserved=unserved,
                         warmup_s=self.warmup, standby_cost=self.standby_cost,
                         series=self.series)

    def _loop(self) -> None:
        stop_at = self.end + OVERTIME_S
        while True:
            self.system.wait_idle(parked=lambda: self.sleeper.asleep(CLONE),
                                  parked_calls=lambda: self.sleeper.asleep(CALL))
            now = self.clock.now()
            self.progress.at(now)
            self._sample(now)
            if self._serve_waiters(now) or self._due_events(now):
                continue
            if (now >= self.end and not self.waiters
                    and (not self.events or self.events[0].t > self.end)):
                return
            if now >= stop_at:
                return
            steps = [d for d in (self.clock.next_due(), self.sleeper.next_wake()) if d is not None]
            if self.events:
                steps.append(max(0.0, self.events[0].t - now))
            if now < self.end:
                steps.append(self.end - now)  # the idle time is measured up to the end
            step = min([*steps, stop_at - now])
            wake = self.sleeper.next_wake()
            self.clock.advance(step)
            self.sleeper.wake()
            if wake is not None and wake <= step:
                self.clone_ended = True  # a request's VM may come with it

    def _sample(self, now: float) -> None:
        """Add the idle and standby VM-time since the last sample (clipped to the measured
        window), then read the ready and standby counts (one round trip)."""
        low, high = max(self.sampled_at, self.start), min(now, self.end)
        if high > low:
            for name, count in self.ready.items():
                self.stats[name].idle_vm_seconds += count * (high - low)
                self.stats[name].standby_vm_seconds += self.standby[name] * (high - low)
        self.series.hold(self.sampled_at, now, self.ready)
        self.sampled_at = now
        sizes = self.store.tier_sizes(list(self.ready))
        self.ready = {pool: ready for pool, (ready, _standby) in sizes.items()}
        self.standby = {pool: standby for pool, (_ready, standby) in sizes.items()}
        if self.demand_pools and self.series.wants_target(now):  # once an interval
            published = DemandStore(self.client).published(self.demand_pools)
            self.series.targets(now, {pool: int(fields["target"])
                                      for pool, fields in published.items()
                                      if fields.get("target", "").isdigit()})

    def _due_events(self, now: float) -> bool:
        handled = False
        while self.events and self.events[0].t <= now:
            event = heapq.heappop(self.events)
            handled = True
            if event.checkout is not None:
                self._arrive(event.checkout, now)
            elif event.returned is not None:
                pool, vm = event.returned
                self.store.return_vm(pool, vm)
                self.system.notify(pool, "vm returned")
        return handled

    # -- checkouts ------------------------------------------------------------------------
    def _units(self, platform: str) -> tuple[str, ...]:
        pools = list(self.setup.candidates[platform])
        if len(pools) > 1:  # an alias: vmpooler's draw, the others as fallbacks
            pools = draw_first(self.setup.config, self.rng, pools)
        return tuple(pools)

    def _take(self, units: tuple[str, ...], now: float, *,
              logged: bool = True) -> tuple[str, str] | None:
        """The API's checkout; ``logged``: in the pools' checkout logs (a missed checkout's
        later VM is not: its miss was)."""
        outcome = self.store.checkout([units], now=timefmt.format_epoch(now),
                                      epoch=now if logged else None)
        if not outcome.ok:
            return None
        taken = outcome.taken[0]
        self.system.notify(taken.pool, "checkout")
        return taken.pool, taken.vm

    def _arrive(self, checkout: Checkout, now: float) -> None:
        units = self._units(checkout.pool)
        duration = checkout.duration_s or 0.0
        # as the API does: a ready VM goes to whoever asks, and every checkout is in the log
        # demand sizing learns from (earlier misses wait on their own requests meanwhile)
        taken = self._take(units, now)
        measured = checkout.t <= self.end
        if taken is not None:
            if measured:
                self.stats[taken[0]].checkouts += 1
                self.stats[taken[0]].hits += 1
                self.series.checkout(now, taken[0], hit=True)
            self._hold(taken, now + duration)
            return
        if not measured:
            return
        self.series.checkout(now, units[0], hit=False)
        waiter = _Waiter(now, units, duration)
        waiter.request_id = self.system.request_ondemand({units[0]: 1})
        self.waiters.append(waiter)

    def _hold(self, taken: tuple[str, str], until: float) -> None:
        heapq.heappush(self.events, _Event(until, next(self.seq), returned=taken))

    def _serve_waiters(self, now: float) -> bool:
        # The requests' records are read only when a clone ended since the last read (a
        # request's VM comes with the end of its clone), and once a simulated minute.
        self.poll_requests = self.clone_ended or now >= self.polled_at + 60
        if self.poll_requests:
            self.clone_ended, self.polled_at = False, now
        served = False
        blocked: set[str] = set()  # pools found empty in this pass
        for waiter in list(self.waiters):
            # its own request's VM first: one that came at the same moment as a ready VM
            # leaves that one ready for the next checkout (a standby VM resumed for the
            # request comes with the ready refill's)
            taken = self._delivered(waiter, now)
            if (taken is None and not blocked.issuperset(waiter.units)
                    and any(self.ready[u] for u in waiter.units)):
                taken = self._take(waiter.units, now, logged=False)
                if taken is None:
                    blocked.update(waiter.units)
                elif waiter.request_id is not None:
                    self.system.delete_ondemand(waiter.request_id)
            if taken is None:
                continue
            self.waiters.remove(waiter)
            stats = self.stats[taken[0]]
            stats.checkouts += 1
            stats.waits.append(now - waiter.arrived)
            self._hold(taken, now + waiter.duration)
            served = True
        return served

    def _delivered(self, waiter: _Waiter, now: float) -> tuple[str, str] | None:
        if waiter.request_id is None or not self.poll_requests:
            return None
        record = self.system.ondemand_request(waiter.request_id)
        if record is None or record.status != "ready":
            return None
        for (_alias, pool), vms in record.delivered.items():
            for vm in vms:
                return pool, vm
        return None


def replay(setup: ReplaySetup, trace: Sequence[Checkout], *, policy: str, clone_time: float,
           client: redis.Redis, end: float | None = None, seed: int = 1,
           resume_time: float = RESUME_TIME_S, standby_cost: float = STANDBY_COST,
           progress: ProgressListener | None = None) -> RunResult:
    """Replay ``trace`` (sorted by time) on the actors of ``setup.config`` under ``policy``,
    on the redis-server of ``client``, which must be empty (it is left dirty). Checkouts up
    to ``end`` (default: the last one's time) are measured; see the module docstring.
    Clones take ``clone_time`` simulated seconds, resumes ``resume_time``; a standby VM-hour
    costs ``standby_cost`` of a running one in the result's ``cost_vm_hours``. ``progress``
    is told the simulated time as the run goes (default: nobody); the result's ``series``
    holds its time series (:mod:`.series`)."""
    last = end if end is not None else (trace[-1].t if trace else 0.0)
    return _Replay(setup, trace, policy=policy, clone_time=clone_time,
                   resume_time=resume_time, standby_cost=standby_cost, client=client,
                   end=last, seed=seed, progress=progress or NoProgress()).run()
