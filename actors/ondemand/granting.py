"""The on-demand manager's part in the one queue of clone slots: :class:`Granting`.

With several managers on one Redis, clone slots are granted by one of them, the granter
(:mod:`vmpooler.actors.cluster.granter`), so the fair share (docs/fairness.md) holds over
every manager's requests, not only among those one manager runs. Each on-demand manager:

* stamps its request actors' :class:`WantRequestVms` with the request's lease (its fence)
  and queues them in its own :class:`CloneGrants` when it is the granter, else passes them
  on to the granter through the relay; a request that finishes, crashes or is lost here is
  withdrawn the same way (:class:`WithdrawRequest`);
* looks at the granter's lease every third of the TTL (and at each sweep): when the holding
  changed (a new granter, or this one after a restart) it forgets its queue and tells each
  of its request actors to send everything still queued again (:class:`ResendWants`), so
  the new granter's queue is rebuilt from every manager's requests. Wants sent to a granter
  that just died are lost with its inbox and sent again this way.

A manager alone (a :class:`SoleGranter`) always grants, and nothing travels. Runs in the
manager's mailbox; not thread-safe.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace

import pykka
import redis

from vmpooler.actors.cluster.granter import GrantRole
from vmpooler.actors.cluster.remote import Remote
from vmpooler.actors.cluster.request_leases import RequestOwnership
from vmpooler.actors.cluster.router import Router
from vmpooler.actors.fairness.fair_share import Owner
from vmpooler.actors.messages import ResendWants, WantRequestVms, WithdrawRequest
from vmpooler.actors.messages.address import Address
from vmpooler.actors.ondemand.clone_grants import CloneGrants
from vmpooler.actors.ondemand.tracking import Tracker
from vmpooler.actors.storage.redis_errors import redis_failure

__all__ = ["Granting"]

log = logging.getLogger(__name__)


class Granting:
    """Where this manager's requests' wants go, and whether it grants them all."""

    def __init__(self, *, role: GrantRole, slots: CloneGrants, remote: Remote,
                 leases: RequestOwnership, tracked: Tracker) -> None:
        self.role = role
        self.slots = slots
        self.router = Router(slots.directory, remote)
        self.leases = leases
        self.tracked = tracked
        self.changes = 0  # how many times the granter changed (read by tests)

    @property
    def here(self) -> bool:
        """Whether this manager holds the granter's role (it queues every request's wants;
        it grants while its lease is fresh: :attr:`GrantLease.granting`)."""
        return self.role.granter == self.router.member

    @property
    def renew_interval(self) -> float | None:
        """Seconds between two looks at the granter's lease (None: nothing to look at)."""
        return self.role.renew_interval

    def start(self) -> None:
        """A new on-demand manager: give up a holding of this manager's id (a crashed
        predecessor's) and take the role if it is free. A Redis error: the next look."""
        try:
            self.role.start()
        except redis.RedisError as exc:
            log.error("[!] [ondemand] granter unknown: %s: %s", redis_failure(exc), exc)
        self.refresh()

    def refresh(self) -> None:
        """Look at the granter's lease (take it if free, renew it if ours). On a change,
        forget the queue and have every request actor here send its wants again; then
        grant what is free."""
        try:
            changed = self.role.refresh()
        except redis.RedisError as exc:
            log.error("[!] [ondemand] granter's lease not renewed: %s: %s",
                      redis_failure(exc), exc)
            return
        if changed:
            self.changes += 1
            self.slots.reset()
            for request_id in sorted(self.tracked.running()):
                ref = self.tracked.ref(request_id)
                if ref is not None:
                    with contextlib.suppress(pykka.ActorDeadError):
                        ref.tell(ResendWants(request_id))
        if self.here:
            self.slots.freed()

    # -- wants ----------------------------------------------------------------------------------
    def want(self, message: WantRequestVms, *, relayed: bool = False,
             ) -> tuple[tuple[tuple[str, str], ...], Owner] | None:
        """A request actor here or (``relayed``: from another manager) the manager running
        the request asks; that manager set the want's ``fence``. The wants and owner when
        they were queued here (this is the granter), else None."""
        if not relayed:
            if not self.leases.holds(message.request_id):
                return None  # its actor is being stopped: the request's new holder asks
            fence = self.leases.fence(message.request_id)
            message = replace(message, fence="" if fence is None else fence.value)
            if not self.here:
                self._to_granter(message)
                return None
        if not self.here:  # sent before the sender saw the change; it sends them again
            return None
        wants = tuple((str(alias), str(pool)) for alias, pool in message.wants)
        owner = Owner(message.user or message.request_id, message.priority, message.share)
        self.slots.want(message.request_id, wants, owner, whole=message.whole,
                        fence=message.fence, traceparent=message.traceparent)
        return wants, owner

    def withdraw(self, request_id: str, fence: str) -> None:
        """The request no longer runs here under ``fence``: the granter forgets it."""
        if self.here:
            self.slots.withdraw(request_id, fence)
        else:
            self._to_granter(WithdrawRequest(request_id, fence))

    def withdrawn(self, message: WithdrawRequest) -> None:
        """Another manager withdrew a request (ignored unless this is the granter)."""
        if self.here:
            self.slots.withdraw(message.request_id, message.fence)

    def fence(self, request_id: str) -> str:
        """The value of the request's lease held here ('' without one)."""
        fence = self.leases.fence(request_id)
        return "" if fence is None else fence.value

    def _to_granter(self, message: object) -> None:
        granter = self.role.granter
        if granter:  # none known: the wants go again once one is seen
            self.router.to_manager(granter, Address.ondemand(), message)
