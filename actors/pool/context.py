"""What the parts of one pool actor are given, in three kinds.

* :class:`PoolSettings` — frozen values: the pool's configuration and the settings in effect
  for it (back-off, timeouts, lifetime, size limit). Safe to share, never changes.
* :class:`PoolIO` — the services it talks to: its stores (fenced by its lease when it has
  one), the clock and scheduler, metrics, the actor directory, its own ref and its lease.
  Frozen: the references never change (what they reach does).
* Two mutable tables, each with a single writer: the provider calls in flight
  (:class:`~vmpooler.actors.pool.calls.ProviderCalls`) and the per-VM caches
  (:class:`~vmpooler.actors.pool.vm_cache.VmCache`). They are passed explicitly to the
  collaborators that use them, and to no others.

:func:`build` makes all four for the pool actor; its collaborators
(:mod:`~vmpooler.actors.pool.cycle`, :mod:`~vmpooler.actors.pool.checks`, …) each take the
ones they use and run only inside the pool actor's mailbox, one message at a time, so the
tables need no lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pykka

from vmpooler.actors.cluster.ownership import OwnershipSettings, PoolOwnership, SoleOwner
from vmpooler.actors.config import GlobalSettings, PoolConfig
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.pool.calls import ProviderCalls
from vmpooler.actors.pool.lifecycle_rules import Backoff, LifetimePolicy
from vmpooler.actors.pool.vm_cache import VmCache
from vmpooler.actors.runtime.clock import Clock, Scheduler
from vmpooler.actors.runtime.supervisor import ActorDirectory
from vmpooler.actors.storage.provider_store import ProviderStore
from vmpooler.actors.storage.request_store import RequestStore
from vmpooler.actors.storage.store import Store
from vmpooler.actors.storage.upkeep_store import UpkeepStore
from vmpooler.actors.tracing import NULL_TRACER, Tracer

__all__ = ["LOST_REASONS", "PoolIO", "PoolParts", "PoolSettings", "build"]

LOST_REASONS = frozenset({
    "ready_ttl", "check_failed", "pending_timeout", "clone_failed", "purged", "drained",
    "excess", "vanished", "abandoned", "standby_ttl", "suspend_failed", "resume_failed",
})
"""The ``reason`` tag values of ``vm.lost`` (docs/architecture.md, "Service-level metrics")."""


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """The pool's configuration and the settings in effect for it; pool settings fall back
    to the global ones (:meth:`of`)."""

    pool: PoolConfig
    settings: GlobalSettings
    data_ttl: int  # seconds a finished VM's hash is kept
    backoff: Backoff
    lifetime: LifetimePolicy
    check_hostname: bool
    timeout_min: float
    notify_min: float
    max_size: int  # the pool's max_pool_size: no override makes it larger
    lost_after: float  # seconds after which an unanswered provider call is presumed lost

    @classmethod
    def of(cls, pool: PoolConfig, settings: GlobalSettings, *, data_ttl_hours: int,
           max_size: int | None = None) -> PoolSettings:
        """The policy of ``pool``. A provider answer older than ``2 x provider_call_timeout
        + 60`` s is presumed lost (its provider actor crashed): a call may wait
        ``provider_call_timeout`` in the provider's own queue (vCenter's) and then run as
        long again. ``max_size`` is the pool's ``max_pool_size`` (``Config.max_pool_size``;
        the global setting when None)."""
        def either(own: Any, default: Any) -> Any:
            return own if own is not None else default

        return cls(
            pool=pool, settings=settings, data_ttl=int(data_ttl_hours) * 3600,
            backoff=Backoff.of(
                either(pool.check_loop_delay_min, settings.check_loop_delay_min),
                either(pool.check_loop_delay_max, settings.check_loop_delay_max),
                either(pool.check_loop_delay_decay, settings.check_loop_delay_decay),
            ),
            lifetime=LifetimePolicy(settings.vm_lifetime),
            check_hostname=either(pool.check_hostname_for_mismatch,
                                  settings.check_ready_vm_hostname_for_mismatch),
            timeout_min=either(pool.timeout, settings.timeout),
            notify_min=either(pool.timeout_notification, settings.timeout_notification),
            max_size=either(max_size, settings.max_pool_size),
            lost_after=2 * settings.provider_call_timeout + 60.0,
        )

    @property
    def name(self) -> str:
        """The pool's name."""
        return self.pool.name

    def fqdn(self, vm: str) -> str | None:
        """The VM's fully qualified name in the pool's domain, or None without a domain."""
        return f"{vm}.{self.pool.domain}" if self.pool.domain else None


@dataclass(frozen=True, slots=True)
class PoolIO:
    """The services one pool actor's parts talk to. ``store`` and ``upkeep_store`` write
    behind the fence of ``ownership`` (its lease; a
    :class:`~vmpooler.actors.cluster.ownership.SoleOwner` admits every write);
    ``self_ref`` is the pool actor's own ref (answers and wake-ups are addressed to it)."""

    pool: str  # the pool's name, for metric tags
    store: Store
    requests: RequestStore
    provider_store: ProviderStore
    upkeep_store: UpkeepStore
    directory: ActorDirectory
    clock: Clock
    scheduler: Scheduler
    metrics: Metrics
    self_ref: pykka.ActorRef[Any]
    ownership: PoolOwnership = field(default_factory=SoleOwner)  # its lease, or sole owner
    tracer: Tracer = NULL_TRACER  # the spans of request clones (docs/tracing.md)

    def lost(self, reason: str, count: int = 1) -> None:
        """Count ``count`` VMs of this pool that left for good without ever being checked
        out (``vm.lost``, tags ``pool`` and ``reason``, one of :data:`LOST_REASONS`)."""
        if count > 0:
            self.metrics.increment("vm.lost", tags={"pool": self.pool, "reason": reason},
                                   value=count)


@dataclass(frozen=True, slots=True)
class PoolParts:
    """What :func:`build` makes: the policy, the I/O and the two mutable tables."""

    policy: PoolSettings
    io: PoolIO
    calls: ProviderCalls
    vms: VmCache


def build(
    *, policy: PoolSettings, store: Store, requests: RequestStore, directory: ActorDirectory,
    clock: Clock, scheduler: Scheduler, metrics: Metrics, self_ref: pykka.ActorRef[Any],
    ownership: OwnershipSettings | None = None, tracer: Tracer = NULL_TRACER,
) -> PoolParts:
    """The parts of the pool actor ``self_ref``. With ``ownership`` the pool is acted on
    only while this manager holds its lease, and ``store`` and ``upkeep_store`` write behind
    the lease's fence; without it (a lone embedded system, tests) the actor is the pool's
    :class:`~vmpooler.actors.cluster.ownership.SoleOwner` (always acting, unfenced)."""
    pool = policy.pool
    calls = ProviderCalls(pool=pool.name, provider=pool.provider, directory=directory,
                          clock=clock, reply_to=self_ref, lost_after=policy.lost_after)
    owner: PoolOwnership = SoleOwner() if ownership is None else ownership.build(
        pool.name, store.client, clock, busy=lambda: bool(calls.busy))
    store = store.with_fence(owner.fence)
    upkeep_store = UpkeepStore(store.client).with_fence(owner.fence)
    io = PoolIO(pool=pool.name, store=store, requests=requests,
                provider_store=ProviderStore(store.client), upkeep_store=upkeep_store,
                directory=directory, clock=clock, scheduler=scheduler, metrics=metrics,
                self_ref=self_ref, ownership=owner, tracer=tracer)
    return PoolParts(policy=policy, io=io, calls=calls, vms=VmCache(store))
