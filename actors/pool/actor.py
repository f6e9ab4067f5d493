"""The actor that owns one pool: keeps it full of ready VMs and reaps every VM it holds.

Single writer: every transition of this pool's VMs happens here, one message at a time,
through a compare-and-set script of :mod:`vmpooler.actors.storage.store`. Provider work goes to the
pool's :class:`~vmpooler.actors.provider.actor.ProviderActor` as messages; the answers
come back as messages. At most one provider call per VM is outstanding
(:class:`~vmpooler.actors.pool.calls.ProviderCalls`), so two calls never act on one VM at
once, and nothing blocks this mailbox but Redis.

The actor itself is a short list of message handlers. The work is done by its
collaborators, plain objects it builds, which share one
:class:`~vmpooler.actors.pool.context.PoolContext` and run only inside this mailbox:

* :class:`~vmpooler.actors.pool.cycle.PoolCycle` — the cycle (reference §4.2), its timer and
  back-off; :class:`~vmpooler.actors.pool.checks.PoolChecks` — running, ready and vanished
  pending VMs;
* :class:`~vmpooler.actors.pool.upkeep.PoolUpkeep` — overrides, drains, template, excess,
  the empty flag; :class:`~vmpooler.actors.pool.clones.Clones` — refill, clone starts and
  their answers, with :class:`~vmpooler.actors.pool.config_error.ConfigError` (the pool's
  configuration-error state after a permanent clone failure);
* :class:`~vmpooler.actors.pool.outcomes.Outcomes` — the other provider answers;
  :class:`~vmpooler.actors.pool.migrations.Migrations`,
  :class:`~vmpooler.actors.pool.ondemand.OnDemandVms` (requests' VMs),
  :class:`~vmpooler.actors.pool.purge.StalePurge`,
  :class:`~vmpooler.actors.pool.dead_letters.DeadLetters`.

A cycle starts with the provider's inventory and runs on a timer with vmpooler's back-off —
only a safety net: :class:`~vmpooler.actors.messages.PoolChanged` starts one at once, which
reads the override keys too (otherwise they are read periodically: ``PoolUpkeep``). Redis
being away never crashes the actor: it logs, backs off and catches up on the next cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pykka
import redis

from vmpooler.actors.cluster.ownership import OwnershipSettings
from vmpooler.actors.cluster.remote import LocalOnly, Remote
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
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.pool.brake import Brake
from vmpooler.actors.pool.checks import PoolChecks
from vmpooler.actors.pool.clones import Clones
from vmpooler.actors.pool.context import LOST_REASONS, PoolContext
from vmpooler.actors.pool.cycle import PoolCycle
from vmpooler.actors.pool.dead_letters import DeadLetters
from vmpooler.actors.pool.failover_watch import Failover, FailoverGroup
from vmpooler.actors.pool.hostnames import HostnameGenerator
from vmpooler.actors.pool.migrations import Migrations
from vmpooler.actors.pool.ondemand import OnDemandVms
from vmpooler.actors.pool.outcomes import Outcomes
from vmpooler.actors.pool.purge import StalePurge
from vmpooler.actors.pool.upkeep import PoolUpkeep
from vmpooler.actors.runtime.clock import Clock, Scheduler, Timer
from vmpooler.actors.runtime.supervisor import ActorDirectory, SupervisedActor
from vmpooler.actors.storage.lease_store import POOL, Fenced
from vmpooler.actors.storage.request_store import RequestStore
from vmpooler.actors.storage.store import Store

__all__ = ["LOST_REASONS", "PoolActor"]

log = logging.getLogger(__name__)


class PoolActor(SupervisedActor):
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
        ownership: OwnershipSettings | None = None,
        remote: Remote | None = None,
        max_size: int | None = None,
        failover: FailoverGroup | None = None,
    ) -> None:
        super().__init__(name=f"pool:{pool.name}", supervisor=supervisor)
        self.remote: Remote = remote or LocalOnly()
        ctx = self.ctx = PoolContext.create(
            pool=pool, settings=settings, data_ttl_hours=data_ttl_hours, store=store,
            requests=requests or RequestStore(store.client), directory=directory, clock=clock,
            scheduler=scheduler, metrics=metrics, hostnames=hostnames, self_ref=self.actor_ref,
            ownership=ownership, max_size=max_size,
        )
        self.renew_timer: Timer | None = None
        # the new owner takes the lease as soon as it is free
        ctx.ownership.on_handed_over = lambda owner: self.remote.to_manager(
            owner, f"pool:{pool.name}", PoolHandedOver(pool.name))
        self.ondemand = OnDemandVms(
            pool=pool.name, store=ctx.store, requests=ctx.requests, directory=directory,
            busy=ctx.calls.busy, forget=ctx.vms.forget, lost=ctx.lost, remote=self.remote)
        dead_letters = DeadLetters(ctx, self.ondemand)
        brake = Brake(ctx)
        self.upkeep = PoolUpkeep(ctx, on_drain=brake.drain)
        self.clones = Clones(ctx, self.upkeep, self.ondemand, dead_letters)
        self.migrations = Migrations(ctx)
        self.outcomes = Outcomes(ctx, ondemand=self.ondemand, dead_letters=dead_letters,
                                 clones=self.clones, upkeep=self.upkeep,
                                 migrations=self.migrations, brake=brake)
        self.purge = StalePurge(ctx, self.ondemand, dead_letters)
        self.cycle = PoolCycle(ctx, checks=PoolChecks(ctx, self.ondemand, dead_letters, brake),
                               upkeep=self.upkeep, clones=self.clones, ondemand=self.ondemand,
                               migrations=self.migrations,
                               failover=Failover(ctx, self.upkeep, self.clones, failover))

    # -- mailbox ----------------------------------------------------------------------------
    def setup(self) -> None:
        # Know the request VMs before any message: a clone answer addressed to a crashed
        # predecessor may arrive before the first cycle.
        try:
            self.ondemand.load(self.ctx.store.members(self.ctx.name, "pending"))
        except redis.RedisError as exc:
            log.warning("[!] [%s] could not read pending VMs at start: %s", self.ctx.name, exc)
        self.actor_ref.tell(RunPoolCycle(generation=0))
        self._arm_renewal()

    def on_stop(self) -> None:
        self.cycle.cancel()
        self.clones.config_error.cancel()
        if self.renew_timer is not None:
            self.renew_timer.cancel()
        self.ctx.ownership.release()  # the next owner need not wait for the TTL

    def handle(self, message: Any) -> Any:
        if isinstance(message, ProviderCallFinished):
            if message.vm is not None:
                self.ctx.calls.finished(message.vm)
            if message.op is ProviderOp.LIST_VMS:
                self._guard(self.cycle.listed, message)
            else:
                self._guard(self.outcomes.on_outcome, message)
        elif isinstance(message, RunPoolCycle):
            if message.generation in (0, self.cycle.generation):
                self.cycle.request()
        elif isinstance(message, PoolChanged):
            log.debug("[%s] woken: %s", self.ctx.name, message.reason)
            self.upkeep.changed()  # the override keys may have changed: read them
            self.cycle.request()
            if not self._acting() and not message.forwarded:  # the news is for its owner
                self.remote.to_lease_holder(POOL, self.ctx.name, f"pool:{self.ctx.name}",
                                            replace(message, forwarded=True))
        elif isinstance(message, RenewLease):
            self._arm_renewal()
            self._refresh()
        elif isinstance(message, PoolHandedOver):
            log.debug("[%s] handed over by its former owner: taking the lease", self.ctx.name)
            self._refresh()
        elif isinstance(message, RefillPool):
            # A slot is offered; if this pool no longer needs it, refill passes it on.
            if self._acting():
                self._guard(lambda: self.clones.refill(freed=1))
            elif (broker := self.ctx.directory.get("slots")) is not None:
                broker.tell(CloneSlotFreed(1))
        elif isinstance(message, StartDrain):
            self._guard(self.upkeep.drain, message.reason or "drain requested")
        elif isinstance(message, CloneForRequest):
            if self._acting():
                self._guard(self.clones.for_request, message)
            elif message.forwarded or not self.remote.to_lease_holder(
                    POOL, self.ctx.name, f"pool:{self.ctx.name}",
                    replace(message, forwarded=True)):
                self.ondemand.clone_answered(message, None)  # nobody here owns the pool
        elif isinstance(message, PurgeStaleVms):
            if not self._acting():
                self._refresh()  # the first round may come before the first cycle
            if self._acting():
                self._guard(self.purge.purge, message)
            self.purge.answer(message)  # always: the housekeeper waits for every pool
        return None

    def _guard(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except redis.RedisError as exc:
            self.cycle.redis_failed(exc)
        except Fenced as exc:  # the lease was lost: nothing was written
            self.ctx.ownership.fenced(exc)

    # -- ownership ----------------------------------------------------------------------------
    def _acting(self) -> bool:
        return self.ctx.ownership.acting

    def _arm_renewal(self) -> None:
        interval = self.ctx.ownership.renew_interval
        if interval is not None:  # a lease to renew (a sole owner has none)
            self.renew_timer = self.ctx.scheduler.tell_later(interval, self.actor_ref,
                                                             RenewLease())

    def _refresh(self) -> None:
        """Refresh the lease; a lease just taken starts a cycle at once."""
        own = self.ctx.ownership
        was = own.acting
        if own.refresh() and not was:
            self.cycle.request()
        elif not own.acting and not own.elsewhere:
            self.cycle.hurry(own.free_in)  # ours, its lease not yet free: at its expiry
