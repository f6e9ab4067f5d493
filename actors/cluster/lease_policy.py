"""How long a lease lasts and when a silent manager stops counting as live:
:class:`LeasePolicy`, from the ``:config:`` settings.

Both numbers are shared by every lease of one manager (pools and requests) and by its view of
who is live (membership, the heartbeat's return of a gone manager's clone slots).
"""

from __future__ import annotations

from dataclasses import dataclass

from vmpooler.actors.config import GlobalSettings
from vmpooler.actors.storage.heartbeat_store import stale_age

__all__ = ["LeasePolicy"]


@dataclass(frozen=True, slots=True)
class LeasePolicy:
    """``ttl``: seconds a lease lasts unless renewed; ``stale_after``: seconds after which a
    manager's heartbeat no longer counts it as live."""

    ttl: float
    stale_after: float

    @classmethod
    def of(cls, settings: GlobalSettings) -> LeasePolicy:
        """The TTL is ``manager_lease_ttl`` (default three heartbeat intervals). The stale
        age is ``manager_heartbeat_max_age`` when set, else three beat intervals but at most
        the TTL less one interval (two intervals at the default TTL, never fewer), so a dead
        manager is out of the rendezvous by the time its leases expire and its pools are
        served again within the TTL. A live manager counted out for a late beat loses nothing
        but its share for a while: its leases stay its own until it lets them go."""
        interval, max_age = settings.manager_heartbeat_interval, settings.manager_heartbeat_max_age
        ttl = float(settings.manager_lease_ttl or 3 * interval)
        if max_age:
            return cls(ttl, stale_age(interval, max_age))
        return cls(ttl, max(2.0 * interval, min(stale_age(interval, None), ttl - interval)))
