"""A pool cycle (reference §4.2): the provider's inventory, then one pass over every queue.

:class:`PoolCycle` owns the cycle's timing: the back-off delay, the safety-net timer (its
generation), where the inventory stands (:class:`Listing`, moved along one table,
:data:`TRANSITIONS`) and since when the last ``LIST_VMS`` was sent, and the count of failed
inventories in a row. The timer is only a safety net:
:class:`~vmpooler.actors.messages.PoolChanged` starts a cycle at once. A cycle runs the
pool's collaborators in vmpooler's order (docs/architecture.md, "A pool cycle"). Used only
on the pool actor's thread.

::

    IDLE    -> LISTING (sent), IDLE (a late answer)
    LISTING -> AGAIN (requested meanwhile), LISTING (overdue: asked again), IDLE (answered)
    AGAIN   -> AGAIN, LISTING (overdue: asked again), IDLE (answered)

* ``IDLE``: no ``LIST_VMS`` outstanding; a cycle request sends one.
* ``LISTING``: a ``LIST_VMS`` is outstanding; its answer runs the cycle.
* ``AGAIN``: a cycle was requested while listing: once the answer's cycle has run, another
  cycle is requested at once (once, however many requests came meanwhile).

An answer outstanding longer than ``lost_after`` is presumed lost: a request then asks
again (``LISTING``). An answer that comes while ``IDLE`` (to a listing asked again) still
runs a cycle. A move not in the table raises
:class:`~vmpooler.actors.runtime.transitions.IllegalTransitionError`.
"""

from __future__ import annotations

import logging
from enum import Enum

import redis

from vmpooler.actors.messages import (
    CheckPending,
    DestroyVm,
    ListVms,
    ProviderCallFinished,
    RunPoolCycle,
)
from vmpooler.actors.pool.calls import ProviderCalls
from vmpooler.actors.pool.checks import PoolChecks
from vmpooler.actors.pool.clones import Clones
from vmpooler.actors.pool.context import PoolIO, PoolSettings
from vmpooler.actors.pool.failover_watch import Failover
from vmpooler.actors.pool.migrations import Migrations
from vmpooler.actors.pool.request_vms import OnDemandVms
from vmpooler.actors.pool.standby import Standby
from vmpooler.actors.pool.upkeep import PoolUpkeep
from vmpooler.actors.pool.vm_cache import VmCache
from vmpooler.actors.runtime.clock import Timer
from vmpooler.actors.runtime.transitions import check_transition
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.lease_store import Fenced
from vmpooler.actors.storage.pool_snapshot import PoolSnapshot
from vmpooler.actors.storage.redis_errors import redis_failure

__all__ = ["TRANSITIONS", "Listing", "PoolCycle"]

log = logging.getLogger(__name__)


class Listing(Enum):
    """Where a pool's inventory stands (see the module's picture)."""

    IDLE = "idle"
    LISTING = "listing"
    AGAIN = "again"


TRANSITIONS: dict[Listing, frozenset[Listing]] = {
    # IDLE -> IDLE: the answer to a listing asked again, the first answer already in
    Listing.IDLE: frozenset({Listing.LISTING, Listing.IDLE}),
    # LISTING -> LISTING: the answer is overdue, asked again
    Listing.LISTING: frozenset({Listing.LISTING, Listing.AGAIN, Listing.IDLE}),
    # AGAIN -> AGAIN: requested again while listing
    Listing.AGAIN: frozenset({Listing.AGAIN, Listing.LISTING, Listing.IDLE}),
}
"""Every allowed move: ``TRANSITIONS[old]`` holds the states ``old`` may become."""


class PoolCycle:
    """Runs one pool's cycles and keeps its timer armed."""

    def __init__(self, policy: PoolSettings, io: PoolIO, *, calls: ProviderCalls, vms: VmCache,
                 checks: PoolChecks, upkeep: PoolUpkeep, clones: Clones, ondemand: OnDemandVms,
                 migrations: Migrations, failover: Failover, standby: Standby) -> None:
        self.policy, self.io, self.calls, self.vms = policy, io, calls, vms
        self.checks = checks
        self.upkeep = upkeep
        self.clones = clones
        self.ondemand = ondemand
        self.migrations = migrations
        self.failover = failover
        self.standby = standby
        self.delay = self.policy.backoff.min
        self.generation = 0  # of the armed timer; an older RunPoolCycle is ignored
        self.timer: Timer | None = None
        self.listing = Listing.IDLE
        self.list_sent_at = 0.0  # monotonic, of the last LIST_VMS
        self.listings = 0  # listings sent: numbers them
        self.inventory_failures = 0  # consecutive failed listings (an outage is logged once)

    def to(self, listing: Listing) -> None:
        """Move the inventory to ``listing``; raise
        :class:`~vmpooler.actors.runtime.transitions.IllegalTransitionError` if
        :data:`TRANSITIONS` does not allow it."""
        self.listing = check_transition(TRANSITIONS, f"pool '{self.policy.name}'",
                                        self.listing, listing)

    # -- timing -------------------------------------------------------------------------------
    def request(self) -> None:
        """Start a cycle: send ``LIST_VMS`` (the cycle runs when the inventory arrives), or,
        if a listing is outstanding, cycle again once it is answered."""
        mono = self.io.clock.monotonic()
        outstanding = self.listing is not Listing.IDLE
        if outstanding and mono - self.list_sent_at <= self.policy.lost_after:
            self.to(Listing.AGAIN)
            self.schedule()  # in case the answer never comes
            return
        if outstanding:
            log.warning("[!] [%s] no inventory answer for %.0fs; asking again", self.policy.name,
                        mono - self.list_sent_at)
        self.calls.expire_lost(mono)
        self.upkeep.expire_preparing(mono)
        if not self.io.ownership.refresh():
            if self.io.ownership.elsewhere:  # another's: its timer backs off like an idle pool's
                self.delay = self.policy.backoff.next(self.delay, busy=False)
            # not ours (or not yet): left alone, asked again next time (or when it expires)
            self.schedule(within=self.io.ownership.free_in)
            return
        provider = self.calls.provider()
        if provider is None:
            log.warning("[!] [%s] provider '%s' is not running", self.policy.name,
                        self.policy.pool.provider)
            self.schedule()
            return
        self.to(Listing.LISTING)
        self.list_sent_at = self.io.clock.monotonic()
        self.listings += 1
        provider.tell(self.calls.call(ListVms(), None))
        self.schedule()  # a safety net, replaced when the inventory arrives

    def schedule(self, within: float | None = None) -> None:
        """Arm the timer for ``delay`` seconds, or ``within`` if sooner (cancelling the
        armed one)."""
        if self.timer is not None:
            self.timer.cancel()
        self.generation += 1
        after = self.delay if within is None else min(self.delay, max(0.0, within))
        self.timer = self.io.scheduler.tell_later(
            after, self.io.self_ref, RunPoolCycle(generation=self.generation))

    def hurry(self, within: float | None = None) -> None:
        """Cycle again after the shortest delay, or ``within`` seconds if sooner (a pool
        that just became this manager's, while its timer was backed off as another's and
        its lease, still held, expires in ``within``)."""
        if self.delay > self.policy.backoff.min or within is not None:
            self.delay = min(self.delay, self.policy.backoff.min)
            self.schedule(within=within)

    def cancel(self) -> None:
        """Disarm the timer (the actor stops)."""
        if self.timer is not None:
            self.timer.cancel()

    def redis_failed(self, exc: redis.RedisError) -> None:
        """Redis failed a handler: log, back off, and cycle again after the delay."""
        log.error("[!] [%s] %s: %s; retrying in %.0fs", self.policy.name, redis_failure(exc),
                  exc, self.delay)
        self.upkeep.redis_failed()
        self.delay = self.policy.backoff.next(self.delay, busy=False)
        self.schedule()

    # -- the inventory ---------------------------------------------------------------------------
    def listed(self, msg: ProviderCallFinished) -> None:
        """The answer to ``LIST_VMS`` (a ``busy`` refusal counts as a failed inventory)."""
        if msg.failure is not None:
            self.on_inventory(None, msg.failure.message, refused=msg.failure.circuit_open)
        else:
            self.on_inventory(msg.result_of(tuple), None)

    def on_inventory(self, inventory: tuple[str, ...] | None, error: str | None, *,
                     refused: bool = False) -> None:
        """Run one cycle over the inventory (None: the listing failed with ``error``;
        ``refused``: by the provider's open circuit breaker); then, if a cycle was
        requested while listing, request one now."""
        again = self.listing is Listing.AGAIN
        self.to(Listing.IDLE)
        if inventory is None:
            if not self.inventory_failures:  # one line per outage, not one per cycle
                log.error("[!] [%s] inventory failed: %s (logged again when it recovers)",
                          self.policy.name, error)
            else:
                log.debug("[%s] inventory failed again: %s", self.policy.name, error)
            self.inventory_failures += 1
            self._failover_down(refused)
            self.delay = self.policy.backoff.next(self.delay, busy=False)
            self.schedule()
            return
        if self.inventory_failures:
            log.warning("[*] [%s] inventory available again after %d failed cycles",
                        self.policy.name, self.inventory_failures)
            self.inventory_failures = 0
        if not self.io.ownership.acting:
            self.schedule()  # the lease went while listing: no inventory writes
            return
        started = self.io.clock.monotonic()
        try:
            busy = self._cycle(set(inventory))
        except redis.RedisError as exc:
            log.error("[!] [%s] %s: %s", self.policy.name, redis_failure(exc), exc)
            self.upkeep.redis_failed()
            busy = False
        except Fenced as exc:  # the lease was lost mid-cycle: the rest was not written
            self.io.ownership.fenced(exc)
            busy = False
        self.io.metrics.gauge("vmpooler_performance.check_pool",
                          self.io.clock.monotonic() - started, tags={"pool": self.policy.name})
        self.delay = self.policy.backoff.next(self.delay, busy=busy)
        if again:
            self.request()
        else:
            self.schedule()

    # -- the cycle ------------------------------------------------------------------------------
    def _cycle(self, inventory: set[str]) -> bool:
        """One pass over the pool's queues; True if it was busy (discovered a VM, sent a
        pending check, started a clone or drained)."""
        store, name, busy_vms = self.io.store, self.policy.name, self.calls.busy
        self.clones.repay_slots()
        mono = self.io.clock.monotonic()
        overrides, flags = self.upkeep.reads_due(mono)
        snap = store.snapshot(name, overrides=overrides, flags=flags)
        self.upkeep.adopt(snap, mono)
        if not self.upkeep.initialised:
            self._initialise(snap)
        self.ondemand.prune(snap.pending)
        activity = False
        held = self.checks.check_held(self.upkeep.size)
        known = (snap.pending | snap.ready | snap.running | snap.completed | snap.discovered
                 | held | snap.standby)
        unknown = inventory - known
        if unknown:
            added = store.discover(name, unknown)
            if added:
                activity = True
                log.info("[?] [%s] '%s' found in inventory, in no queue", name, "', '".join(added))
        for vm in snap.discovered - busy_vms:
            if store.resolve_discovered(name, vm) == 1:
                log.info("[>] [%s] '%s' moved from 'discovered' to 'completed'", name, vm)
        for vm in snap.migrating - busy_vms:
            store.leave_migrating(name, vm)
            if vm in inventory:
                self.migrations.start(vm)
        now = self.io.clock.now()
        self.checks.check_running(snap, inventory, now)
        ready = self.checks.check_ready(snap, inventory, now)
        pending = set(snap.pending) - self.ondemand.owners.keys()  # requests' VMs: not ours
        for vm in sorted(snap.pending - busy_vms, reverse=True):
            if vm in inventory:
                activity |= self.calls.send(CheckPending(), vm)
            elif self.checks.pending_vanished(vm, self.list_sent_at, self.listings):
                pending.discard(vm)
        self.checks.keep_suspects(snap.pending - inventory)
        for vm in snap.completed - busy_vms:
            if vm in inventory:
                if store.begin_destroy(name, vm, now=timefmt.format_epoch(now),
                                       ttl=self.policy.data_ttl):
                    self.calls.send(DestroyVm(self.policy.fqdn(vm)), vm)
            elif store.forget(name, vm, delete_hash=True):
                self.vms.forget(vm)
        if self.upkeep.apply_overrides():
            return True
        self.upkeep.follow_demand(len(ready))
        if self.upkeep.standby_target is not None:
            self.standby.set_target(self.upkeep.standby_target)
        self.failover.cycle(inventory_ok=True, inventory_failures=0, breaker_open=False,
                            ready=len(ready))
        activity |= self.standby.cycle(snap.standby, inventory, len(ready) + len(held),
                                       self.upkeep.size)
        activity |= self.clones.repopulate(len(ready) + len(held), len(pending))
        self.standby.absorb(ready, self.upkeep.size)
        self.upkeep.remove_excess(ready, pending, self.vms.ready_since)
        self.upkeep.flag_empty(len(ready))
        size = self.upkeep.size
        self.io.metrics.gauge("ready", len(ready), tags={"pool": name})
        self.io.metrics.gauge("running", len(snap.running), tags={"pool": name})
        # ours: what dashboards draw the queues against
        self.io.metrics.gauge("pending", len(pending), tags={"pool": name})
        self.io.metrics.gauge("size", size, tags={"pool": name})
        return activity

    def _failover_down(self, refused: bool) -> None:
        """Alias failover after a failed inventory (the pool's own state is published even
        though the cycle does not run; ``refused``: by the open circuit breaker)."""
        if not self.failover.enabled or not self.io.ownership.acting:
            return
        try:
            self.failover.cycle(inventory_ok=False, inventory_failures=self.inventory_failures,
                                breaker_open=refused, ready=0)
        except redis.RedisError as exc:
            log.debug("[%s] failover state not published: %s", self.policy.name, exc)
        except Fenced as exc:
            self.io.ownership.fenced(exc)

    def _initialise(self, snap: PoolSnapshot) -> None:
        if not self.ondemand.loaded:  # Redis was away when the actor started
            self.ondemand.load(snap.pending)
        self.upkeep.initialise()
