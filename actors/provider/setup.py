"""How the system builds a provider's actor from the configuration: its worker runtime, call
timeouts, circuit breaker and health publishing, each setting the provider's own when its
``:providers:`` section has it, else the global ``:config:`` one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pykka
import redis

from vmpooler.actors.config import Config
from vmpooler.actors.messages.address import Address
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.provider.provider_actor import ProviderActor, ProviderRuntime
from vmpooler.actors.runtime.adaptive_timeout import CallTimeouts
from vmpooler.actors.runtime.breaker import CircuitBreaker
from vmpooler.actors.runtime.clock import Clock, Scheduler
from vmpooler.actors.runtime.supervisor import ActorDirectory
from vmpooler.actors.storage.provider_store import ProviderHealth, ProviderStore
from vmpooler.actors.tracing import NULL_TRACER, Tracer
from vmpooler.providers.base import Provider
from vmpooler.providers.dns import DnsPlugin

__all__ = ["provider_actor_factory"]


def provider_actor_factory(
    name: str, provider: Provider, dns: Mapping[str, DnsPlugin | None],
    resolver: Callable[[str], bool], *, config: Config, clock: Clock, scheduler: Scheduler,
    metrics: Metrics, client: redis.Redis, directory: ActorDirectory,
    tracer: Tracer = NULL_TRACER,
) -> Callable[[pykka.ActorRef[Any]], pykka.ActorRef[Any]]:
    """A supervisor child factory for provider ``name``. Every incarnation shares one
    :class:`ProviderRuntime` (its workers and in-flight calls) and one set of adaptive
    timeouts; each gets a fresh breaker."""
    s = config.settings
    pc = config.providers.get(name)
    overrides = dict(pc.settings) if pc is not None else {}

    def setting(key: str, default: Any) -> Any:
        return overrides.get(key, default)

    # Shared by every incarnation of this provider's actor (see ProviderRuntime).
    runtime = ProviderRuntime(name, clone_workers=s.task_limit,
                              call_workers=provider.max_concurrent_calls)
    cap = float(setting("provider_call_timeout", s.provider_call_timeout))
    timeouts = CallTimeouts(
        cap=cap, enabled=bool(setting("adaptive_timeout_enabled", s.adaptive_timeout_enabled)),
        minimum=float(setting("connection_pool_timeout_min", s.connection_pool_timeout_min)),
        maximum=float(setting("connection_pool_timeout_max", s.connection_pool_timeout_max)),
        initial=float(setting("connection_pool_timeout_initial",
                              s.connection_pool_timeout_initial)),
        probe=provider.probe_timeout,
    )
    interval = float(setting("connection_pool_monitor_interval",
                             s.connection_pool_monitor_interval))
    gauges = bool(setting("connection_pool_monitor_enabled",
                          s.connection_pool_monitor_enabled))
    provider_store = ProviderStore(client)

    def publish(health: ProviderHealth) -> None:
        provider_store.publish_health(health, ttl=3 * interval)

    def factory(supervisor: pykka.ActorRef[Any]) -> pykka.ActorRef[Any]:
        breaker = CircuitBreaker(
            name, clock=clock.monotonic, metrics=metrics,
            enabled=bool(setting("circuit_breaker_enabled", s.circuit_breaker_enabled)),
            failure_threshold=int(setting("circuit_breaker_failure_threshold",
                                          s.circuit_breaker_failure_threshold)),
            timeout=float(setting("circuit_breaker_timeout", s.circuit_breaker_timeout)),
            half_open_attempts=int(setting("circuit_breaker_half_open_attempts",
                                           s.circuit_breaker_half_open_attempts)),
        )
        return ProviderActor.start(
            name=name, provider=provider,
            dns_plugins={k: v for k, v in dns.items() if v is not None},
            clock=clock, scheduler=scheduler, metrics=metrics,
            breaker=breaker, clone_workers=s.task_limit,
            call_timeout=cap,
            resolve_reply_to=lambda pool: directory.get(Address.pool(pool).name),
            resolver=resolver, supervisor=supervisor, runtime=runtime,
            timeouts=timeouts, publish_health=publish, monitor_interval=interval,
            monitor_gauges=gauges, tracer=tracer,
        )

    return factory
