"""Redis operations about providers: their published health and the migration slots.

``vmpooler__provider__<name>`` (ours) is a hash a provider actor rewrites on every breaker
change and monitor tick, expiring after three monitor intervals so that a stopped manager's
last word does not linger; the API reads it for ``/status``. ``vmpooler__migration`` is
vmpooler's set of VMs migrating now, bounded by ``migration_limit``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.replies import fields
from vmpooler.actors.storage.schema import Scripts
from vmpooler.providers.base import ConnectionPoolHealth

__all__ = ["ProviderHealth", "ProviderStore", "health_fields"]


@dataclass(frozen=True, slots=True)
class ProviderHealth:
    """One provider's state as operators see it.

    ``breaker`` is ``closed``, ``open`` or ``half_open`` (``disabled`` when the breaker is
    off); ``since`` the epoch of its last change; ``last_error`` the message of the last
    failure that counted against it; ``connections`` the provider's pool, when it has one.
    """

    provider: str
    breaker: str
    since: float
    failures: int
    retry_after: float
    last_error: str | None
    connections: ConnectionPoolHealth | None
    updated: float


def health_fields(health: ProviderHealth) -> dict[str, str]:
    """The hash fields of one published :class:`ProviderHealth`."""
    fields = {
        "circuit_breaker": health.breaker,
        "since": f"{health.since:.0f}",
        "failures": str(health.failures),
        "retry_after": f"{health.retry_after:.0f}",
        "last_error": health.last_error or "",
        "updated": f"{health.updated:.0f}",
    }
    if health.connections is not None:
        c = health.connections
        fields.update({"connections_size": str(c.size), "connections_in_use": str(c.in_use),
                       "connections_waiting": str(c.waiting)})
    return fields


class ProviderStore:
    """Provider-level keys. Thread-safe (redis-py clients are)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._reserve = client.register_script(Scripts.RESERVE_MIGRATION)
        self._set_fields = client.register_script(Scripts.SET_FIELDS_IF_EXISTS)

    def publish_health(self, health: ProviderHealth, *, ttl: float) -> None:
        """Replace the provider's published state; it expires after ``ttl`` seconds."""
        key = schema.provider_health(health.provider)
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(key)
        pipe.hset(key, mapping=fields(health_fields(health)))
        pipe.expire(key, max(1, int(ttl)))
        pipe.execute()

    def read_health(self, providers: Iterable[str]) -> dict[str, dict[str, str]]:
        """Published state by provider name (providers with none are left out)."""
        names = list(providers)
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(schema.provider_health(name))
        found: dict[str, dict[str, str]] = {}
        for name, raw in zip(names, pipe.execute(), strict=True):
            if raw:
                found[name] = {_text(k): _text(v) for k, v in raw.items()}
        return found

    def reserve_migration(self, vm: str, limit: int) -> bool:
        """Join ``vmpooler__migration`` if fewer than ``limit`` VMs migrate now."""
        return bool(self._reserve(keys=[schema.migration()], args=[limit, vm]))

    def release_migration(self, vm: str) -> None:
        self.client.srem(schema.migration(), vm)

    def record_migration(self, vm: str, fields: Mapping[str, str]) -> None:
        """Write the migration's outcome (``host``, ``migrated``, times) on a VM that still
        exists; a VM returned meanwhile is not recreated."""
        args = [item for pair in fields.items() for item in pair]
        if args:
            self._set_fields(keys=[schema.vm(vm)], args=args)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
