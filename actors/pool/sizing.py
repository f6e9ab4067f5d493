"""Demand sizing of one pool (``sizing: demand``, docs/sizing.md): the size its upkeep keeps.

:class:`PoolSizing` feeds the pool's checkout log (written by the API's checkout script in
Redis, so it survives restarts and is shared by every manager: the pool's owner reads it)
and its recent clone times into a :class:`~vmpooler.actors.sizing.demand_sizer.DemandSizer`, and
publishes the target and why for ``/status`` (``vmpooler__sizing__<pool>``), with the
metrics ``sizing.target``, ``sizing.warm_hit`` and ``sizing.idle`` and a log line when the
target moves by more than :data:`LOGGED_STEP` VMs or changes reason.

The first :meth:`PoolSizing.update` reads the whole log (four weeks at most); each later one
reads what was logged since the last entry seen (less :data:`LATE_WRITES` seconds, for
checkouts whose API clock was a little behind; entries already seen are skipped). Used only
on the pool actor's thread.
"""

from __future__ import annotations

import logging
import statistics
from collections import deque

from vmpooler.actors.config.model import DemandSizing
from vmpooler.actors.pool.context import PoolIO, PoolSettings
from vmpooler.actors.sizing.demand_sizer import DemandSizer, SizingPolicy, Target
from vmpooler.actors.sizing.forecast import DemandForecast
from vmpooler.actors.sizing.tier_forecast import TierForecast
from vmpooler.actors.storage.demand_store import DemandStore, Logged

__all__ = ["DEFAULT_CLONE_TIME", "DEFAULT_RESUME_TIME", "LATE_WRITES", "LOGGED_STEP",
           "PoolSizing"]

log = logging.getLogger(__name__)

DEFAULT_CLONE_TIME = 120.0
"""Seconds a clone is assumed to take until the pool has cloned (or published) one."""

LATE_WRITES = 10.0
"""Seconds behind the last entry seen that each read looks again (clock skew of the APIs)."""

LOGGED_STEP = 1
"""A target change of more than this many VMs (or of its reason) is logged at INFO."""

WARM_HIT_WINDOW = 24 * 3600.0
"""Seconds of checkouts the published warm-hit ratio covers."""

DEFAULT_RESUME_TIME = 30.0
"""Seconds a standby VM is assumed to take to resume and be ready until the pool has
resumed one."""

CLONE_TIMES_KEPT = 20

REPUBLISH_AFTER = 30.0
"""Seconds after which an unchanged target is published again (``updated`` moves)."""


class PoolSizing:
    """The demand-sized size of one pool."""

    def __init__(self, policy: PoolSettings, io: PoolIO, demand: DemandSizing, *,
                 standby_cost: float | None = None) -> None:
        """``standby_cost``: the pool's standby tier is sized too (``standby: auto`` on a
        provider that can put VMs on standby), a standby VM-hour costing this much of a
        running one; None: no standby tier to size."""
        self.policy, self.io = policy, io
        self.store = DemandStore(io.store.client)
        self.standby_cost = standby_cost
        self.sizer = DemandSizer(SizingPolicy(
            size_min=demand.size_min, size_max=min(demand.size_max, policy.max_size),
            target_hit=demand.target_warm_hit, schedule=demand.schedule))
        self.clone_times: deque[float] = deque(maxlen=CLONE_TIMES_KEPT)
        self.resume_times: deque[float] = deque(maxlen=CLONE_TIMES_KEPT)
        self.loaded = False
        self.last_t = 0.0  # the score of the newest entry observed
        self.seen: dict[str, float] = {}  # members observed in the last LATE_WRITES seconds
        self.outcomes: deque[tuple[float, bool]] = deque()  # (t, served) of the last day
        self.served = 0  # how many of ``outcomes`` were served
        self.target: Target | None = None
        self.published: tuple[object, ...] = ()  # the fields last published, but ``updated``
        self.published_at = 0.0

    # -- inputs ----------------------------------------------------------------------------
    def cloned(self, seconds: float) -> None:
        """A clone of the pool finished in ``seconds``."""
        if seconds > 0:
            self.clone_times.append(seconds)

    def resumed(self, seconds: float) -> None:
        """A standby VM of the pool was resumed and found ready in ``seconds``."""
        if seconds > 0:
            self.resume_times.append(seconds)

    def resume_time(self) -> float:
        """The median of the pool's recent resume times (:data:`DEFAULT_RESUME_TIME` before
        any)."""
        return (statistics.median(self.resume_times) if self.resume_times
                else DEFAULT_RESUME_TIME)

    def set_floor(self, size: int | None) -> None:
        """The operator's floor (``POST /config/poolsize``); None: none."""
        self.sizer.set_operator_floor(size)

    def clone_time(self) -> float:
        """The median of the pool's recent clone times (:data:`DEFAULT_CLONE_TIME` before
        any)."""
        return statistics.median(self.clone_times) if self.clone_times else DEFAULT_CLONE_TIME

    # -- the cycle -------------------------------------------------------------------------
    def update(self, ready: int) -> Target:
        """Read the checkouts logged since the last call and return the size to keep now
        (``ready``: the pool's ready VMs, for the metrics). Redis errors propagate (the
        cycle's handling applies); nothing is observed twice."""
        now = self.io.clock.now()
        name = self.policy.name
        if not self.loaded:
            self._load(now)
        else:
            for entry in self.store.since(name, self.last_t - LATE_WRITES):
                if entry.member not in self.seen:
                    self._observe(entry)
        self._prune(now)
        tiers = self.standby_cost is not None
        target = self.sizer.target(now, self.clone_time(),
                                   self.resume_time() if tiers else None)
        self._report(target, ready, now)
        return target

    def _load(self, now: float) -> None:
        entries = self.store.since(self.policy.name, 0.0)
        published = self.store.published([self.policy.name]).get(self.policy.name, {})
        try:
            stored_clone = float(published.get("clone_time", "0"))
        except ValueError:
            stored_clone = 0.0
        if stored_clone > 0 and not self.clone_times:
            self.clone_times.append(stored_clone)  # the previous owner's, until ours come
        times = [e.t for e in entries]
        hit = self.sizer.policy.target_hit
        if self.standby_cost is not None:
            self.sizer.forecast = TierForecast.from_history(
                times, now=now, target_hit=hit, clone_time=self.clone_time(),
                resume_time=self.resume_time(), standby_cost=self.standby_cost)
        else:
            self.sizer.forecast = DemandForecast.from_history(
                times, now=now, target_hit=hit, clone_time=self.clone_time())
        for entry in entries:
            self._remember(entry)
        self.loaded = True

    def _observe(self, entry: Logged) -> None:
        self.sizer.observe(max(entry.t, self.last_t))  # the forecast takes time order
        self._remember(entry)

    def _remember(self, entry: Logged) -> None:
        self.last_t = max(self.last_t, entry.t)
        self.seen[entry.member] = entry.t
        self.outcomes.append((entry.t, entry.served))
        self.served += entry.served

    def _prune(self, now: float) -> None:
        horizon = self.last_t - 2 * LATE_WRITES
        if len(self.seen) > 64:
            self.seen = {m: t for m, t in self.seen.items() if t >= horizon}
        while self.outcomes and self.outcomes[0][0] < now - WARM_HIT_WINDOW:
            self.served -= self.outcomes.popleft()[1]

    def warm_hit(self) -> float | None:
        """The share of the last day's checkouts served from a ready VM (None: none)."""
        if not self.outcomes:
            return None
        return self.served / len(self.outcomes)

    def _report(self, target: Target, ready: int, now: float) -> None:
        name, tags = self.policy.name, {"pool": self.policy.name}
        before = self.target
        self.target = target
        if before is None or abs(target.size - before.size) > LOGGED_STEP or (
                target.reason != before.reason):
            log.info("[*] [%s] demand sizing: %d ready VMs (%s; forecast %d, floor %d, "
                     "ceiling %d)%s", name, target.size, target.reason, target.forecast,
                     target.floor, target.ceiling,
                     f", {target.standby} standby" if self.standby_cost is not None else "")
        elif self.standby_cost is not None and before.standby != target.standby:
            log.info("[*] [%s] demand sizing: %d standby VMs (was %d)", name, target.standby,
                     before.standby)
        warm = self.warm_hit()
        self.io.metrics.gauge("sizing.target", target.size, tags=tags)
        self.io.metrics.gauge("sizing.idle", ready, tags=tags)
        if warm is not None:
            self.io.metrics.gauge("sizing.warm_hit", warm, tags=tags)
        fields: dict[str, str | int | float] = {
            "target": target.size, "reason": target.reason, "forecast": target.forecast,
            "floor": target.floor, "ceiling": target.ceiling, "held": int(target.held),
            "clone_time": round(self.clone_time(), 1), "updated": round(now, 3),
            "warm_hit": "" if warm is None else round(warm, 4),
            "manager": str(getattr(self.io.ownership, "manager", "")),
        }
        if self.standby_cost is not None:
            fields["standby"] = target.standby
            fields["resume_time"] = round(self.resume_time(), 1)
            self.io.metrics.gauge("sizing.standby_target", target.standby, tags=tags)
        same = tuple(v for k, v in fields.items() if k != "updated")
        if same == self.published and now - self.published_at < REPUBLISH_AFTER:
            return  # one write per change, or per REPUBLISH_AFTER seconds
        self.store.publish(name, fields)
        self.published, self.published_at = same, now
