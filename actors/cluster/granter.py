"""Which manager grants on-demand clone slots: :class:`GrantLease`.

On-demand clone slots (``ondemand_clone_limit``) are shared out fairly by one queue
(docs/fairness.md, "Fair shares"). With several managers on one Redis that queue lives in
one of them, the *granter*: the holder of the lease ``vmpooler__lease__grants__ondemand``.
Every manager's request actors send their wants there (through the relay), and only the
granter grants; the others pass their requests' wants on.

What a caller may rely on:

* **One granter at a time**, as for pools and requests: the lease is taken with a fresh
  fencing token when free, renewed every third of the TTL, and lost past its TTL. A
  manager grants only while its last renewal is younger than the TTL less a renewal
  period (:attr:`GrantLease.granting`), so one paused past its lease stops granting
  before it learns it lost it.
* **Any change is seen.** :meth:`GrantLease.refresh` says whether the holding (holder and
  token) changed since the last look, so every manager, the new granter included, sends
  its requests' wants again: the new granter's queue is rebuilt from them. A new on-demand
  manager in the same process (its predecessor crashed) gives up a holding of its own at
  :meth:`GrantLease.start`, so taking it again draws a new token that the others notice.
* Grants made by an old granter are not lost: the slot counter in Redis stays the truth,
  and a grant nobody answers is granted again after ``GRANT_LOST_AFTER``.

:class:`SoleGranter` is the null object for a manager alone (built without leases): it
always grants and never changes. Used only on the on-demand manager's thread; methods may
raise ``redis.RedisError``.
"""

from __future__ import annotations

import logging

from vmpooler.actors.cluster.leases import LeaseHolder
from vmpooler.actors.runtime.clock import Clock
from vmpooler.actors.storage.lease_store import Lease, LeaseStore

__all__ = ["KIND", "THING", "GrantLease", "GrantRole", "SoleGranter"]

log = logging.getLogger(__name__)

KIND = "grants"
"""The lease kind of the granter (``vmpooler__lease__grants__ondemand``)."""
THING = "ondemand"
"""What the granter's lease is for: on-demand clone slots."""


class GrantLease:
    """This manager's view of the granter's lease, as ``manager``, for ``ttl`` seconds."""

    def __init__(self, *, manager: str, leases: LeaseStore, clock: Clock, ttl: float) -> None:
        self.manager = manager
        self.holder = LeaseHolder(kind=KIND, manager=manager, store=leases, ttl=ttl)
        self.clock = clock
        self.ttl = ttl
        self.lease: Lease | None = None  # our holding, while held
        self.renewed_at = float("-inf")  # monotonic time of the last successful take/renew
        self.seen: Lease | None = None  # the holding seen at the last refresh (any holder)

    @property
    def renew_interval(self) -> float:
        """Seconds between two refreshes: a third of the TTL."""
        return self.holder.renew_interval

    @property
    def granting(self) -> bool:
        """Whether this manager is the granter now: it holds the lease, renewed less than
        the TTL less one renewal period ago."""
        return (self.lease is not None
                and self.clock.monotonic() - self.renewed_at < self.ttl - self.renew_interval)

    @property
    def granter(self) -> str:
        """The manager id of the granter as last seen ('' when none was)."""
        return self.seen.holder if self.seen is not None else ""

    def start(self) -> None:
        """A new on-demand manager: give up a holding this manager's id still has (its
        predecessor here crashed with it), so that the next take draws a new token."""
        current = self.holder.store.holder(KIND, THING)
        if current is not None and current.holder == self.manager:
            self.holder.release(current)

    def refresh(self) -> bool:
        """Take the lease if free, renew it if ours, else note who holds it. True when the
        holding (holder or token) differs from the one seen at the last refresh."""
        before = self.seen
        state = self.holder.take(THING)
        self.seen = state.lease
        if state.ours:
            if state.taken:
                log.info("[*] [ondemand] this manager grants the on-demand clone slots now "
                         "(lease token %d)", state.lease.token)
            self.lease, self.renewed_at = state.lease, self.clock.monotonic()
        elif self.lease is not None:
            log.warning("[!] [ondemand] the on-demand clone slots are granted by '%s' now",
                        state.lease.holder)
            self.lease = None
        return before != self.seen

    def release(self) -> None:
        """Give the lease up (a clean stop): another manager takes it at its next look."""
        lease, self.lease = self.lease, None
        if lease is not None:
            self.holder.release(lease)


class SoleGranter:
    """The granter role of a manager alone: it always grants; nothing changes, nothing is
    renewed or released."""

    renew_interval: float | None = None
    granting = True

    def __init__(self, manager: str = "") -> None:
        self.granter = manager

    def start(self) -> None:
        return None

    def refresh(self) -> bool:
        return False

    def release(self) -> None:
        return None


GrantRole = GrantLease | SoleGranter
"""How an on-demand manager knows who grants: the lease, or :class:`SoleGranter`."""
