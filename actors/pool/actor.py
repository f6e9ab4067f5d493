"""The actor that owns one pool: keeps it full of ready VMs and reaps every VM it holds.

Single writer: every transition of this pool's VMs happens here, one message at a time,
through a compare-and-set script of :mod:`vmpooler.actors.storage.store`. Provider work goes to the
pool's :class:`~vmpooler.actors.provider.actor.ProviderActor` as messages; the answers
come back as messages. At most one provider call per VM is outstanding (``self.busy``),
so two calls never act on one VM at once, and nothing blocks this mailbox but Redis.

A cycle (reference §4.2) starts with the provider's inventory and runs on a timer with
vmpooler's back-off — only a safety net: :class:`~vmpooler.actors.messages.PoolChanged`
starts one at once. Redis being away never crashes the actor: it logs, backs off and
catches up on the next cycle.
"""

from __future__ import annotations

import logging
from typing import Any

import pykka
import redis

from vmpooler.actors.config import GlobalSettings, PoolConfig
from vmpooler.actors.messages import (
    CallProvider,
    CloneForRequest,
    PoolChanged,
    ProviderCallFinished,
    ProviderOp,
    PurgeStaleVms,
    RefillPool,
    RunPoolCycle,
    StartDrain,
)
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.pool.checks import PoolChecks
from vmpooler.actors.pool.hostnames import HostnameGenerator
from vmpooler.actors.pool.ondemand import OnDemandVms
from vmpooler.actors.pool.outcomes import OutcomeHandlers
from vmpooler.actors.pool.policy import Backoff, LifetimePolicy
from vmpooler.actors.pool.purge import StalePurge
from vmpooler.actors.pool.upkeep import PoolUpkeep
from vmpooler.actors.runtime.clock import Clock, Scheduler, Timer
from vmpooler.actors.runtime.supervisor import ActorDirectory, SupervisedActor
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.provider_store import ProviderStore
from vmpooler.actors.storage.request_store import RequestStore
from vmpooler.actors.storage.store import PoolSnapshot, Store
from vmpooler.actors.storage.upkeep_store import UpkeepStore

__all__ = ["LOST_REASONS", "PoolActor"]

log = logging.getLogger(__name__)

LOST_REASONS = frozenset({
    "ready_ttl", "check_failed", "pending_timeout", "clone_failed", "purged", "drained",
    "excess", "vanished", "abandoned",
})
"""The ``reason`` tag values of ``vm.lost`` (docs/architecture.md, "Service-level metrics")."""

class PoolActor(OutcomeHandlers, PoolChecks, PoolUpkeep, OnDemandVms, StalePurge,
                SupervisedActor):
    """Owns the VMs of one pool. Construct with :meth:`pykka.ThreadingActor.start`."""

    def __init__(
        self,
        *,
        pool: PoolConfig,
        settings: GlobalSettings,
        data_ttl_hours: int,
        store: Store,
        directory: ActorDirectory,
        clock: Clock,
        scheduler: Scheduler,
        metrics: Metrics,
        hostnames: HostnameGenerator,
        requests: RequestStore | None = None,
        supervisor: pykka.ActorRef[Any] | None = None,
    ) -> None:
        super().__init__(name=f"pool:{pool.name}", supervisor=supervisor)
        self.requests = requests or RequestStore(store.client)
        self.provider_store = ProviderStore(store.client)
        self.upkeep = UpkeepStore(store.client)
        self.migrations: dict[str, str] = {}  # vm -> why: "moving", "limit" or "off"
        self.ondemand: dict[str, tuple[str, str]] = {}  # vm -> (request_id, alias)
        self.ondemand_loaded = False
        self.pool = pool
        self.name = pool.name
        self.settings = settings
        self.data_ttl = int(data_ttl_hours) * 3600
        self.store = store
        self.directory = directory
        self.clock = clock
        self.scheduler = scheduler
        self.metrics = metrics
        self.hostnames = hostnames
        self.backoff = Backoff.of(
            pool.check_loop_delay_min if pool.check_loop_delay_min is not None
            else settings.check_loop_delay_min,
            pool.check_loop_delay_max if pool.check_loop_delay_max is not None
            else settings.check_loop_delay_max,
            pool.check_loop_delay_decay if pool.check_loop_delay_decay is not None
            else settings.check_loop_delay_decay,
        )
        self.lifetime = LifetimePolicy(settings.vm_lifetime)
        self.check_hostname = (
            pool.check_hostname_for_mismatch if pool.check_hostname_for_mismatch is not None
            else settings.check_ready_vm_hostname_for_mismatch
        )
        self.timeout_min = pool.timeout if pool.timeout is not None else settings.timeout
        self.notify_min = (
            pool.timeout_notification if pool.timeout_notification is not None
            else settings.timeout_notification
        )
        self.size = pool.size
        self.template = pool.template
        self.clone_target = pool.clone_target
        self.delay = self.backoff.min
        self.generation = 0
        self.timer: Timer | None = None
        self.initialised = False
        self.listing = False
        self.cycle_again = False
        self.preparing = False
        self.waiting_for_slot = False
        self.slot_wait_since: float | None = None  # monotonic: first NO_SLOT of a shortage
        self.clone_failures = 0
        self.clone_retry_at = 0.0
        self.busy_since: dict[str, float] = {}
        self.preparing_since = 0.0
        # A provider answer older than this is presumed lost (its provider actor crashed).
        self.lost_after = settings.provider_call_timeout + 60.0
        self.owed_slots = 0
        self.inventory_failures = 0  # consecutive failed listings (an outage is logged once)
        self.busy: dict[str, ProviderOp] = {}
        self.clone_started: dict[str, float] = {}
        self.ready_since: dict[str, float] = {}
        self.next_check: dict[str, float] = {}
        self.next_running_check: dict[str, float] = {}
        self.notified: set[str] = set()
        self.reserved_at: dict[str, float] = {}
        self.list_sent_at = 0.0
        self.call_ids = 0

    # -- mailbox ----------------------------------------------------------------------------
    def setup(self) -> None:
        # Know the request VMs before any message: a clone answer addressed to a crashed
        # predecessor may arrive before the first cycle.
        try:
            self.ondemand.update(
                self.store.ondemand_owners(self.store.members(self.name, "pending")))
            self.ondemand_loaded = True
        except redis.RedisError as exc:
            log.warning("[!] [%s] could not read pending VMs at start: %s", self.name, exc)
        self.actor_ref.tell(RunPoolCycle(generation=0))

    def on_stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()

    def handle(self, message: Any) -> Any:
        if isinstance(message, ProviderCallFinished):
            if message.vm is not None:
                self.busy.pop(message.vm, None)
                self.busy_since.pop(message.vm, None)
            self._guard(self.on_outcome, message)
        elif isinstance(message, RunPoolCycle):
            if message.generation in (0, self.generation):
                self._request_cycle()
        elif isinstance(message, PoolChanged):
            log.debug("[%s] woken: %s", self.name, message.reason)
            self._request_cycle()
        elif isinstance(message, RefillPool):
            # A slot is offered; if this pool no longer needs it, refill passes it on.
            self._guard(lambda: self.refill(freed=1))
        elif isinstance(message, StartDrain):
            self._guard(self._drain, message.reason or "drain requested")
        elif isinstance(message, CloneForRequest):
            self._guard(self._clone_for_request, message)
        elif isinstance(message, PurgeStaleVms):
            self._guard(self._purge_stale, message)
        return None

    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except redis.RedisError as exc:
            log.error("[!] [%s] redis unavailable: %s; retrying in %.0fs", self.name, exc,
                      self.delay)
            self.delay = self.backoff.next(self.delay, busy=False)
            self._schedule_cycle()

    # -- the cycle ----------------------------------------------------------------------------
    def _request_cycle(self) -> None:
        mono = self.clock.monotonic()
        if self.listing and mono - self.list_sent_at <= self.lost_after:
            self.cycle_again = True
            self._schedule_cycle()  # in case the answer never comes
            return
        if self.listing:
            log.warning("[!] [%s] no inventory answer for %.0fs; asking again", self.name,
                        mono - self.list_sent_at)
        self._expire_lost_calls(mono)
        provider = self._provider()
        if provider is None:
            log.warning("[!] [%s] provider '%s' is not running", self.name, self.pool.provider)
            self._schedule_cycle()
            return
        self.listing = True
        self.list_sent_at = self.clock.monotonic()
        self.cycle_again = False
        provider.tell(self._call(ProviderOp.LIST_VMS, None))
        self._schedule_cycle()  # a safety net, replaced when the inventory arrives

    def _expire_lost_calls(self, mono: float) -> None:
        """Forget provider calls whose answer is overdue: their provider actor crashed, and
        the restarted one will answer the next call for the same VM."""
        lost = [vm for vm, since in self.busy_since.items() if mono - since > self.lost_after]
        for vm in lost:
            log.warning("[!] [%s] no answer to %s of '%s'; it will be retried", self.name,
                        self.busy[vm].value, vm)
            self.busy.pop(vm, None)
            self.busy_since.pop(vm, None)
        if self.preparing and mono - self.preparing_since > self.lost_after:
            self.preparing = False

    def _provider(self) -> pykka.ActorRef[Any] | None:
        return self.directory.get(f"provider:{self.pool.provider}")

    def _call(self, op: ProviderOp, vm: str | None, *args: Any) -> CallProvider:
        self.call_ids += 1
        return CallProvider(op=op, pool=self.name, vm=vm, reply_to=self.actor_ref,
                            args=tuple(args), call_id=self.call_ids)

    def _send(self, op: ProviderOp, vm: str, *args: Any) -> bool:
        """Send a provider call for ``vm`` unless one is outstanding. True if sent."""
        if vm in self.busy:
            return False
        provider = self._provider()
        if provider is None:
            return False
        self.busy[vm] = op
        self.busy_since[vm] = self.clock.monotonic()
        try:
            provider.tell(self._call(op, vm, *args))
        except pykka.ActorDeadError:
            del self.busy[vm]
            del self.busy_since[vm]
            return False
        return True

    def _schedule_cycle(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.generation += 1
        self.timer = self.scheduler.tell_later(
            self.delay, self.actor_ref, RunPoolCycle(generation=self.generation))

    def on_inventory(self, inventory: tuple[str, ...] | None, error: str | None) -> None:
        """Run one cycle over the inventory (called with the LIST_VMS outcome)."""
        self.listing = False
        if inventory is None:
            if not self.inventory_failures:  # one line per outage, not one per cycle
                log.error("[!] [%s] inventory failed: %s (logged again when it recovers)",
                          self.name, error)
            else:
                log.debug("[%s] inventory failed again: %s", self.name, error)
            self.inventory_failures += 1
            self.delay = self.backoff.next(self.delay, busy=False)
            self._schedule_cycle()
            return
        if self.inventory_failures:
            log.warning("[*] [%s] inventory available again after %d failed cycles",
                        self.name, self.inventory_failures)
            self.inventory_failures = 0
        started = self.clock.monotonic()
        try:
            busy = self._cycle(set(inventory))
        except redis.RedisError as exc:
            log.error("[!] [%s] redis unavailable: %s", self.name, exc)
            busy = False
        self.metrics.gauge("vmpooler_performance.check_pool",
                           self.clock.monotonic() - started, tags={"pool": self.name})
        self.delay = self.backoff.next(self.delay, busy=busy)
        if self.cycle_again:
            self._request_cycle()
        else:
            self._schedule_cycle()

    def _cycle(self, inventory: set[str]) -> bool:
        store, name = self.store, self.name
        if self.owed_slots:
            for _ in range(self.owed_slots):
                store.release_clone_slot()
            self.owed_slots = 0
        snap = store.snapshot(name)
        if not self.initialised:
            self._initialise(snap)
        self._prune_ondemand(snap.pending)
        activity = False
        known = snap.pending | snap.ready | snap.running | snap.completed | snap.discovered
        unknown = inventory - known
        if unknown:
            added = store.discover(name, unknown)
            if added:
                activity = True
                log.info("[?] [%s] '%s' found in inventory, in no queue", name, "', '".join(added))
        for vm in snap.discovered - self.busy.keys():
            if store.resolve_discovered(name, vm) == 1:
                log.info("[>] [%s] '%s' moved from 'discovered' to 'completed'", name, vm)
        for vm in snap.migrating - self.busy.keys():
            store.leave_migrating(name, vm)
            if vm in inventory:
                self._migrate(vm)
        now = self.clock.now()
        self._check_running(snap, inventory, now)
        ready = self._check_ready(snap, inventory, now)
        pending = set(snap.pending) - self.ondemand.keys()  # a request's VMs are not the pool's
        for vm in sorted(snap.pending - self.busy.keys(), reverse=True):
            if vm in inventory:
                activity |= self._send(ProviderOp.CHECK_PENDING, vm)
            elif self._pending_vanished(vm):
                pending.discard(vm)
        for vm in snap.completed - self.busy.keys():
            if vm in inventory:
                if store.begin_destroy(name, vm, now=timefmt.format_epoch(now), ttl=self.data_ttl):
                    self._send(ProviderOp.DESTROY, vm, self._fqdn(vm))
            elif store.forget(name, vm, delete_hash=True):
                self._forget_caches(vm)
        if self._apply_overrides(snap):
            return True
        activity |= self._repopulate(len(ready), len(pending))
        self._remove_excess(ready, pending)
        self._flag_empty(snap, len(ready))
        self.metrics.gauge("ready", len(ready), tags={"pool": name})
        self.metrics.gauge("running", len(snap.running), tags={"pool": name})
        # ours: what dashboards draw the queues against
        self.metrics.gauge("pending", len(pending), tags={"pool": name})
        self.metrics.gauge("size", self.size, tags={"pool": name})
        return activity

    def _migrate(self, vm: str) -> None:
        """Ask the provider where a checked-out VM runs, letting it move the VM when
        ``migration_limit`` allows one more migration (reserved in Redis, atomically)."""
        limit = self.settings.migration_limit or 0
        if limit <= 0:
            why = "off"
        elif self.provider_store.reserve_migration(vm, limit):
            why = "moving"
        else:
            why = "limit"
        if self._send(ProviderOp.MIGRATE, vm, why == "moving"):
            self.migrations[vm] = why
        elif why == "moving":
            self.provider_store.release_migration(vm)

    def _initialise(self, snap: PoolSnapshot) -> None:
        if not self.ondemand_loaded:  # Redis was away when the actor started
            self.ondemand.update(self.store.ondemand_owners(snap.pending))
            self.ondemand_loaded = True
        if snap.template_override:
            self.template = snap.template_override
        if snap.clone_target_override:
            self.clone_target = snap.clone_target_override
        self.initialised = True

    def _clone_started(self, vm: str) -> float | None:
        if vm not in self.clone_started:
            value = timefmt.parse_epoch(self.store.vm_field(vm, "clone"))
            if value is None:
                return None
            self.clone_started[vm] = value
        return self.clone_started[vm]

    def _fqdn(self, vm: str) -> str | None:
        return f"{vm}.{self.pool.domain}" if self.pool.domain else None

    def _lost(self, reason: str, count: int = 1) -> None:
        """Count ``count`` VMs of this pool that left for good without ever being checked
        out (``vm.lost``, tags ``pool`` and ``reason``, one of :data:`LOST_REASONS`)."""
        if count > 0:
            self.metrics.increment("vm.lost", tags={"pool": self.name, "reason": reason},
                                   value=count)

    def _forget_caches(self, vm: str) -> None:
        self.clone_started.pop(vm, None)
        self.ready_since.pop(vm, None)
        self.next_check.pop(vm, None)
        self.next_running_check.pop(vm, None)
        self.reserved_at.pop(vm, None)
        self.notified.discard(vm)
