"""The parsed configuration: frozen, slotted dataclasses built once by ``load_config``.

Every value here has been validated and defaulted; nothing else in vmpooler needs to read
the YAML document or ``os.environ`` again. Mappings are read-only and sequences are tuples,
so a ``Config`` may be shared freely between threads and actors.

Settings are declared once: each field of :class:`GlobalSettings` and :class:`RedisSettings`
carries its YAML key (the field name), its environment variable, its type ("kind") and its
allowed range in ``dataclasses.field`` metadata, which drives validation and env overrides.

The sections are declared by concern: the ``:config:`` and ``:redis:`` settings in
:mod:`~vmpooler.actors.config.model_settings`, a pool's entry in
:mod:`~vmpooler.actors.config.model_pools`, the rest (providers, DNS, metrics, the whole
:class:`Config`) here. This module re-exports them all: import every name from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from vmpooler.actors.config._data import empty_mapping, freeze, mask_secrets
from vmpooler.actors.config.model_pools import (
    STANDBY_STATES,
    DemandSizing,
    PoolConfig,
    StandbyTier,
)
from vmpooler.actors.config.model_settings import (
    DEFAULT_HEALTH_THRESHOLDS,
    GlobalSettings,
    RedisSettings,
)
from vmpooler.actors.fairness.quota_policy import QuotaPolicy

__all__ = [
    "DEFAULT_HEALTH_THRESHOLDS",
    "DEFAULT_RATE_LIMITS",
    "STANDBY_STATES",
    "Config",
    "DemandSizing",
    "DnsConfig",
    "GlobalSettings",
    "MetricsSettings",
    "PoolConfig",
    "PrometheusSettings",
    "ProviderConfig",
    "RedisSettings",
    "StandbyTier",
    "TracingSettings",
]


DEFAULT_RATE_LIMITS: Mapping[str, Mapping[str, int]] = freeze(
    {
        "global_per_ip": {"limit": 100, "period": 60},
        "authenticated": {"limit": 500, "period": 60},
        "vm_creation": {"limit": 20, "period": 60},
        "vm_deletion": {"limit": 50, "period": 60},
    }
)


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """One ``:providers:`` entry. ``provider_class`` is the entry-point name that implements
    it (canonical spelling); ``settings`` holds every key of the entry as written."""

    name: str
    provider_class: str
    settings: Mapping[str, Any] = field(default_factory=empty_mapping)


@dataclass(frozen=True, slots=True)
class DnsConfig:
    """One ``:dns_configs:`` entry: its plugin class, the domain it serves, all its keys."""

    name: str
    dns_class: str
    domain: str | None = None
    settings: Mapping[str, Any] = field(default_factory=empty_mapping)


@dataclass(frozen=True, slots=True)
class PrometheusSettings:
    """``:prometheus:`` beyond the name prefix and the instance label.

    ``endpoint`` is the API's scrape path (``prometheus_endpoint``); ``multiprocess_dir``
    the directory every process of this vmpooler writes its samples to
    (``multiprocess_dir``, else ``$PROMETHEUS_MULTIPROC_DIR``, else
    ``<redis data_dir>/prometheus``).
    """

    endpoint: str = "/prometheus"
    multiprocess_dir: str = "./var/redis/prometheus"


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """The one active metrics backend: ``none``, ``datadog``, ``statsd``, ``graphite`` or
    ``prometheus``.

    Precedence when several sections are present: ``:datadog:``, ``:statsd:``, ``:graphite:``,
    ``:prometheus:``. For Prometheus, ``prefix`` is ``prometheus_prefix`` (the metric name
    prefix) and ``tags`` is ``("vmpooler_instance:<prefix>",)``, the constant label.
    """

    backend: str = "none"
    host: str | None = None
    port: int | None = None
    prefix: str = "vmpooler"
    tags: tuple[str, ...] = ()
    prometheus: PrometheusSettings | None = None


DEFAULT_JAEGER_HOST = "http://localhost:14268/api/traces"


@dataclass(frozen=True, slots=True)
class TracingSettings:
    """``:tracing:`` (vmpooler 3.x, docs/tracing.md). ``jaeger_host`` is the key as written
    (vmpooler's Jaeger collector URL); ``endpoint`` is the OTLP/HTTP traces URL spans go to
    unless an ``OTEL_EXPORTER_OTLP_*`` variable says otherwise: ``otlp_endpoint`` (ours)
    when set, else ``jaeger_host``, a Thrift collector URL (``…:14268/api/traces``) mapped
    to the same host's OTLP receiver (``…:4318/v1/traces``, ``mapped`` True).
    ``sample_ratio`` (ours) is the share of new traces kept (None: every one)."""

    enabled: bool = False
    jaeger_host: str = DEFAULT_JAEGER_HOST
    endpoint: str = "http://localhost:4318/v1/traces"
    mapped: bool = True
    sample_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class Config:
    """The whole validated configuration.

    ``raw`` is the merged document (plain keys, environment overrides applied, no defaults
    filled in); ``notes`` are non-fatal remarks for the log. ``rate_limits`` is the
    ``:rate_limits:`` section merged over vmpooler's defaults, per class. ``debug`` reflects
    ``VMPOOLER_DEBUG``; ``api_port`` ``PORT`` (4567); ``app_env`` ``APP_ENV``/``RACK_ENV``.
    """

    source: str
    settings: GlobalSettings = field(default_factory=GlobalSettings)
    redis: RedisSettings = field(default_factory=RedisSettings)
    pools: tuple[PoolConfig, ...] = ()
    providers: Mapping[str, ProviderConfig] = field(default_factory=empty_mapping)
    dns_configs: Mapping[str, DnsConfig] = field(default_factory=empty_mapping)
    auth: Mapping[str, Any] | None = None
    tagfilter: Mapping[str, str] = field(default_factory=empty_mapping)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    raw: Mapping[str, Any] = field(default_factory=empty_mapping)
    notes: tuple[str, ...] = ()
    rate_limits: Mapping[str, Mapping[str, int]] = field(
        default_factory=lambda: DEFAULT_RATE_LIMITS
    )
    debug: bool = False
    api_port: int = 4567
    app_env: str = "development"
    quotas: QuotaPolicy = field(default_factory=QuotaPolicy)  # ``:quotas:`` (ours)
    tracing: TracingSettings = field(default_factory=TracingSettings)  # ``:tracing:``

    def max_pool_size(self, pool: PoolConfig) -> int:
        """The largest size ``pool`` may have: its provider's ``max_pool_size`` when that is
        set (validated at load), else ``:config: max_pool_size``."""
        provider = self.providers.get(pool.provider)
        own = provider.settings.get("max_pool_size") if provider is not None else None
        return own if isinstance(own, int) and not isinstance(own, bool) else \
            self.settings.max_pool_size

    def pool(self, name: str) -> PoolConfig:
        """The pool called ``name`` (not an alias); raises ``KeyError`` if there is none."""
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(name)

    @property
    def pool_names(self) -> tuple[str, ...]:
        """Configured pool names in file order (aliases are not included)."""
        return tuple(pool.name for pool in self.pools)

    @property
    def aliases(self) -> Mapping[str, tuple[str, ...]]:
        """Alias → names of the pools that carry it, in pool order."""
        index: dict[str, list[str]] = {}
        for pool in self.pools:
            for alias in pool.alias:
                index.setdefault(alias, []).append(pool.name)
        return cast("Mapping[str, tuple[str, ...]]", freeze(index))

    def masked(self) -> dict[str, Any]:
        """A plain copy of ``raw`` with every secret value replaced by ``"********"``."""
        masked: dict[str, Any] = mask_secrets(self.raw)
        return masked
