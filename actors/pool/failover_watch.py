"""Alias failover inside one pool actor: its own state published, its siblings' read, its
size grown by what it takes over (docs/vsphere.md, "Several vCenters behind one pool name").

:class:`Failover` runs once per cycle of a pool with ``failover: true`` (a pool without it
gets an inert one). It decides from Redis alone what the siblings can do — each sibling's
state is what that sibling's own actor, on whichever manager holds its lease, published
(read as :class:`~vmpooler.actors.placement.health.Published`, as the API reads it) —
and from its own cycle what it can do itself. The rule is
:mod:`~vmpooler.actors.placement.failover`'s.
Used only on the pool actor's thread.

Writes: ``vmpooler__failover__<pool>`` behind the pool's lease, every cycle. Logs one line
when the pool's state changes, one when it starts covering for a sibling and one when it
gives that share back. Metrics: ``failover.size`` (gauge, the size it keeps),
``failover.takeover`` and ``failover.giveback`` (tagged ``sibling`` and ``pool``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from vmpooler.actors.config import Config
from vmpooler.actors.messages import PoolChanged
from vmpooler.actors.messages.address import Address
from vmpooler.actors.placement.failover import Health, HealthTracker, Member, State, plan
from vmpooler.actors.placement.health import read_published
from vmpooler.actors.placement.weights import target_weight
from vmpooler.actors.pool.clones import Clones
from vmpooler.actors.pool.context import PoolIO, PoolSettings
from vmpooler.actors.pool.upkeep import PoolUpkeep
from vmpooler.actors.storage.failover_store import FailoverState, FailoverStore

__all__ = ["Failover", "FailoverGroup", "failover_group"]

log = logging.getLogger(__name__)

MIN_TTL = 180.0
"""Seconds a published state lasts at least (else three of the pool's longest cycle delays)."""


@dataclass(frozen=True, slots=True)
class FailoverGroup:
    """A failover pool and its siblings as configured: every pool with ``failover: true``
    that shares an alias with it, as :class:`Member` s in ``ok`` state with their configured
    sizes (what is assumed of a sibling that has published nothing), and the down
    threshold (``failover_failures``)."""

    me: Member
    siblings: tuple[Member, ...]
    threshold: int


def failover_group(config: Config, pool: str) -> FailoverGroup | None:
    """The group of ``pool``, or None when it has no ``failover: true`` or no sibling."""
    members = {p.name: Member(name=p.name, size=min(p.size, config.max_pool_size(p)),
                              aliases=frozenset(p.alias),
                              weight=target_weight(config, p.clone_target), ceiling=p.size_max)
               for p in config.pools if p.failover}
    me = members.get(pool)
    if me is None:
        return None
    siblings = tuple(m for m in members.values() if m.name != pool and m.aliases & me.aliases)
    if not siblings:
        return None
    return FailoverGroup(me, siblings, config.settings.failover_failures)


class Failover:
    """One pool's part in alias failover (inert without a group)."""

    def __init__(self, policy: PoolSettings, io: PoolIO, *, upkeep: PoolUpkeep, clones: Clones,
                 group: FailoverGroup | None) -> None:
        self.policy, self.io = policy, io
        self.upkeep = upkeep
        self.clones = clones
        self.group = group
        self.store = FailoverStore(self.io.store.client, self.io.ownership.fence)
        self.tracker = HealthTracker(group.threshold if group else 1)
        self.since = self.io.clock.now()
        self.covering: Mapping[str, int] = {}
        self.ttl = max(MIN_TTL, 3 * self.policy.backoff.max)

    @property
    def enabled(self) -> bool:
        """True for a pool with ``failover: true`` and at least one sibling."""
        return self.group is not None

    def cycle(self, *, inventory_ok: bool, inventory_failures: int, breaker_open: bool,
              ready: int) -> None:
        """After the pool's inventory (``inventory_ok``; ``inventory_failures`` failed
        in a row, the last refused by an open breaker: ``breaker_open``) with ``ready``
        ready VMs: update and publish its state and set ``upkeep.extra`` to what it takes
        over. May raise ``redis.RedisError`` or ``Fenced`` (nothing changed then but its own
        state)."""
        group = self.group
        if group is None:
            return
        before = self.tracker.state
        health = self.tracker.observe(
            inventory_ok=inventory_ok, inventory_failures=inventory_failures,
            breaker_open=breaker_open, clone_failures=self.clones.failures, ready=ready,
            size=self.upkeep.base)
        changed = health.state is not before
        if changed:
            self._changed(before, health)
        published = read_published(self.store, (m.name for m in group.siblings))
        me = Member(name=group.me.name, size=self.upkeep.base, aliases=group.me.aliases,
                    state=health.state, ready=health.deliverable, weight=group.me.weight,
                    ceiling=group.me.ceiling)
        members = [me, *(published.member(m) for m in group.siblings)]
        cover = plan(members)[me.name]
        extra = max(0, min(cover.extra, self.policy.max_size - self.upkeep.base))
        self._announce(dict(cover.by_pool), published.states, self.upkeep.size,
                       self.upkeep.base + extra)
        self.upkeep.extra = extra
        self.store.publish(FailoverState(
            pool=self.policy.name, state=health.state.value, reason=health.reason, since=self.since,
            size=self.upkeep.base, ready=health.deliverable, effective=self.upkeep.size,
            covering=self.covering, updated=self.io.clock.now()), ttl=self.ttl)
        self.io.metrics.gauge("failover.size", self.upkeep.size, tags={"pool": self.policy.name})
        if changed:  # after the write: a sibling woken now reads the new state, not the old
            self._wake_siblings(health.state)

    def _changed(self, before: State, health: Health) -> None:
        self.since = self.io.clock.now()
        if health.state is State.DOWN:
            log.warning("[!] [%s] cannot deliver (%s): its alias siblings take over its share",
                        self.policy.name, health.reason)
        elif health.state is State.RECOVERING:
            log.warning("[*] [%s] delivers again: refilling, its siblings give back its share "
                        "as it does", self.policy.name)
        else:
            log.info("[*] [%s] back to its size: its siblings hold no share of it",
                     self.policy.name)

    def _wake_siblings(self, state: State) -> None:
        """Tell each sibling's actor (relayed to its lease holder) to cycle at once rather than
        at its next cycle. Called only once the new state is in Redis: a sibling that read the
        old one would wait a whole cycle (up to ``check_loop_delay_max``) to take over."""
        assert self.group is not None
        for sibling in self.group.siblings:
            self.io.directory.tell(
                Address.pool(sibling.name).name,
                PoolChanged(sibling.name, f"failover: {self.policy.name} {state.value}"))

    def _announce(self, covering: dict[str, int], published: Mapping[str, FailoverState],
                  old: int, new: int) -> None:
        """Log and count what starts and stops being covered (the size goes ``old`` ->
        ``new``)."""
        name = self.policy.name
        for sibling, count in covering.items():
            if sibling not in self.covering:
                state = published.get(sibling)
                why = f"{state.state}: {state.reason}" if state and state.reason else (
                    state.state if state else "down")
                log.warning("[*] [%s] grows by %d for '%s' (%s): size %d -> %d", name, count,
                            sibling, why, old, new)
                self.io.metrics.increment("failover.takeover",
                                      tags={"sibling": sibling, "pool": name})
        for sibling in self.covering:
            if sibling not in covering:
                log.warning("[*] [%s] gives back the share of '%s' (%s): size %d -> %d", name,
                            sibling, published[sibling].state if sibling in published
                            else "no state published", old, new)
                self.io.metrics.increment("failover.giveback",
                                      tags={"sibling": sibling, "pool": name})
        self.covering = covering
