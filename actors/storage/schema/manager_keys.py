"""Key names of the managers' own coordination and housekeeping: leases, heartbeats,
inboxes, the API's command stream, provider and queue health, dead letters.

Part of :mod:`vmpooler.actors.storage.schema`: import the names from there."""

from __future__ import annotations

from vmpooler.actors.storage.schema.prefix import PREFIX as _P

__all__ = [
    "commands",
    "dlq",
    "dlq_pattern",
    "health",
    "lease",
    "lease_token",
    "manager_heartbeat",
    "manager_inbox",
    "provider_health",
]



def lease(kind: str, name: str) -> str:
    """String (ours): the lease of one owned thing, ``kind`` ``pool``, ``request`` or
    ``grants`` (the granter of on-demand clone slots, name ``ondemand``).
    Value ``<token> <holder>`` (holder = manager id); it expires after the lease TTL unless
    its holder renews it (:mod:`vmpooler.actors.storage.lease_store`)."""
    return f"{_P}lease__{kind}__{name}"


def lease_token() -> str:
    """String (ours): the fencing-token counter; INCR once per lease taken, so tokens only
    grow."""
    return f"{_P}lease__token"


def manager_heartbeat() -> str:
    """Sorted set of live managers (ours): member = manager id (``host:pid:started``),
    score = epoch seconds of its last beat. Each manager beats its own member, prunes
    members older than the prune age and re-arms the key's expiry, so the key vanishes
    once no manager beats (:mod:`vmpooler.actors.storage.heartbeat_store`)."""
    return f"{_P}manager__heartbeat"


def manager_inbox(manager: str) -> str:
    """Stream (ours): messages other managers send to one manager's actors, one entry per
    message (fields ``to``, ``type``, ``body``; :mod:`vmpooler.actors.cluster.relay`). It
    expires an hour after its last entry, so a dead manager's inbox goes by itself."""
    return f"{_P}manager__inbox__{manager}"


def commands() -> str:
    """Stream of API commands for the managers' consumer group (ours; vmpooler has none)."""
    return f"{_P}commands"


def provider_health(provider: str) -> str:
    """Hash of one provider's breaker, connection pool and last error, written by its
    provider actor for ``/status`` (ours; expires when no manager refreshes it)."""
    return f"{_P}provider__{provider}"


def health() -> str:
    """Hash ``metrics`` (JSON), ``status`` (healthy, degraded, unhealthy), ``last_check``
    (RFC 3339): the manager's queue health check (reference §4.11); expires after 1 h."""
    return f"{_P}health"


def dlq(queue: str) -> str:
    """Sorted set of dead-letter entries for ``pending``, ``ready``, ``clone`` or (ours)
    ``standby``."""
    return f"{_P}dlq__{queue}"


def dlq_pattern() -> str:
    """SCAN pattern matching every dead-letter queue."""
    return f"{_P}dlq__*"
