"""How a :class:`~vmpooler.actors.system.PoolerSystem` starts and stops, step by step.

Start, in this order: :func:`open_resources` (the embedded redis-server when one is
configured, the Redis client, the scheduler, the metrics backend, the actor executor),
:func:`claim_redis` (the Ruby guard before anything is written, the first heartbeat,
the dead managers' clone slots given back, the pools published), then, under the
supervisor the facade starts, :func:`start_children` (the providers, the slot broker, the
pools, the on-demand manager, tasks, housekeeping, heartbeat, history, the relay, the
startup purges, the command consumer). :func:`stop_all` stops them in the reverse order
and releases what the system owns. The facade keeps its state; these functions keep none.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pykka
import redis

from vmpooler.actors.cluster.lease_policy import LeasePolicy
from vmpooler.actors.cluster.membership import live_managers
from vmpooler.actors.cluster.relay import Relay
from vmpooler.actors.config import Config, PoolConfig
from vmpooler.actors.factories import ActorFactories, SystemResources
from vmpooler.actors.messages import StopSupervising
from vmpooler.actors.messages.address import Address
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.metrics.factory import create_metrics
from vmpooler.actors.pool.hostnames import HostnameGenerator
from vmpooler.actors.provider.startup_purge import request_startup_purges
from vmpooler.actors.runtime.clock import Clock, Scheduler, ThreadScheduler
from vmpooler.actors.runtime.executor import ActorExecutor
from vmpooler.actors.runtime.supervisor import ActorDirectory
from vmpooler.actors.service.ruby_guard import refuse_beside_foreign_manager
from vmpooler.actors.storage.connection import connect_configured
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.storage.heartbeat_store import HeartbeatStore, prune_age
from vmpooler.actors.storage.store import Store
from vmpooler.actors.tracing import NULL_TRACER, Tracer
from vmpooler.providers.base import Provider

__all__ = ["ChildFactory", "claim_redis", "open_resources", "start_children", "stop_all"]

# The manager's start and stop lines are the facade's: they keep its logger's name.
log = logging.getLogger("vmpooler.actors.system")

ChildFactory = Callable[[pykka.ActorRef[Any]], pykka.ActorRef[Any]]
"""A supervisor child factory: given the supervisor, starts one incarnation of an actor."""


def open_resources(
    config: Config, *, redis_client: redis.Redis | None, clock: Clock,
    scheduler: Scheduler | None, metrics: Metrics | None,
    actor_executor: ActorExecutor | None, tracer: Tracer = NULL_TRACER,
) -> SystemResources:
    """What a system runs on, its executor started: the ones given, else its own (the
    embedded redis-server when the configuration asks for one, a client connected as
    configured, a :class:`ThreadScheduler`, the configured metrics backend, an executor),
    each marked as owned or not. Raises what the connection raises, the embedded server
    stopped first; nothing else it opened is left running then."""
    embedded = None
    client = redis_client
    if client is None:
        address = None
        if config.redis.embedded:
            embedded = EmbeddedRedis(data_dir=Path(config.redis.data_dir),
                                     password=config.redis.password).start()
            address = ("127.0.0.1", embedded.port)
        try:
            client = connect_configured(config.redis, address=address)
        except BaseException:
            if embedded is not None:
                embedded.stop()
            raise
    m = config.metrics
    res = SystemResources(
        scheduler=scheduler or ThreadScheduler(clock), owns_scheduler=scheduler is None,
        metrics=metrics or create_metrics(m.backend, m.host, m.port, m.prefix, m.tags),
        client=client, owns_client=redis_client is None, embedded=embedded,
        owns_metrics=metrics is None, tracer=tracer,
    )
    if actor_executor is not None:
        res.executor, res.owns_executor = actor_executor, False
    res.executor.start()
    return res


def claim_redis(client: redis.Redis, config: Config, store: Store, manager_id: str,
                clock: Clock) -> None:
    """Take this manager's place on the Redis before any actor starts: refuse (raising
    :class:`~vmpooler.actors.service.ruby_guard.ForeignManagerError`, nothing written) beside
    a running vmpooler (Ruby) manager; beat once, so the others count it live from now on;
    give back the clone slots of the managers gone (and forget in-flight migrations when
    no other manager is live); publish the configured pools and forget the others."""
    # Before anything is written: never beside a running vmpooler (Ruby) manager.
    refuse_beside_foreign_manager(client, config, clock.now())
    # Beat first: from now on the others count this manager live (its clone slots too).
    heartbeats = HeartbeatStore(client)
    settings = config.settings
    heartbeats.beat(manager_id, clock.now(), prune_after=prune_age(
        settings.manager_heartbeat_interval, settings.manager_heartbeat_max_age))
    # Several managers share the clone counters: give back the dead ones' slots, never
    # zero the counters under the live ones.
    others = live_managers(heartbeats, clock.now(),
                           LeasePolicy.of(settings).stale_after) - {manager_id}
    gone = store.slot_owners() - others - {manager_id}
    pooled, ondemand, forgotten = store.fold_slots(gone)
    if not others:  # in-flight migrations can only be a dead manager's
        store.forget_migrations()
    log.info("[*] [manager] %d other manager(s) live; clones in flight: %d pooled, "
             "%d on-demand; %d slot(s) of %d manager(s) gone given back", len(others),
             pooled, ondemand, forgotten, len(gone))
    removed = store.publish_pools({p.name: _published(p) for p in config.pools})
    for name in removed:
        log.info("[*] [%s] pool is no longer configured; forgotten", name)


def start_children(
    sup: Any, *, config: Config, res: SystemResources, factories: ActorFactories,
    directory: ActorDirectory, relay: Relay, providers: Mapping[str, Provider],
    hostnames: HostnameGenerator, resolver: Callable[[str], bool], task_interval: float,
    commands: ChildFactory | None,
) -> tuple[str, ...]:
    """Start the system's actors under the supervisor proxy ``sup``, each registered before
    the next starts: one provider actor per provider (``providers`` by name, else built
    from the configuration; kept in ``res.providers``), the slot broker, one pool actor per
    pool, the on-demand manager, tasks, housekeeping, heartbeat, history; then the relay
    and the startup purges; then the ``commands`` consumer, if any. Returns the names of
    the actors started (the on-demand request actors excepted)."""
    for name in sorted({p.provider for p in config.pools}):
        provider = providers.get(name) or factories.build_provider(name)
        res.providers[name] = provider
        dns = {p.name: factories.dns_plugin(p) for p in config.pools if p.provider == name}
        sup.start_child(Address.provider(name).name,
                        factories.provider(name, provider, dns, resolver)).get()
    sup.start_child(Address.slot_broker().name, factories.slots()).get()
    for pool in config.pools:
        sup.start_child(Address.pool(pool.name).name, factories.pool(pool, hostnames)).get()
    sup.start_child(Address.ondemand().name, factories.ondemand()).get()
    sup.start_child(Address.tasks().name, factories.tasks(task_interval)).get()
    sup.start_child("housekeeping", factories.housekeeper()).get()
    sup.start_child("heartbeat", factories.heartbeat()).get()
    sup.start_child("history", factories.history()).get()
    relay.start()  # once the actors it delivers to are registered
    request_startup_purges(config, directory)
    if commands is not None:
        sup.start_child("commands", commands).get()
    children = tuple(n for n in directory.names() if not Address.is_request(n))
    log.info("[*] [manager] started: %d pools, %d providers", len(config.pools),
             len(res.providers))
    return children


def stop_all(supervisor: pykka.ActorRef[Any] | None, directory: ActorDirectory, relay: Relay,
             res: SystemResources, timeout: float) -> None:
    """Stop every actor (the service actors, then requests, pools, tasks, the slot broker,
    providers, the supervisor; the actors of one group all at once, each waited for up to
    ``timeout`` seconds), the relay, then the executor and scheduler the system owns, and
    close the providers, DNS plugins, and the metrics backend, Redis client and embedded
    server it owns. Errors while closing are logged at debug level, never raised.
    ``supervisor`` None: a start that failed before it (its caller says why)."""
    names = directory.names()
    # Stopped group by group, in this order; the actors of one group all at once (the
    # pooled ones share the executor's threads: one by one, each stop would wait for
    # its turn behind every other actor's mail).
    groups = [
        ["heartbeat"], ["history"], ["commands"], ["housekeeping"], [Address.ondemand().name],
        [n for n in names if Address.is_request(n)],
        [n for n in names if Address.is_pool(n)], [Address.tasks().name],
        [Address.slot_broker().name],
        [n for n in names if Address.is_provider(n)],
    ]
    # The blocking asks and stops below run on the caller's thread, never in a mailbox.
    if supervisor is not None:  # it restarts nothing while its children stop
        with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
            supervisor.ask(StopSupervising(), timeout=timeout)
    for group in groups:
        _stop_together([ref for ref in map(directory.get, group) if ref is not None], timeout)
    if supervisor is not None:
        supervisor.stop(block=True, timeout=timeout)
    relay.stop(timeout=timeout)
    if res.owns_executor:  # after every actor it runs
        res.executor.stop(timeout=timeout)
    if res.owns_scheduler:
        res.scheduler.stop()
    for provider in res.providers.values():
        _quietly(provider.close)
    for plugin in res.dns.values():
        _quietly(plugin.close)
    if res.owns_metrics:
        _quietly(res.metrics.close)
    if res.owns_client:
        _quietly(res.client.close)
    if res.embedded is not None:
        res.embedded.stop()
    if supervisor is None:  # a start that failed early (Redis): its caller says why
        log.debug("[*] [manager] start abandoned")
    else:
        log.info("[*] [manager] stopped")


def _published(pool: PoolConfig) -> dict[str, str]:
    """The pool's keys as vmpooler publishes them in ``vmpooler__pool__<pool>``."""
    fields: dict[str, str] = {}
    for key, value in pool.raw.items():
        if value is None:
            continue
        if isinstance(value, list | tuple):
            fields[key] = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            fields[key] = "true" if value else "false"
        else:
            fields[key] = str(value)
    if pool.domain:
        fields["domain"] = pool.domain
    return fields


def _stop_together(refs: list[pykka.ActorRef[Any]], timeout: float) -> None:
    """Ask every actor of ``refs`` to stop at once, then wait for each up to ``timeout``
    seconds (one that does not stop in time is left to stop on its own)."""
    futures: list[pykka.Future[bool]] = []
    for ref in refs:
        with contextlib.suppress(pykka.ActorDeadError):
            futures.append(ref.stop(block=False))
    for future in futures:
        with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
            future.get(timeout=timeout)


def _quietly(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception:
        log.debug("error while stopping", exc_info=True)
