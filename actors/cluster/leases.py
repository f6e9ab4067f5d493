"""This manager's end of one kind of lease: :class:`LeaseHolder`.

Pools (:class:`~vmpooler.actors.cluster.ownership.Ownership`) and in-flight on-demand
requests (:class:`~vmpooler.actors.cluster.request_leases.RequestLeases`) are each owned by
one manager at a time through a lease with a fencing token
(:mod:`vmpooler.actors.storage.lease_store`: the keys and scripts). Both take, renew and
release their leases through a :class:`LeaseHolder`, which knows the kind, this manager's id
and the TTL; what differs between them (when to take, hand over or give up) stays with
them.

Methods may raise ``redis.RedisError``; the holder keeps no state of its own beyond its
settings, so it may be shared by the threads of one manager.
"""

from __future__ import annotations

import logging

from vmpooler.actors.cluster.membership import dead_here
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.lease_store import Lease, LeaseState, LeaseStore

__all__ = ["LeaseHolder"]

log = logging.getLogger(__name__)


class LeaseHolder:
    """Takes, renews and releases the leases of ``kind`` (``"pool"``, ``"request"``) as
    ``manager``, each for ``ttl`` seconds."""

    def __init__(self, *, kind: str, manager: str, store: LeaseStore, ttl: float) -> None:
        self.kind = kind
        self.manager = manager
        self.store = store
        self.ttl = ttl

    @property
    def renew_interval(self) -> float:
        """Seconds between two renewals on a timer: a third of the TTL."""
        return self.ttl / 3.0

    def key(self, name: str) -> str:
        """The lease key of ``name``."""
        return schema.lease(self.kind, name)

    def acquire(self, name: str) -> LeaseState:
        """Take the lease of ``name`` if free (a new token), renew it if this manager holds
        it, else say who holds it and for how long."""
        return self.store.acquire(self.kind, name, self.manager, ttl=self.ttl)

    def release_dead(self, holding: Lease, name: str) -> bool:
        """Release ``holding`` when its holder is a process of this host that no longer
        exists (a dead process cannot write); True when it was released (logged)."""
        if not dead_here(holding.holder) or not self.store.release(holding):
            return False
        log.warning("[*] %s '%s': lease of '%s' (a process that no longer exists) released",
                    self.kind, name, holding.holder)
        return True

    def take(self, name: str) -> LeaseState:
        """:meth:`acquire`, and once more after :meth:`release_dead` when a dead process of
        this host holds the lease."""
        state = self.acquire(name)
        if not state.ours and self.release_dead(state.lease, name):
            state = self.acquire(name)
        return state

    def renew(self, lease: Lease) -> bool:
        """Extend ``lease`` by the TTL; False (nothing written) if it is no longer held."""
        return self.store.renew(lease, ttl=self.ttl)

    def renew_many(self, leases: list[Lease]) -> list[bool]:
        """:meth:`renew` each of ``leases`` in one round trip; whether each is still held."""
        return self.store.renew_many(leases, ttl=self.ttl)

    def release(self, lease: Lease) -> bool:
        """Give ``lease`` up; False (nothing written) if it was no longer held."""
        return self.store.release(lease)

    def holders(self, names: list[str]) -> dict[str, Lease | None]:
        """The current holding of each named lease (None: free), in one round trip."""
        return self.store.holders(self.kind, names)
