"""What a provider actor tells operators about its provider: breaker changes, connection
pool and timeouts (reference §4.11, connection-pool monitor).

:class:`ProviderHealthReporter` lives inside one provider actor and is called from its
thread only. As the breaker's ``on_change`` it logs one line per state change (never one
per refused call); it publishes a :class:`ProviderHealth` (to Redis, for ``/status`` and
the dashboard) on every change and every monitor tick, and on each tick emits vmpooler's
monitor gauges: ``connection_pool.available|in_use|utilization|waiting`` (plus
``connection_pool.critical`` at >= 90 % in use or more than 5 waiting, ``.warning`` at
>= 70 % or more than 2),
``circuit_breaker.state|failures`` and ``adaptive_timeout.current|p95`` (tagged ``op``),
all tagged ``provider``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.runtime.adaptive_timeout import CallTimeouts
from vmpooler.actors.runtime.breaker import STATE_GAUGE, BreakerState, CircuitBreaker
from vmpooler.actors.storage.provider_store import ProviderHealth
from vmpooler.providers.base import ConnectionPoolHealth

__all__ = ["ProviderHealthReporter"]

log = logging.getLogger(__name__)



class ProviderHealthReporter:
    """See the module docstring. ``publish`` must not raise for long (it is wrapped)."""

    def __init__(
        self,
        name: str,
        *,
        breaker: CircuitBreaker,
        timeouts: CallTimeouts,
        metrics: Metrics,
        now: Callable[[], float],
        pool_health: Callable[[], ConnectionPoolHealth | None],
        publish: Callable[[ProviderHealth], None] | None = None,
    ) -> None:
        self.name = name
        self.breaker = breaker
        self.timeouts = timeouts
        self.metrics = metrics
        self.now = now
        self.pool_health = pool_health
        self.publish = publish
        self.last_error: str | None = None
        self._since = now()
        breaker.on_change = self.changed
        self._tags = {"provider": name}

    def failure(self, message: str) -> None:
        """A failure about to be recorded against the breaker: the error its log and
        published state name if it opens it."""
        self.last_error = message

    def changed(self, before: BreakerState, state: BreakerState) -> None:
        """The breaker's ``on_change``: one log line and a fresh published state."""
        self._since = self.now()
        if state is BreakerState.OPEN:
            log.error("[!] [%s] circuit breaker %s after %d failures (last: %s); provider "
                      "calls refused for %.0fs", self.name,
                      "re-opened" if before is BreakerState.HALF_OPEN else "opened",
                      self.breaker.failure_count, self.last_error, self.breaker.retry_after())
        elif state is BreakerState.HALF_OPEN:
            log.warning("[*] [%s] circuit breaker half-open: trying the provider again",
                        self.name)
        else:
            log.warning("[*] [%s] circuit breaker closed: the provider answers again", self.name)
            self.last_error = None
        self._publish()

    def tick(self, *, gauges: bool = True) -> None:
        """Publish the state afresh and, with ``gauges``, emit the monitor's gauges."""
        health = self._connections()
        if gauges:
            self._gauges(health)
        self._publish(health)

    def _gauges(self, health: ConnectionPoolHealth | None) -> None:
        tags = self._tags
        if health is not None:
            self.metrics.gauge("connection_pool.available", health.available, tags=tags)
            self.metrics.gauge("connection_pool.in_use", health.in_use, tags=tags)
            self.metrics.gauge("connection_pool.utilization", health.utilization, tags=tags)
            self.metrics.gauge("connection_pool.waiting", health.waiting, tags=tags)
            if health.utilization >= 90 or health.waiting > 5:
                self.metrics.increment("connection_pool.critical", tags=tags)
            elif health.utilization >= 70 or health.waiting > 2:
                self.metrics.increment("connection_pool.warning", tags=tags)
        if self.breaker.enabled:
            self.metrics.gauge("circuit_breaker.state", STATE_GAUGE[self.breaker.state], tags=tags)
            self.metrics.gauge("circuit_breaker.failures", self.breaker.failure_count, tags=tags)
        for op, reading in self.timeouts.readings().items():
            op_tags = {**tags, "op": op.value}
            self.metrics.gauge("adaptive_timeout.current", reading.current, tags=op_tags)
            self.metrics.gauge("adaptive_timeout.p95", reading.p95, tags=op_tags)

    def snapshot(self, connections: ConnectionPoolHealth | None = None) -> ProviderHealth:
        return ProviderHealth(
            provider=self.name,
            breaker=self.breaker.state.value if self.breaker.enabled else "disabled",
            since=self._since, failures=self.breaker.failure_count,
            retry_after=self.breaker.retry_after(), last_error=self.last_error,
            connections=connections if connections is not None else self._connections(),
            updated=self.now(),
        )

    def _connections(self) -> ConnectionPoolHealth | None:
        try:
            return self.pool_health()
        except Exception:  # a provider's report must never break its actor
            log.debug("[%s] connection pool health unavailable", self.name, exc_info=True)
            return None

    def _publish(self, connections: ConnectionPoolHealth | None = None) -> None:
        if self.publish is None:
            return
        try:
            self.publish(self.snapshot(connections))
        except Exception as exc:  # Redis away: the next tick publishes again
            log.debug("[%s] provider state not published: %s", self.name, exc)
