"""Which manager owns a pool: rendezvous hashing over the live managers, held by a lease.

Several managers may share one Redis. The live managers are the members of the heartbeat
set (``vmpooler__manager__heartbeat``) whose beat is younger than the stale age, plus this
manager itself (its heartbeat may not have been written yet). The pools are spread over them
by rendezvous hashing with bounded loads (blake2b of member and pool; each manager takes at
most its share, :func:`~vmpooler.actors.cluster.membership.balanced_owners`), so every live
manager serves pools and a joining or leaving manager moves about its share. The manager's
pool actors share one view of who is live (:class:`~vmpooler.actors.cluster.membership.
Membership`, read from Redis at most once a second).

:class:`Ownership` holds the pool's lease (:mod:`vmpooler.actors.storage.lease_store`): the
pool actor calls :meth:`Ownership.refresh` before each cycle and on a timer shorter than the
lease TTL, and acts only while it returns True. Every write of the pool's state runs behind
the lease's fence (:meth:`held` is the fence the stores ask), so a manager that lost its
lease (stopped past the TTL, say) has its late writes refused by the scripts, never
applied; it takes a lease again only once the provider calls it sent under the lost one
have answered, so no answer of an old holding is applied under a new token. When the
rendezvous owner changes, the holder starts nothing new, lets its provider calls in flight
answer (at most half a TTL), releases, and the new owner takes the
lease at its next refresh. A killed manager's leases expire after the TTL; one whose holder
is a process of this host that no longer exists is released at once (a dead process cannot
write). Used only on the pool actor's thread; each change of ownership is logged once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from vmpooler.actors.cluster.leases import LeaseHolder
from vmpooler.actors.cluster.membership import (
    Membership,
    balanced_owners,
    dead_here,
    live_managers,
    rendezvous_owner,
)
from vmpooler.actors.runtime.clock import Clock
from vmpooler.actors.storage.heartbeat_store import HeartbeatStore
from vmpooler.actors.storage.lease_store import POOL, Fence, Fenced, Lease, LeaseStore

__all__ = ["KIND", "Ownership", "OwnershipSettings", "PoolOwnership", "SoleOwner",
           "balanced_owners", "dead_here", "live_managers", "rendezvous_owner"]

log = logging.getLogger(__name__)

KIND = POOL
"""The lease kind of pools (``vmpooler__lease__pool__<name>``)."""


@dataclass(frozen=True, slots=True)
class OwnershipSettings:
    """What every pool actor of one manager shares: the manager's id (its heartbeat member),
    the lease TTL and the heartbeat stale age (seconds)."""

    manager: str
    ttl: float
    stale_after: float
    membership: Membership | None = None  # the manager's shared view (None: one per pool)

    def build(self, pool: str, client: redis.Redis, clock: Clock, *,
              busy: Callable[[], bool]) -> Ownership:
        """The ownership of ``pool`` by this manager."""
        return Ownership(pool=pool, manager=self.manager, leases=LeaseStore(client),
                         heartbeats=HeartbeatStore(client), clock=clock, ttl=self.ttl,
                         stale_after=self.stale_after, busy=busy, membership=self.membership)


class Ownership:
    """One pool's ownership by this manager; the fence of its pool writes (``key`` and
    :meth:`held`)."""

    def __init__(
        self, *, pool: str, manager: str, leases: LeaseStore, heartbeats: HeartbeatStore,
        clock: Clock, ttl: float, stale_after: float, busy: Callable[[], bool],
        monotonic: Callable[[], float] = time.monotonic, membership: Membership | None = None,
    ) -> None:
        self.pool = pool
        # who owns the pool: the manager's shared view, or (alone) a view of this pool read
        # at every refresh
        self.membership = membership or Membership(
            manager=manager, heartbeats=heartbeats, now=clock.now, stale_after=stale_after,
            pools=[pool], max_age=0.0, monotonic=monotonic)
        self.manager = manager
        self.holder = LeaseHolder(kind=KIND, manager=manager, store=leases, ttl=ttl)
        self.heartbeats = heartbeats
        self.clock = clock
        self.ttl = ttl
        self.stale_after = stale_after
        self.busy = busy  # provider calls in flight (a handover waits for their answers)
        self.monotonic = monotonic  # real time: Redis expires the lease in real time
        self.lease: Lease | None = None
        self.last: Lease | None = None  # the latest holding, kept after it is lost
        self.renewed_at = 0.0  # monotonic, when the lease was last taken or renewed
        self.handing_over_since: float | None = None
        self.last_seen: str | None = None  # holder last logged while waiting (log once)
        self.refusal_logged = False  # a refused write was logged since the last holding
        self.elsewhere = False  # the last refresh found the pool another manager's
        self.free_in: float | None = None  # seconds until the lease we wait for expires
        self.on_handed_over: Callable[[str], None] | None = None
        """Called with the new owner once the lease was released to it (a handover)."""

    @property
    def key(self) -> str:
        """The pool's lease key."""
        return self.holder.key(self.pool)

    @property
    def renew_interval(self) -> float | None:
        """Seconds between two refreshes on the timer: a third of the TTL."""
        return self.holder.renew_interval

    @property
    def fence(self) -> Fence:
        """The fence of the pool's writes: this ownership itself (:meth:`held`)."""
        return self

    # -- the fence ------------------------------------------------------------------------------
    def held(self) -> str | None:
        """The lease value this manager believes it holds (or last held; None before any).
        A holding older than
        half its TTL is renewed first; one that could not be renewed is dropped, but its
        value is still returned, so the script itself refuses the write (the old token)."""
        lease = self.lease
        if lease is None:  # the last holding's value: the script refuses it (its token)
            return None if self.last is None else self.last.value
        if self.monotonic() - self.renewed_at >= self.ttl / 2.0:
            if self.holder.renew(lease):
                self.renewed_at = self.monotonic()
            else:
                self._lost("it was no longer held at renewal")
        return lease.value

    def fenced(self, exc: Fenced) -> None:
        """A write was refused by the fence: the lease is no longer ours. The first refusal
        after each holding is logged as a warning, later ones at debug."""
        if self.lease is not None:
            self._lost("a write was refused (fenced)")
        if not self.refusal_logged:
            self.refusal_logged = True
            log.warning("[!] [%s] late write refused by the fence: %s", self.pool, exc)
        else:
            log.debug("[%s] write refused: %s", self.pool, exc)

    # -- ownership --------------------------------------------------------------------------------
    @property
    def acting(self) -> bool:
        """Whether this manager holds the lease and is not handing the pool over."""
        return self.lease is not None and self.handing_over_since is None

    def owner(self) -> str:
        """The live manager the pool belongs to."""
        return self.membership.owner(self.pool)

    def refresh(self) -> bool:
        """Take, renew, hand over or wait for the lease; True when this manager may act on
        the pool now. A Redis error leaves the holding as it was (its writes will tell)."""
        try:
            return self._refresh()
        except redis.RedisError as exc:
            log.debug("[%s] lease not refreshed: %s", self.pool, exc)
            return self.acting

    def _refresh(self) -> bool:
        self.free_in = None
        owner = self.owner()
        self.elsewhere = owner != self.manager
        if self.elsewhere:
            self._hand_over(owner)
            return False
        self.handing_over_since = None
        if self.lease is not None and self.monotonic() - self.renewed_at < self.ttl / 3.0:
            return True  # renewed moments ago (each write meets the fence all the same)
        if self.lease is not None and self.monotonic() - self.renewed_at >= self.ttl:
            self._lost("its TTL passed before it was renewed")  # stopped or stalled
        if self.lease is None and self.busy():
            # Calls sent under a previous holding are still out: their answers must meet
            # the fence (refused), not a new token, so the lease is taken once they are in.
            log.debug("[%s] lease not taken yet: calls of a previous holding in flight",
                      self.pool)
            return False
        state = self.holder.acquire(self.pool)
        if state.ours:
            if state.taken or self.lease is None or self.lease != state.lease:
                log.info("[*] [%s] pool owned by this manager (lease token %d)", self.pool,
                         state.lease.token)
            if state.taken:
                self.refusal_logged = False
            self.lease = self.last = state.lease
            self.renewed_at = self.monotonic()
            self.last_seen = None
            return True
        if self.lease is not None:
            self._lost(f"'{state.lease.holder}' holds it")
        holder = state.lease
        if self.holder.release_dead(holder, self.pool):
            return self._refresh()
        self.free_in = state.ttl_ms / 1000.0 + 0.05 if state.ttl_ms > 0 else None
        if self.last_seen != holder.value:
            log.info("[*] [%s] waiting for the lease held by '%s' (token %d, %.1fs left)",
                     self.pool, holder.holder, holder.token, state.ttl_ms / 1000.0)
            self.last_seen = holder.value
        return False

    def _hand_over(self, owner: str) -> None:
        if self.lease is None:
            if self.last_seen != f"owner {owner}":
                log.info("[*] [%s] pool left to manager '%s'", self.pool, owner)
                self.last_seen = f"owner {owner}"
            return
        mono = self.monotonic()
        if self.handing_over_since is None:
            self.handing_over_since = mono
            log.info("[*] [%s] pool now belongs to manager '%s': starting nothing new, "
                     "handing over", self.pool, owner)
        if (self.busy() and mono - self.handing_over_since < self.ttl / 2.0
                and self.holder.renew(self.lease)):  # let the calls answer
            self.renewed_at = mono
            return
        self.release(f"handed over to '{owner}'")
        self.last_seen = f"owner {owner}"
        if self.on_handed_over is not None:
            self.on_handed_over(owner)

    def release(self, why: str = "stopping") -> None:
        """Give the lease up (a handover or a clean stop); logged once."""
        lease, self.lease, self.handing_over_since = self.lease, None, None
        if lease is None:
            return
        try:
            released = self.holder.release(lease)
        except redis.RedisError as exc:
            log.warning("[!] [%s] lease not released (%s): %s; it expires in %.0fs",
                        self.pool, why, exc, self.ttl)
            return
        if released:
            log.info("[*] [%s] lease released: %s (token %d)", self.pool, why, lease.token)

    def _lost(self, why: str) -> None:
        lease, self.lease, self.handing_over_since = self.lease, None, None
        if lease is not None:
            log.warning("[!] [%s] lease token %d lost: %s; acting on the pool stops",
                        self.pool, lease.token, why)


class SoleOwner:
    """The ownership of a pool this manager alone acts on (a system built without leases:
    tests, an embedding with one manager): always acting, never another's, nothing to renew
    or release, and no fence (its writes go unfenced, so none is ever refused)."""

    acting = True
    elsewhere = False
    free_in: float | None = None
    renew_interval: float | None = None
    fence: Fence | None = None

    def __init__(self) -> None:
        self.on_handed_over: Callable[[str], None] | None = None  # never called

    def refresh(self) -> bool:
        """Always True: the pool is this manager's."""
        return True

    def fenced(self, exc: Fenced) -> None:
        """Never happens (nothing is fenced); logged should it all the same."""
        log.warning("[!] write refused by a fence no sole owner set: %s", exc)

    def release(self, why: str = "stopping") -> None:
        """Nothing to give up."""


PoolOwnership = Ownership | SoleOwner
"""What a pool actor acts under: a lease (:class:`Ownership`) or :class:`SoleOwner`."""
