"""``PoolerSystem``: the facade a Python service embeds to run vmpooler's manager in-process.

    system = PoolerSystem.start(load_config("vmpooler.yaml"))
    ...
    system.pool_status("debian-12-x86_64")
    system.notify("debian-12-x86_64", "checked out two VMs")   # refill now
    system.stop()

``start`` connects to Redis (or starts the embedded redis-server when none is configured),
publishes the pools, zeroes the clone counters, and starts one provider actor per provider,
one pool actor per pool, the task actor, the housekeeper and the heartbeat, all under one
supervisor. The pool actors and the on-demand request actors share one bounded actor
executor (a few threads for all of them, however many pools and requests there are), which
the system starts first and stops last. ``stop`` stops them
in reverse order and releases every resource; it is idempotent. Every other method is
thread-safe and never blocks on an actor.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pykka
import redis

from vmpooler.actors.cluster.lease_policy import LeasePolicy
from vmpooler.actors.cluster.membership import Membership
from vmpooler.actors.cluster.relay import Relay
from vmpooler.actors.config import Config
from vmpooler.actors.factories import ActorFactories, SystemResources
from vmpooler.actors.fairness.intake import Intake, embedded_applicant
from vmpooler.actors.lifecycle import claim_redis, open_resources, start_children, stop_all
from vmpooler.actors.messages import (
    PoolChanged,
    RequestChanged,
    StartDrain,
    TasksQueued,
)
from vmpooler.actors.messages.address import Address
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.pool.hostnames import HostnameGenerator
from vmpooler.actors.provider.runtime import CallCounts
from vmpooler.actors.provider.work import resolves
from vmpooler.actors.runtime.clock import Clock, RealClock, Scheduler
from vmpooler.actors.runtime.executor import ActorExecutor
from vmpooler.actors.runtime.idle import all_asleep, wait_idle
from vmpooler.actors.runtime.restart_policy import RestartPolicy
from vmpooler.actors.runtime.supervisor import ActorDirectory, Supervisor
from vmpooler.actors.service.command_stream import consumer_factory
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.storage.heartbeat_store import HeartbeatStore, manager_id
from vmpooler.actors.storage.queues import Queue
from vmpooler.actors.storage.request_store import (
    DeleteOutcome,
    Entry,
    RequestOrigin,
    RequestRecord,
    RequestStore,
)
from vmpooler.actors.storage.store import Store
from vmpooler.actors.tracing import NULL_TRACER, Tracer
from vmpooler.providers.base import Provider

__all__ = ["PoolStatus", "PoolerSystem"]


@dataclass(frozen=True, slots=True)
class PoolStatus:
    """One pool's queue sizes as Redis holds them now, and its configured size."""

    name: str
    size: int
    ready: int
    pending: int
    running: int
    completed: int


class PoolerSystem:
    """The running actor system. Build it with :meth:`start`."""

    def __init__(self, config: Config, store: Store, clock: Clock, res: SystemResources) -> None:
        self.config = config
        self.manager_id = manager_id(clock.now())
        """This manager's member of ``vmpooler__manager__heartbeat``."""
        self.store = store = store.owned_by(self.manager_id)  # its clone slots are its own
        self.requests = RequestStore(store.client)
        self._intake = Intake(store.client, self.requests)  # the gate of request_ondemand
        self.clock = clock
        self.directory = ActorDirectory()
        self._res = res
        self._supervisor: pykka.ActorRef[Any] | None = None
        self._children: tuple[str, ...] = ()  # the supervisor's, once booted
        self._stopped = False
        self._proxies: dict[str, tuple[pykka.ActorRef[Any], Any]] = {}  # name: (ref, proxy)
        self.restart_policy = RestartPolicy()  # the Supervisor's and the on-demand manager's
        self.membership = Membership(
            manager=self.manager_id, heartbeats=HeartbeatStore(store.client), now=clock.now,
            stale_after=LeasePolicy.of(config.settings).stale_after,
            pools=[p.name for p in config.pools], monotonic=clock.monotonic)
        """Which managers are live and which owns each pool, shared by this one's actors."""
        self.relay = Relay(store.client, member=self.manager_id, directory=self.directory,
                           live=lambda: set(self.membership.live()))
        """Messages to and from the actors of other managers on the same Redis."""
        self._factories = ActorFactories(
            config=config, store=store, requests=self.requests, clock=clock,
            directory=self.directory, res=res, restart_policy=self.restart_policy,
            manager_id=self.manager_id, remote=self.relay, membership=self.membership)

    # -- lifecycle ------------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        config: Config,
        *,
        redis_client: redis.Redis | None = None,
        clock: Clock | None = None,
        scheduler: Scheduler | None = None,
        metrics: Metrics | None = None,
        providers: Mapping[str, Provider] | None = None,
        hostnames: HostnameGenerator | None = None,
        resolver: Callable[[str], bool] = resolves,
        task_interval: float = 5.0,
        consume_commands: bool = True,
        actor_executor: ActorExecutor | None = None,
        tracer: Tracer = NULL_TRACER,
    ) -> PoolerSystem:
        """Start everything and return at once (pools fill in the background).

        ``providers`` replaces the provider instances built from the configuration (by
        provider name); ``clock``/``scheduler`` default to the real ones. Raises
        ``redis.RedisError`` when Redis cannot be reached, and the provider's own error
        when a provider cannot be built, and
        :class:`~vmpooler.actors.service.ruby_guard.ForeignManagerError` (before anything is
        written) when a vmpooler (Ruby) manager is checking ready VMs on the same Redis;
        nothing is left running then. With
        ``consume_commands`` a consumer actor reads the API's command stream
        (:mod:`vmpooler.actors.service.command_stream`), for an API in another process.
        ``actor_executor`` runs the pooled actors (pool and request actors); by default the system
        starts its own (:data:`~vmpooler.actors.runtime.executor.DEFAULT_THREADS` threads)
        and stops it last; one passed in is started if need be and never stopped. Likewise
        a ``redis_client`` or ``metrics`` passed in is never closed, a failed start included
        (``vmpooler run`` retries the start while its API goes on using both). ``tracer``
        makes the actors' spans (docs/tracing.md); the caller shuts it down.
        """
        clock = clock or RealClock()
        res = open_resources(config, redis_client=redis_client, clock=clock,
                             scheduler=scheduler, metrics=metrics,
                             actor_executor=actor_executor, tracer=tracer)
        system = cls(config, Store(res.client), clock, res)
        try:
            system._boot(dict(providers or {}), hostnames or HostnameGenerator(), resolver,
                         task_interval, consume_commands)
        except BaseException:
            system.stop()
            raise
        return system

    def _boot(
        self, providers: dict[str, Provider], hostnames: HostnameGenerator,
        resolver: Callable[[str], bool], task_interval: float, consume_commands: bool,
    ) -> None:
        """Claim the Redis, start the supervisor (kept at once: a failed start stops it),
        then the children under it (:mod:`vmpooler.actors.lifecycle`)."""
        cfg, res = self.config, self._res
        claim_redis(res.client, cfg, self.store, self.manager_id, self.clock)
        self._supervisor = Supervisor.start(
            directory=self.directory, scheduler=res.scheduler, clock=self.clock,
            metrics=res.metrics,
            policy=self.restart_policy,
        )
        commands = consumer_factory(
            res.client, notify=self.notify, notify_tasks=self.notify_tasks,
            notify_request=self.notify_request, clock=self.clock) if consume_commands else None
        self._children = start_children(
            self._supervisor.proxy(), config=cfg, res=res, factories=self._factories,
            directory=self.directory, relay=self.relay, providers=providers,
            hostnames=hostnames, resolver=resolver, task_interval=task_interval,
            commands=commands)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every actor (the service actors, then requests, pools, tasks, providers, the
        supervisor; the actors of one group all at once, each waited for up to ``timeout``
        seconds), then the actor executor, and release what the system made: the Redis
        client, the embedded server, the providers, the metrics backend. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        stop_all(self._supervisor, self.directory, self.relay, self._res, timeout)

    def liveness(self) -> str | None:
        """None while the system runs: not stopped, its supervisor alive, and each actor it
        started alive or awaiting its restart; else why not (a child the supervisor gave up
        on has left the directory). Looks at actor refs only: never blocks, never reads Redis."""
        if self._stopped:
            return "the manager has stopped"
        if self._supervisor is None or not self._supervisor.is_alive():
            return "the supervisor is not running"
        gone = sorted(set(self._children) - set(self.directory.names()))
        return f"actors given up by the supervisor: {', '.join(gone)}" if gone else None

    # -- reads and commands ----------------------------------------------------------------------
    @property
    def metrics(self) -> Metrics:
        """The metrics backend the actors report to (shared; do not close it)."""
        return self._res.metrics

    @property
    def redis(self) -> redis.Redis:
        """The Redis client the system uses (shared; do not close it)."""
        return self._res.client

    @property
    def embedded_redis(self) -> EmbeddedRedis | None:
        """The embedded redis-server, when the system started one."""
        return self._res.embedded

    def pool_names(self) -> list[str]:
        """Configured pool names, in configuration order."""
        return [p.name for p in self.config.pools]

    def pool_status(self, pool: str) -> PoolStatus:
        """Queue sizes from Redis (one round trip). ``KeyError`` for an unknown pool."""
        cfg = self.config.pool(pool)
        sizes = self.store.queue_sizes(pool)
        return PoolStatus(pool, cfg.size, sizes[Queue.READY], sizes[Queue.PENDING],
                          sizes[Queue.RUNNING], sizes[Queue.COMPLETED])

    def ready_vms(self, pool: str) -> set[str]:
        """Names of the pool's ready VMs."""
        return self.store.members(pool, Queue.READY)

    def notify(self, pool: str, reason: str = "") -> bool:
        """Tell the pool's actor its state changed in Redis; it starts a cycle at once.

        Returns False if the pool has no running actor.
        """
        return self.directory.tell(Address.pool(pool).name, PoolChanged(pool, reason))

    def drain(self, pool: str, reason: str = "") -> bool:
        """Ask the pool's actor to move every ready and pending VM to completed."""
        return self.directory.tell(Address.pool(pool).name, StartDrain(pool, reason))

    def notify_request(self, request_id: str, reason: str = "", *,
                       traceparent: str = "") -> bool:
        """Tell the on-demand manager a request was created or deleted in Redis: it starts
        the request's actor, or passes the news on to it. ``traceparent``: the trace the
        request's actor joins (docs/tracing.md)."""
        return self.directory.tell(Address.ondemand().name,
                                   RequestChanged(request_id, reason, traceparent))

    def request_ondemand(self, pools: Mapping[str, int], *, request_id: str | None = None,
                         token: str | None = None, user: str | None = None,
                         origin: RequestOrigin | None = None, priority: str | None = None,
                         groups: Iterable[str] = ()) -> str | None:
        """Ask for VMs on demand (``{pool: count}``, configured pool names only) and return
        the request's id, or None if ``request_id`` is taken. Provisioning starts at once;
        follow it with :meth:`ondemand_request`. ``KeyError`` for an unknown pool;
        ``ValueError`` for a negative count, a request for no VM (every count 0) or an
        unknown ``priority``.

        The request passes the gate of the API's ``POST /ondemandvm``
        (:mod:`vmpooler.actors.fairness.intake`): the ``:quotas:`` limits and
        ``max_ondemand_requests_per_user`` of its user, who is ``user`` (the caller vouches
        for it, as a token would; its groups: ``groups`` and ``:quotas: members``), with
        ``priority`` (``high`` only for ``:quotas: high_priority``) and the user's share
        of clone capacity. ``origin``, instead of ``priority`` and ``groups``: who asks,
        its priority and share, written as given (docs/fairness.md). Without a user the
        request is a user of its own. A refusal raises
        :class:`~vmpooler.actors.fairness.intake.Refused` (``PriorityRefused`` for
        ``high``) and writes nothing."""
        for name in pools:
            self.config.pool(name)
        counts = {name: int(count) for name, count in pools.items()}
        if any(count < 0 for count in counts.values()):
            raise ValueError(f"negative count in on-demand request {counts}")
        if not any(counts.values()):
            raise ValueError("an on-demand request must ask for at least one VM")
        request_id = request_id or str(uuid.uuid4())
        entries = [Entry(name, name, count) for name, count in counts.items() if count]
        applicant = embedded_applicant(self.config.quotas, request_id, user=user,
                                       origin=origin, priority=priority, groups=groups,
                                       token=token)
        if not self._intake.request(
                self.config, request_id, entries, applicant, created=int(self.clock.now())):
            return None
        self.notify_request(request_id, "created")
        return request_id

    def ondemand_request(self, request_id: str) -> RequestRecord | None:
        """The request's status (None while in flight) and delivered VMs, or None."""
        return self.requests.read(request_id)

    def delete_ondemand(self, request_id: str) -> bool:
        """Delete a request (its VMs are destroyed). False if there is no such request."""
        outcome = self.requests.delete(request_id)
        if outcome is DeleteOutcome.DELETED:
            self.notify_request(request_id, "deleted")
        return outcome is not DeleteOutcome.NOT_FOUND

    def notify_tasks(self) -> bool:
        """Tell the task actor that disk/snapshot tasks were queued."""
        return self.directory.tell(Address.tasks().name, TasksQueued())

    def actor_ref(self, name: str) -> pykka.ActorRef[Any] | None:
        """The live actor named ``pool:<name>``, ``provider:<name>`` or ``tasks``."""
        return self.directory.get(name)

    def calls_in_flight(self) -> int:
        """Provider calls running or queued now, over every provider (asks each provider
        actor; not from inside an actor)."""
        return sum(counts[0] for counts in self._call_counts())

    def _call_counts(self) -> list[CallCounts]:
        found = []
        for name in self.directory.names():
            ref = self.directory.get(name) if Address.is_provider(name) else None
            if ref is None:
                continue
            cached = self._proxies.get(name)
            if cached is None or cached[0] is not ref:  # a restart makes a new actor
                with contextlib.suppress(pykka.ActorDeadError):
                    cached = self._proxies[name] = (ref, ref.proxy())
            if cached is None:
                continue
            with contextlib.suppress(pykka.ActorDeadError):
                found.append(cached[1].call_counts().get(timeout=10))
        return found

    def wait_idle(self, *, parked: Callable[[], int] = lambda: 0,
                  parked_calls: Callable[[], int] = lambda: 0, timeout: float = 30.0) -> None:
        """Return once every actor has handled its mail and no provider call is running but
        the ``parked()`` clones and the ``parked_calls()`` other calls (blocked until a fake
        clock moves: a simulated suspend or resume) and the calls queued behind them in the
        same worker pool; for a driver of a fake clock, before it moves time. Raises
        :class:`~vmpooler.actors.runtime.idle.IdleTimeoutError` after ``timeout`` seconds."""
        def refs() -> list[pykka.ActorRef[Any]]:
            return [r for r in map(self.directory.get, self.directory.names()) if r]

        def settled() -> bool:
            counts = self._call_counts()
            if any(c.calls != c.clones + c.pooled for c in counts):
                return False  # an inventory listing runs
            clones, calls = sum(c.clones for c in counts), sum(c.pooled for c in counts)
            if calls and not all_asleep(calls, parked_calls(), sum(c.call_workers for c in counts)):
                return False
            return not clones or all_asleep(clones, parked(), sum(c.clone_workers for c in counts))
        wait_idle(refs, settled=settled, executor=self._res.executor, timeout=timeout)
