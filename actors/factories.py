"""How the system builds each of its actors: one factory per supervised child.

A factory takes the supervisor's ref and starts a fresh instance; the Supervisor calls it
again for every restart, so each holds only what survives a restart (configuration, stores,
the clock, the shared resources). :class:`~vmpooler.actors.system.PoolerSystem` builds one
:class:`ActorFactories` and hands each factory to the Supervisor; nothing else uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pykka
import redis

from vmpooler.actors.cluster.granter import GrantLease
from vmpooler.actors.cluster.heartbeat import Heartbeat
from vmpooler.actors.cluster.lease_policy import LeasePolicy
from vmpooler.actors.cluster.membership import Membership
from vmpooler.actors.cluster.ownership import OwnershipSettings
from vmpooler.actors.cluster.remote import Remote
from vmpooler.actors.cluster.request_leases import RequestFence, RequestLeases
from vmpooler.actors.cluster.router import Router
from vmpooler.actors.config import Config, PoolConfig
from vmpooler.actors.messages import PoolChanged
from vmpooler.actors.messages.address import Address
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.ondemand.manager import OnDemandManager
from vmpooler.actors.ondemand.request import RequestActor
from vmpooler.actors.pool.failover_watch import failover_group
from vmpooler.actors.pool.hostnames import HostnameGenerator
from vmpooler.actors.pool.pool_actor import PoolActor
from vmpooler.actors.pool.slot_broker import SlotBroker
from vmpooler.actors.pool.task_actor import TaskActor
from vmpooler.actors.provider.setup import provider_actor_factory
from vmpooler.actors.runtime.clock import Clock, Scheduler
from vmpooler.actors.runtime.executor import ActorExecutor
from vmpooler.actors.runtime.restart_policy import RestartPolicy
from vmpooler.actors.runtime.supervisor import ActorDirectory
from vmpooler.actors.service.history_recorder import HistoryRecorder
from vmpooler.actors.service.housekeeping import Housekeeper
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.storage.heartbeat_store import HeartbeatStore, prune_age
from vmpooler.actors.storage.history_store import HistoryStore
from vmpooler.actors.storage.lease_store import LeaseStore
from vmpooler.actors.storage.request_store import RequestStore
from vmpooler.actors.storage.store import Store
from vmpooler.actors.storage.upkeep_store import UpkeepStore
from vmpooler.actors.tracing import NULL_TRACER, Tracer
from vmpooler.providers.base import Provider, ProviderContext
from vmpooler.providers.dns import DnsPlugin
from vmpooler.providers.registry import load_dns_class, load_provider_class

__all__ = ["ActorFactories", "Factory", "SystemResources"]

Factory = Callable[[pykka.ActorRef[Any]], pykka.ActorRef[Any]]
"""``factory(supervisor_ref)`` starts one instance of a supervised actor."""


@dataclass
class SystemResources:
    """What the system owns or was given, released by ``PoolerSystem.stop``."""

    scheduler: Scheduler
    owns_scheduler: bool
    metrics: Metrics
    client: redis.Redis
    owns_client: bool
    embedded: EmbeddedRedis | None
    executor: ActorExecutor = field(default_factory=ActorExecutor)  # runs pool and request actors
    owns_executor: bool = True
    owns_metrics: bool = True
    providers: dict[str, Provider] = field(default_factory=dict)
    dns: dict[str, DnsPlugin] = field(default_factory=dict)
    tracer: Tracer = NULL_TRACER  # given by the caller, never shut down by the system


@dataclass(frozen=True)
class ActorFactories:
    """The factories of one system's actors, over what they share."""

    config: Config
    store: Store
    requests: RequestStore
    clock: Clock
    directory: ActorDirectory
    res: SystemResources
    restart_policy: RestartPolicy
    manager_id: str
    remote: Remote  # the other managers' actors
    membership: Membership  # who is live and owns which pool (shared)

    def housekeeper(self) -> Factory:
        cfg, res = self.config, self.res
        upkeep = UpkeepStore(res.client)

        def factory(supervisor: pykka.ActorRef[Any]) -> pykka.ActorRef[Any]:
            return Housekeeper.start(
                settings=cfg.settings, pools=[p.name for p in cfg.pools], upkeep=upkeep,
                directory=self.directory, clock=self.clock, scheduler=res.scheduler,
                metrics=res.metrics, supervisor=supervisor,
            )

        return factory

    def heartbeat(self) -> Factory:
        settings, res = self.config.settings, self.res
        interval = settings.manager_heartbeat_interval

        def factory(supervisor: pykka.ActorRef[Any]) -> pykka.ActorRef[Any]:
            return Heartbeat.start(
                manager=self.manager_id, store=HeartbeatStore(res.client), interval=interval,
                prune_after=prune_age(interval, settings.manager_heartbeat_max_age),
                clock=self.clock, scheduler=res.scheduler, supervisor=supervisor,
                slots=self.store,
                stale_after=LeasePolicy.of(self.config.settings).stale_after,
            )

        return factory

    def history(self) -> Factory:
        pools, res = [p.name for p in self.config.pools], self.res
        interval = self.config.settings.history_interval
        membership, manager = self.membership, self.manager_id

        def owns(pool: str) -> bool:
            return membership.owner(pool) == manager

        def factory(supervisor: pykka.ActorRef[Any]) -> pykka.ActorRef[Any]:
            return HistoryRecorder.start(
                pools=pools, store=HistoryStore(res.client), interval=interval,
                clock=self.clock, scheduler=res.scheduler, supervisor=supervisor, owns=owns,
                demand=frozenset(p.name for p in self.config.pools if p.demand is not None),
            )

        return factory

    def build_provider(self, name: str) -> Provider:
        cfg = self.config
        pc = cfg.providers[name]
        pools = {p.name: dict(p.raw) for p in cfg.pools if p.provider == name}
        context = ProviderContext(
            name=name, settings=dict(pc.settings), pools=pools,
            global_settings=dict(cfg.settings.raw),
            dns_domains={p.name: p.domain for p in cfg.pools if p.provider == name},
            metrics=self.res.metrics,
        )
        return load_provider_class(pc.provider_class)(context)

    def dns_plugin(self, pool: PoolConfig) -> DnsPlugin | None:
        if pool.dns_plugin is None:
            return None
        if pool.dns_plugin not in self.res.dns:
            dc = self.config.dns_configs[pool.dns_plugin]
            settings = {**dict(dc.settings), "domain": dc.domain}
            self.res.dns[pool.dns_plugin] = load_dns_class(dc.dns_class)(dc.name, settings)
        return self.res.dns[pool.dns_plugin]

    def provider(
        self, name: str, provider: Provider, dns: Mapping[str, DnsPlugin | None],
        resolver: Callable[[str], bool],
    ) -> Factory:
        res = self.res
        return provider_actor_factory(
            name, provider, dns, resolver, config=self.config, clock=self.clock,
            scheduler=res.scheduler, metrics=res.metrics, client=res.client,
            directory=self.directory, tracer=res.tracer)

    def pool(
        self, pool: PoolConfig, hostnames: HostnameGenerator
    ) -> Factory:
        cfg, res = self.config, self.res
        own = hostnames.spawn()  # the pool actor's own: a Random is not shared across threads
        ownership = self.ownership()
        failover = failover_group(cfg, pool.name)

        def factory(supervisor: pykka.ActorRef[Any]) -> pykka.ActorRef[Any]:
            provider = res.providers.get(pool.provider)
            return PoolActor.start(
                pool=pool, settings=cfg.settings, data_ttl_hours=cfg.redis.data_ttl,
                store=self.store, directory=self.directory, clock=self.clock,
                scheduler=res.scheduler, metrics=res.metrics, hostnames=own,
                executor=res.executor, requests=self.requests, supervisor=supervisor,
                ownership=ownership, remote=self.remote, max_size=cfg.max_pool_size(pool),
                failover=failover,
                standby_modes=provider.capabilities if provider is not None else frozenset(),
                tracer=res.tracer,
            )

        return factory

    def slots(self) -> Factory:
        """The clone-slot broker (``slots``)."""

        def factory(supervisor: pykka.ActorRef[Any]) -> pykka.ActorRef[Any]:
            return SlotBroker.start(directory=self.directory, supervisor=supervisor)

        return factory

    def tasks(self, interval: float) -> Factory:
        """The task actor (``tasks``): disk, snapshot and migration tasks, looked for every
        ``interval`` seconds."""
        pool_providers = {p.name: p.provider for p in self.config.pools}

        def factory(supervisor: pykka.ActorRef[Any]) -> pykka.ActorRef[Any]:
            return TaskActor.start(
                store=self.store, directory=self.directory, pool_providers=pool_providers,
                clock=self.clock, scheduler=self.res.scheduler, interval=interval,
                supervisor=supervisor)

        return factory

    def ownership(self) -> OwnershipSettings:
        """Pool leases: this manager's id and its :class:`LeasePolicy`."""
        policy = LeasePolicy.of(self.config.settings)
        return OwnershipSettings(manager=self.manager_id, ttl=policy.ttl,
                                 stale_after=policy.stale_after, membership=self.membership)

    def ondemand(self) -> Factory:
        cfg, res = self.config, self.res
        pools = frozenset(p.name for p in cfg.pools)
        from_ready = frozenset(p.name for p in cfg.pools if p.from_ready(cfg.settings))

        router = Router(self.directory, self.remote)

        def refill(pool: str) -> None:
            """Wake the pool's actor (here or in the manager holding its lease)."""
            router.tell(Address.pool(pool),
                        PoolChanged(pool, "ready VMs taken by an on-demand request"))
        ceilings = {p.name: cfg.max_pool_size(p) for p in cfg.pools}

        def request_factory(request_id: str, manager: pykka.ActorRef[Any],
                            fence: RequestFence | None, traceparent: str) -> Any:
            return RequestActor.start(
                request_id=request_id, store=self.requests, settings=cfg.settings, pools=pools,
                data_ttl_hours=cfg.redis.data_ttl, manager=manager, clock=self.clock,
                scheduler=res.scheduler, metrics=res.metrics, executor=res.executor,
                fence=fence, from_ready=from_ready, refill=refill, ceilings=ceilings,
                tracer=res.tracer, traceparent=traceparent,
            )

        def factory(supervisor: pykka.ActorRef[Any]) -> pykka.ActorRef[Any]:
            own = self.ownership()
            leases = RequestLeases(manager=self.manager_id, leases=LeaseStore(res.client),
                                   heartbeats=HeartbeatStore(res.client), clock=self.clock,
                                   ttl=own.ttl, stale_after=own.stale_after)
            granter = GrantLease(manager=self.manager_id, leases=LeaseStore(res.client),
                                 clock=self.clock, ttl=own.ttl)
            return OnDemandManager.start(
                store=self.requests, directory=self.directory, request_factory=request_factory,
                clone_limit=cfg.settings.ondemand_clone_limit,
                sweep_interval=float(cfg.settings.check_loop_delay_min),
                data_ttl_hours=cfg.redis.data_ttl, clock=self.clock, scheduler=res.scheduler,
                metrics=res.metrics, supervisor=supervisor, policy=self.restart_policy,
                leases=leases, remote=self.remote, granter=granter,
            )

        return factory
