"""What every resource is given: configuration, Redis, commands, clock, metrics, auth."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import redis

from vmpooler.actors.config import Config
from vmpooler.actors.metrics.backends import Metrics, NullMetrics
from vmpooler.actors.placement.health import BackendHealth
from vmpooler.actors.runtime.clock import Clock, RealClock
from vmpooler.actors.tracing import NULL_TRACER, Tracer
from vmpooler.web.commands import Commands, NullCommands

__all__ = ["ApiContext"]


@dataclass
class ApiContext:
    """Shared, thread-safe collaborators of the API resources.

    ``redis`` is a client with a connection pool (decode_responses=True); ``rng`` draws
    random choices (alias selection, tokens) and is injectable for tests;
    ``tracer`` makes the spans of requests (no-op unless ``:tracing:`` is on);
    ``public_listener`` says the API listens where other hosts can reach it (set by the
    server from its bind; :mod:`vmpooler.web.pool_changes`), False in-process.
    """

    config: Config
    redis: redis.Redis
    commands: Commands = field(default_factory=NullCommands)
    clock: Clock = field(default_factory=RealClock)
    metrics: Metrics = field(default_factory=NullMetrics)
    tracer: Tracer = NULL_TRACER
    rng: random.Random = field(default_factory=random.SystemRandom)
    started_at: float = 0.0
    public_listener: bool = False
    _backends: BackendHealth | None = field(default=None, repr=False, compare=False)

    @property
    def backends(self) -> BackendHealth:
        """Which pools of a failover alias cannot deliver now (read through Redis, cached
        for a second; :mod:`vmpooler.actors.placement.health`)."""
        if self._backends is None:
            self._backends = BackendHealth(self.redis, self.clock)
        return self._backends

    @property
    def auth_configured(self) -> bool:
        """vmpooler's "auth configured": a truthy top-level ``:auth:``."""
        return bool(self.config.auth)
