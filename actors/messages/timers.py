"""Ticks of the manager-wide periodic actors (housekeeping, history, heartbeat)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "RecordHistory",
    "RunHealthCheck",
    "RunPurge",
    "SendHeartbeat",
]


@dataclass(frozen=True, slots=True)
class RunPurge:
    """Scheduler → housekeeper: start a purge of stale queue entries (``purge_interval``)."""


@dataclass(frozen=True, slots=True)
class RunHealthCheck:
    """Scheduler → housekeeper: run the queue health check (``health_check_interval``)."""


@dataclass(frozen=True, slots=True)
class RecordHistory:
    """Scheduler → history recorder: record every pool's point for the current interval."""


@dataclass(frozen=True, slots=True)
class SendHeartbeat:
    """Scheduler → heartbeat actor: write this manager's beat (``manager_heartbeat_interval``)."""
