"""The pool actor's part in on-demand requests (a mixin of ``PoolActor``, reference §2.4).

A request's VMs are cloned by the pool actor like any other (same provider actor, same
pending checks, same pending timeout), with an on-demand clone slot and the request's id in
the VM hash. They are tracked in ``self.ondemand`` (``vm -> (request_id, alias)``, rebuilt
from the VM hashes when the actor starts), never counted towards the pool's size, never
drained with the pool, and never moved to ready: when one passes its readiness check the
pool actor tells the request's actor, which attaches it. Failures go to the request's actor
too, which decides whether to retry. A VM whose request has no actor any more goes to
completed if the request is finished (``SETTLE_ORPHAN``), or stays pending until the
request's actor is back.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

import pykka

from vmpooler.actors.messages import (
    CloneForRequest,
    RequestCloneAnswered,
    RequestSlotFreed,
    RequestVmCloning,
    RequestVmFailed,
    RequestVmReady,
)
from vmpooler.actors.ondemand.request import request_actor_name

if TYPE_CHECKING:
    from vmpooler.actors.pool.actor import PoolActor

__all__ = ["OnDemandVms"]

log = logging.getLogger(__name__)


class OnDemandVms:
    """Cloning VMs for requests and routing their outcomes to the requests' actors."""

    def _clone_for_request(self: PoolActor, msg: CloneForRequest) -> None:
        vm: str | None = None
        try:
            vm = self._start_clone(request=(msg.request_id, msg.alias))
        finally:
            self._tell_actor("ondemand", RequestCloneAnswered(msg.request_id, msg.alias,
                                                              self.name, vm, grant=msg.grant))
        if vm is not None:
            self._tell_actor(request_actor_name(msg.request_id),
                             RequestVmCloning(msg.request_id, msg.alias, self.name, vm))

    def _ondemand_ready(self: PoolActor, vm: str) -> None:
        """A request's VM passed its readiness check: its request's actor attaches it."""
        request_id, alias = self.ondemand[vm]
        if self._tell_actor(request_actor_name(request_id),
                            RequestVmReady(request_id, alias, self.name, vm)):
            return
        if self.requests.settle_orphan(request_id, self.name, vm):
            self._lost("abandoned")
            self.ondemand.pop(vm, None)
            self._forget_caches(vm)
            log.info("[>] [%s] '%s' is ready but its request '%s' is finished, moved to "
                     "'completed'", self.name, vm, request_id)

    def _ondemand_lost(self: PoolActor, vm: str, reason: str, *, permanent: bool = False) -> None:
        """A request's VM left pending without becoming ready: its request decides."""
        owner = self.ondemand.pop(vm, None)
        if owner is None:
            return
        request_id, alias = owner
        self._tell_actor(request_actor_name(request_id),
                         RequestVmFailed(request_id, alias, self.name, vm, reason, permanent))

    def _ondemand_slot_freed(self: PoolActor) -> None:
        self._tell_actor("ondemand", RequestSlotFreed())

    def _prune_ondemand(self: PoolActor, pending: frozenset[str]) -> None:
        """Forget request VMs that left pending (delivered, or retired by their request)."""
        for vm in [vm for vm in self.ondemand if vm not in pending and vm not in self.busy]:
            del self.ondemand[vm]

    def _tell_actor(self: PoolActor, name: str, message: Any) -> bool:
        ref = self.directory.get(name)
        if ref is None:
            return False
        with contextlib.suppress(pykka.ActorDeadError):
            ref.tell(message)
            return True
        return False
