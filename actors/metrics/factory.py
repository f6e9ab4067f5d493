"""Builds the metrics backend a configuration names (``:statsd:``, ``:graphite:``,
``:prometheus:`` or Datadog)."""

from __future__ import annotations

from collections.abc import Sequence

from vmpooler.actors.metrics.backends import Metrics, NullMetrics
from vmpooler.actors.metrics.push import DatadogMetrics, GraphiteMetrics, StatsdMetrics

__all__ = ["create_metrics"]


def create_metrics(
    backend: str, host: str | None, port: int | None, prefix: str, tags: Sequence[str]
) -> Metrics:
    """Build a backend: ``none`` | ``datadog`` | ``statsd`` | ``graphite`` | ``prometheus``
    (case-insensitive).

    Defaults: host ``localhost``, port 8125 (datadog, statsd) or 2003 (graphite).  ``tags``
    (``key:value`` strings) reach Datadog as constant tags and Prometheus as constant labels
    (``vmpooler_instance``); statsd and graphite have no place for them.
    Any other backend name raises ``ValueError``.
    """
    kind = backend.strip().lower()
    if kind == "none":
        return NullMetrics()
    address = host or "localhost"
    if kind == "datadog":
        return DatadogMetrics(address, port or 8125, namespace=prefix, constant_tags=tags)
    if kind == "statsd":
        return StatsdMetrics(address, port or 8125, prefix=prefix)
    if kind == "graphite":
        return GraphiteMetrics(address, port or 2003, prefix=prefix)
    if kind == "prometheus":  # prefix: the name prefix; tags: constant labels
        # imported here: prometheus_client is loaded only by sites that use it
        from vmpooler.actors.metrics.prometheus import PrometheusMetrics

        return PrometheusMetrics(prefix, constant_labels=tags)
    raise ValueError(
        f"unknown metrics backend {backend!r} (none, datadog, statsd, graphite, prometheus)")
