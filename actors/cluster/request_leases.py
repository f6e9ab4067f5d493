"""Which manager runs an in-flight on-demand request: :class:`RequestLeases`.

Several managers may share one Redis; each in-flight request is run by one of them, the
holder of the request's lease (``vmpooler__lease__request__<id>``,
:mod:`vmpooler.actors.storage.lease_store`). The on-demand manager takes a request's lease
before it starts the request's actor, renews every lease it holds in one round trip every
third of the TTL, and releases it when the request finishes. The request's actor writes
behind the lease's fence (:class:`RequestFence`), so once the lease is lost (the manager was
paused past the TTL, say) its late writes are refused by the scripts.

Who takes a request: the live manager the rendezvous hash names
(:func:`~vmpooler.actors.cluster.membership.rendezvous_owner`), so new requests spread over
the managers. A request stays with its holder until it finishes (requests are short-lived:
no handover when a manager joins). A request no manager has taken after :data:`PATIENCE` of
this manager's sweeps (its rendezvous owner is slow, or the managers' views of who is live
differ for a while) is taken by whoever sees it first. A dead manager's leases expire after
the TTL (at once when it was a process of this host), and the survivors take its requests.

Used only on the on-demand manager's thread. Methods may raise ``redis.RedisError``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from vmpooler.actors.cluster.leases import LeaseHolder
from vmpooler.actors.cluster.membership import live_managers, rendezvous_owner
from vmpooler.actors.runtime.clock import Clock
from vmpooler.actors.storage.heartbeat_store import HeartbeatStore
from vmpooler.actors.storage.lease_store import REQUEST, Lease, LeaseStore

__all__ = ["KIND", "PATIENCE", "RequestFence", "RequestLeases", "RequestOwnership",
           "SoleRequests"]

log = logging.getLogger(__name__)

KIND = REQUEST
"""The lease kind of requests (``vmpooler__lease__request__<id>``)."""
PATIENCE = 3
"""Sweeps a request may wait untaken before a manager other than its rendezvous owner
takes it."""


@dataclass(frozen=True, slots=True)
class RequestFence:
    """The fence of one request's writes: its lease key and the value held (a ``Fence``)."""

    key: str
    value: str

    def held(self) -> str | None:
        return self.value

    @classmethod
    def of(cls, lease: Lease) -> RequestFence:
        return cls(lease.key, lease.value)


class RequestLeases:
    """This manager's request leases."""

    def __init__(self, *, manager: str, leases: LeaseStore, heartbeats: HeartbeatStore,
                 clock: Clock, ttl: float, stale_after: float) -> None:
        self.manager = manager
        self.holder = LeaseHolder(kind=KIND, manager=manager, store=leases, ttl=ttl)
        self.heartbeats = heartbeats
        self.clock = clock
        self.ttl = ttl
        self.stale_after = stale_after
        self.held: dict[str, Lease] = {}
        self.untaken: dict[str, int] = {}  # request -> sweeps it was seen with no holder

    @property
    def renew_interval(self) -> float | None:
        """Seconds between two renewals: a third of the TTL."""
        return self.holder.renew_interval

    def holds(self, request_id: str) -> bool:
        """Whether this manager holds the request's lease."""
        return request_id in self.held

    def fence(self, request_id: str) -> RequestFence | None:
        """The fence of the request's writes while its lease is held here, else None."""
        lease = self.held.get(request_id)
        return None if lease is None else RequestFence.of(lease)

    def owner(self, request_id: str) -> str:
        """The live manager the rendezvous hash gives ``request_id`` to."""
        live = live_managers(self.heartbeats, self.clock.now(), self.stale_after)
        live.add(self.manager)
        return rendezvous_owner(live, request_id)

    def claimable(self, request_ids: Iterable[str]) -> list[str]:
        """Of requests with no actor here, those this manager should start now: those whose
        lease it holds, its own by the rendezvous hash, and others' nobody has taken for
        :data:`PATIENCE` sweeps. One sweep's worth of counting: call once per sweep."""
        ids = list(request_ids)
        held = [r for r in ids if r in self.held]
        ids = [r for r in ids if r not in self.held]
        if not ids:
            self.untaken.clear()
            return held
        live = live_managers(self.heartbeats, self.clock.now(), self.stale_after)
        live.add(self.manager)
        mine = [r for r in ids if rendezvous_owner(live, r) == self.manager]
        chosen = set(mine)
        others = [r for r in ids if r not in chosen]
        untaken: dict[str, int] = {}
        for request_id, holder in self.holder.holders(others).items():
            if holder is None:
                untaken[request_id] = self.untaken.get(request_id, 0) + 1
        self.untaken = untaken
        return held + mine + [r for r, n in untaken.items() if n >= PATIENCE]

    def take(self, request_id: str) -> bool:
        """Hold the lease of ``request_id`` (taken now if free); False when another live
        manager holds it."""
        if request_id in self.held:
            return True
        state = self.holder.take(request_id)
        if not state.ours:
            return False
        self.untaken.pop(request_id, None)
        self.held[request_id] = state.lease
        if state.taken:
            log.debug("request '%s' taken by this manager (lease token %d)", request_id,
                      state.lease.token)
        return True

    def renew(self) -> dict[str, str]:
        """Renew every lease held, in one round trip; the requests whose lease was lost
        (forgotten here), each with the lease value it was held under."""
        ids = list(self.held)
        kept = self.holder.renew_many([self.held[r] for r in ids])
        lost: dict[str, str] = {}
        for request_id, ok in zip(ids, kept, strict=True):
            if ok:
                continue
            lease = self.held.pop(request_id)
            lost[request_id] = lease.value
            log.warning("[!] request '%s': lease token %d lost; its actor here stops",
                        request_id, lease.token)
        return lost

    def release(self, request_id: str) -> None:
        """Give up the lease of a request this manager no longer runs (finished, or being
        stopped). May raise ``redis.RedisError`` (then it expires after the TTL)."""
        lease = self.held.pop(request_id, None)
        self.untaken.pop(request_id, None)
        if lease is not None:
            self.holder.release(lease)

    def release_all(self) -> None:
        """Give up every lease (a clean stop): others take the requests at once."""
        for request_id in list(self.held):
            self.release(request_id)

    def key(self, request_id: str) -> str:
        """The lease key of ``request_id``."""
        return self.holder.key(request_id)


class SoleRequests:
    """The requests of a manager that runs every one of them alone (built without leases:
    tests, an embedding with one manager): each is held here, none has a fence (its writes
    go unfenced), nothing is renewed or released."""

    renew_interval: float | None = None
    ttl = 0.0

    def __init__(self, manager: str = "") -> None:
        self.manager = manager

    def holds(self, request_id: str) -> bool:
        return True

    def fence(self, request_id: str) -> RequestFence | None:
        return None

    def owner(self, request_id: str) -> str:
        return self.manager

    def claimable(self, request_ids: Iterable[str]) -> list[str]:
        return list(request_ids)

    def take(self, request_id: str) -> bool:
        return True

    def renew(self) -> dict[str, str]:
        return {}

    def release(self, request_id: str) -> None:
        return None

    def release_all(self) -> None:
        return None


RequestOwnership = RequestLeases | SoleRequests
"""How an on-demand manager holds its requests: leases, or :class:`SoleRequests`."""
