"""The actor that owns one pool: keeps it full of ready VMs and reaps every VM it holds.

Single writer: every transition of this pool's VMs happens here, one message at a time,
through a compare-and-set script of :mod:`vmpooler.actors.storage.store`. Provider work goes to the
pool's :class:`~vmpooler.actors.provider.provider_actor.ProviderActor` as messages; the answers
come back as messages. At most one provider call per VM is outstanding
(:class:`~vmpooler.actors.pool.calls.ProviderCalls`), so two calls never act on one VM at
once, and nothing blocks this mailbox but Redis.

The actor itself is a short list of message handlers and the routing of provider answers
to the part that sent the call. The work is done by its collaborators, plain objects it
builds and runs only inside this mailbox, each given what it uses of
:mod:`~vmpooler.actors.pool.context` (the frozen ``PoolSettings``, the ``PoolIO`` services,
and the provider calls and VM caches where it uses them):

* :class:`~vmpooler.actors.pool.cycle.PoolCycle` — the cycle (reference §4.2), its timer and
  back-off; :class:`~vmpooler.actors.pool.checks.PoolChecks` — running, ready and vanished
  pending VMs;
* :class:`~vmpooler.actors.pool.upkeep.PoolUpkeep` — overrides, drains, template, excess,
  the empty flag; :class:`~vmpooler.actors.pool.clones.Clones` — refill, clone starts and
  their answers, with :class:`~vmpooler.actors.pool.config_error.ConfigError` (the pool's
  configuration-error state after a permanent clone failure);
* :class:`~vmpooler.actors.pool.outcomes.Outcomes` — the answers of checks and destroys;
  :class:`~vmpooler.actors.pool.migrations.Migrations`,
  :class:`~vmpooler.actors.pool.request_vms.OnDemandVms` (requests' VMs),
  :class:`~vmpooler.actors.pool.stale_purge.StalePurge`,
  :class:`~vmpooler.actors.pool.standby.Standby` (the standby tier) and
  :class:`~vmpooler.actors.pool.standby_requests.StandbyForRequests` (requests taking it),
  :class:`~vmpooler.actors.pool.dead_letters.DeadLetters`.

A cycle starts with the provider's inventory and runs on a timer with vmpooler's back-off —
only a safety net: :class:`~vmpooler.actors.messages.PoolChanged` starts one at once, which
reads the override keys too (otherwise they are read periodically: ``PoolUpkeep``). Redis
being away never crashes the actor: it logs, backs off and catches up on the next cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pykka
import redis

from vmpooler.actors.cluster.ownership import OwnershipSettings
from vmpooler.actors.cluster.remote import Remote
from vmpooler.actors.cluster.router import Router
from vmpooler.actors.config import GlobalSettings, PoolConfig
from vmpooler.actors.messages import (
    CloneForRequest,
    CloneSlotFreed,
    PoolChanged,
    PoolHandedOver,
    ProviderCallFinished,
    ProviderOp,
    PurgeStaleVms,
    RefillPool,
    RenewLease,
    RunPoolCycle,
    StartDrain,
)
from vmpooler.actors.messages.address import Address
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.pool.brake import Brake
from vmpooler.actors.pool.checks import PoolChecks
from vmpooler.actors.pool.clones import Clones
from vmpooler.actors.pool.context import LOST_REASONS, PoolSettings, build
from vmpooler.actors.pool.cycle import PoolCycle
from vmpooler.actors.pool.dead_letters import DeadLetters
from vmpooler.actors.pool.failover_watch import Failover, FailoverGroup
from vmpooler.actors.pool.hostnames import HostnameGenerator
from vmpooler.actors.pool.migrations import Migrations
from vmpooler.actors.pool.outcomes import Outcomes
from vmpooler.actors.pool.request_vms import OnDemandVms
from vmpooler.actors.pool.stale_purge import StalePurge
from vmpooler.actors.pool.standby import Standby
from vmpooler.actors.pool.standby_requests import StandbyForRequests
from vmpooler.actors.pool.upkeep import PoolUpkeep
from vmpooler.actors.runtime.clock import Clock, Scheduler, Timer
from vmpooler.actors.runtime.executor import ActorExecutor
from vmpooler.actors.runtime.supervisor import ActorDirectory, PooledSupervisedActor
from vmpooler.actors.storage.lease_store import Fenced
from vmpooler.actors.storage.queues import Queue
from vmpooler.actors.storage.request_store import RequestStore
from vmpooler.actors.storage.store import Store
from vmpooler.actors.tracing import NULL_TRACER, Tracer
from vmpooler.providers.base import Capability

__all__ = ["LOST_REASONS", "PoolActor"]

log = logging.getLogger(__name__)

STANDBY_OPS = frozenset({ProviderOp.SUSPEND, ProviderOp.RESUME, ProviderOp.CHECK_PENDING})
"""The answers about a standby VM that go to its tier."""


class PoolActor(PooledSupervisedActor):
    """Owns the VMs of one pool. Construct with :meth:`pykka.Actor.start`.

    It has no thread of its own: its mailbox runs on ``executor``, shared with every other
    pooled actor of the system, one message at a time (see
    :mod:`vmpooler.actors.runtime.pooled`). Its handlers wait on Redis only, never on
    another actor; provider calls go to provider actors as messages."""

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
        executor: ActorExecutor,
        requests: RequestStore | None = None,
        supervisor: pykka.ActorRef[Any] | None = None,
        ownership: OwnershipSettings | None = None,
        remote: Remote | None = None,
        max_size: int | None = None,
        failover: FailoverGroup | None = None,
        standby_modes: frozenset[Capability] = frozenset(),
        tracer: Tracer = NULL_TRACER,
    ) -> None:
        address = Address.pool(pool.name)
        super().__init__(name=address.name, supervisor=supervisor, executor=executor)
        self.address = address
        self.router = Router(directory, remote)
        policy = PoolSettings.of(pool, settings, data_ttl_hours=data_ttl_hours,
                               max_size=max_size)
        parts = build(policy=policy, store=store,
                      requests=requests or RequestStore(store.client), directory=directory,
                      clock=clock, scheduler=scheduler, metrics=metrics,
                      self_ref=self.actor_ref, ownership=ownership, tracer=tracer)
        io, calls, vms = parts.io, parts.calls, parts.vms
        self.policy, self.io, self.calls = policy, io, calls
        self.renew_timer: Timer | None = None
        # the new owner takes the lease as soon as it is free
        def hand_over(owner: str) -> None:
            self.router.to_manager(owner, self.address, PoolHandedOver(pool.name))
        io.ownership.on_handed_over = hand_over
        self.ondemand = OnDemandVms(
            pool=pool.name, store=io.store, requests=io.requests, directory=directory,
            busy=calls.busy, forget=vms.forget, lost=io.lost, router=self.router)
        dead_letters = DeadLetters(policy, io, self.ondemand)
        brake = Brake(policy, io, calls=calls, vms=vms)
        self.standby = standby = Standby(policy, io, calls=calls, vms=vms,
                                         dead_letters=dead_letters, modes=standby_modes)
        self.upkeep = PoolUpkeep(policy, io, calls=calls,
                                 on_drain=lambda: brake.drain() + standby.drain(),
                                 standby_cost=standby.auto_cost())
        if self.upkeep.sizing is not None:
            standby.on_resumed = self.upkeep.sizing.resumed
        self.for_requests = StandbyForRequests(standby)
        self.clones = Clones(policy, io, calls=calls, vms=vms, hostnames=hostnames,
                             upkeep=self.upkeep, ondemand=self.ondemand,
                             dead_letters=dead_letters, standby=self.for_requests)
        self.migrations = Migrations(policy, io, calls=calls)
        upkeep = self.upkeep
        outcomes = Outcomes(policy, io, calls=calls, vms=vms, ondemand=self.ondemand,
                            dead_letters=dead_letters, brake=brake, size=lambda: upkeep.size,
                            standby=standby)
        self.answers: dict[ProviderOp, Callable[[ProviderCallFinished], None]] = {
            **outcomes.handlers(), ProviderOp.CLONE: self.clones.cloned,
            ProviderOp.MIGRATE: self.migrations.migrated,
            ProviderOp.PREPARE_TEMPLATE: self._template_prepared,
        }
        self.purge = StalePurge(policy, io, vms=vms, ondemand=self.ondemand,
                                dead_letters=dead_letters)
        checks = PoolChecks(policy, io, calls=calls, vms=vms, ondemand=self.ondemand,
                            dead_letters=dead_letters, brake=brake)
        watch = Failover(policy, io, upkeep=self.upkeep, clones=self.clones, group=failover)
        self.cycle = PoolCycle(policy, io, calls=calls, vms=vms, checks=checks, upkeep=self.upkeep,
                               clones=self.clones, ondemand=self.ondemand,
                               migrations=self.migrations, failover=watch, standby=standby)

    # -- mailbox ----------------------------------------------------------------------------
    def setup(self) -> None:
        # Know the request VMs before any message: a clone answer addressed to a crashed
        # predecessor may arrive before the first cycle.
        try:
            self.ondemand.load(self.io.store.members(self.policy.name, Queue.PENDING))
        except redis.RedisError as exc:
            log.warning("[!] [%s] could not read pending VMs at start: %s", self.policy.name, exc)
        self.actor_ref.tell(RunPoolCycle(generation=0))
        self._arm_renewal()

    def on_stop(self) -> None:
        self.cycle.cancel()
        self.clones.config_error.cancel()
        if self.renew_timer is not None:
            self.renew_timer.cancel()
        self.io.ownership.release()  # the next owner need not wait for the TTL

    def handle_relayed(self, message: object, hops: int) -> None:
        match message:
            case PoolChanged():  # the holder's actor passes it on no further
                self._changed(message, hops)
            case CloneForRequest():
                self._clone_for_request(message, hops)
            case _:
                self.handle(message)

    def handle(self, message: object) -> None:
        match message:
            case ProviderCallFinished():
                if message.vm is not None:
                    self.calls.finished(message.vm)
                if message.op is ProviderOp.LIST_VMS:
                    self._guard(self.cycle.listed, message)
                else:
                    self._guard(self._answered, message)
            case RunPoolCycle(generation=generation):
                if generation in (0, self.cycle.generation):
                    self.cycle.request()
            case PoolChanged():
                self._changed(message)
            case RenewLease():
                self._arm_renewal()
                self._refresh()
            case PoolHandedOver():
                log.debug("[%s] handed over by its former owner: taking the lease",
                          self.policy.name)
                self._refresh()
            case RefillPool():
                # A slot is offered; if this pool no longer needs it, refill passes it on.
                if self._acting():
                    self._guard(lambda: self.clones.refill(freed=1))
                elif (broker := self.io.directory.get(Address.slot_broker().name)) is not None:
                    broker.tell(CloneSlotFreed(1))
            case StartDrain(reason=reason):
                self._guard(self.upkeep.drain, reason or "drain requested")
            case CloneForRequest():
                self._clone_for_request(message)
            case PurgeStaleVms():
                if not self._acting():
                    self._refresh()  # the first round may come before the first cycle
                if self._acting():
                    self._guard(self.purge.purge, message)
                self.purge.answer(message)  # always: the housekeeper waits for every pool

    def _changed(self, message: PoolChanged, hops: int = 0) -> None:
        log.debug("[%s] woken: %s", self.policy.name, message.reason)
        self.upkeep.changed()  # the override keys may have changed: read them
        self.cycle.request()
        if not self._acting():  # the news is for its owner
            self.router.to_holder(self.address, message, hops=hops)

    def _clone_for_request(self, message: CloneForRequest, hops: int = 0) -> None:
        if self._acting():
            self._guard(self.clones.for_request, message)
        elif not self.router.to_holder(self.address, message, hops=hops):
            self.ondemand.clone_answered(message, None)  # nobody here owns the pool

    def _answered(self, msg: ProviderCallFinished) -> None:
        """Route a provider answer (not ``LIST_VMS``) to the part that sent the call. A
        ``busy`` refusal changes nothing: another call for the VM is running, and the next
        cycle looks again (a migration forgets it asked)."""
        if msg.failure is not None and msg.failure.busy:
            if msg.op is ProviderOp.MIGRATE:
                self.migrations.migrated(msg)
            return
        if msg.op in STANDBY_OPS and self.standby.owns(msg.vm or ""):
            self.standby.answered(msg)
            return
        if msg.op is ProviderOp.RESUME and self.for_requests.resumed(msg):
            return
        handler = self.answers.get(msg.op)
        if handler is not None:
            handler(msg)
        elif msg.failure is not None:
            log.error("[!] [%s] %s of '%s' failed: %s", self.policy.name, msg.op.value, msg.vm,
                      msg.failure.message)

    def _template_prepared(self, msg: ProviderCallFinished) -> None:
        self.upkeep.template_prepared(msg)
        self.clones.refill()

    def _guard(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except redis.RedisError as exc:
            self.cycle.redis_failed(exc)
        except Fenced as exc:  # the lease was lost: nothing was written
            self.io.ownership.fenced(exc)

    # -- ownership ----------------------------------------------------------------------------
    def _acting(self) -> bool:
        return self.io.ownership.acting

    def _arm_renewal(self) -> None:
        interval = self.io.ownership.renew_interval
        if interval is not None:  # a lease to renew (a sole owner has none)
            self.renew_timer = self.io.scheduler.tell_later(interval, self.actor_ref,
                                                             RenewLease())

    def _refresh(self) -> None:
        """Refresh the lease; a lease just taken starts a cycle at once."""
        own = self.io.ownership
        was = own.acting
        if own.refresh() and not was:
            self.cycle.request()
        elif not own.acting and not own.elsewhere:
            self.cycle.hurry(own.free_in)  # ours, its lease not yet free: at its expiry
