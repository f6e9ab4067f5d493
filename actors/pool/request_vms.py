"""The pool actor's part in on-demand requests (reference §2.4).

A request's VMs are cloned by the pool actor like any other (same provider actor, same
pending checks, same pending timeout), with an on-demand clone slot and the request's id in
the VM hash. :class:`OnDemandVms` tracks them (``vm -> (request_id, alias)``, rebuilt from
the VM hashes when the actor starts): they are never counted towards the pool's size, never
drained with the pool, and never moved to ready: when one passes its readiness check the
pool actor tells the request's actor, which attaches it. Failures go to the request's actor
too, which decides whether to retry. A VM whose request has no actor any more goes to
completed if the request is finished (``SETTLE_ORPHAN``), or stays pending until the
request's actor is back.

With several managers on one Redis, the request's actor may run in another manager (the
holder of the request's lease) and the clone may have been granted by another manager's
on-demand manager: those messages go through the pool actor's
:class:`~vmpooler.actors.cluster.router.Router`. A ready VM is reported again at every pool check
until its request takes it, so a message lost with a dead manager is repaired.

Used only on the pool actor's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable
from typing import Any

from vmpooler.actors.cluster.router import Router
from vmpooler.actors.messages import (
    CloneForRequest,
    RequestCloneAnswered,
    RequestPoolBlocked,
    RequestSlotFreed,
    RequestVmCloning,
    RequestVmFailed,
    RequestVmReady,
)
from vmpooler.actors.messages.address import Address
from vmpooler.actors.pool.wait_times import PoolWaitTimes
from vmpooler.actors.runtime.supervisor import ActorDirectory
from vmpooler.actors.storage.request_store import RequestStore
from vmpooler.actors.storage.store import Store
from vmpooler.actors.storage.wait_store import WaitStore
from vmpooler.actors.tracing import Span

__all__ = ["OnDemandVms"]

log = logging.getLogger(__name__)


class OnDemandVms:
    """The request VMs of one pool, and the messages about them to the requests' actors.

    ``owners`` maps each request VM still pending to ``(request_id, alias)``. ``busy`` holds
    the VMs with a provider call in flight (they are never forgotten while one runs),
    ``forget(vm)`` drops the actor's caches of a VM, ``lost(reason)`` counts ``vm.lost``.
    """

    def __init__(self, *, pool: str, store: Store, requests: RequestStore,
                 directory: ActorDirectory, busy: Container[str],
                 forget: Callable[[str], None], lost: Callable[[str], None],
                 router: Router | None = None) -> None:
        self.name = pool
        self.router = router if router is not None else Router(directory)
        self.store = store
        self.requests = requests
        self.directory = directory
        self.busy = busy
        self.forget = forget
        self.lost = lost
        self.owners: dict[str, tuple[str, str]] = {}
        self.spans: dict[str, Span] = {}  # a traced request's VM -> its ``pool.clone`` span
        self.loaded = False  # owners was read from Redis at least once
        # the pool's recent times, for the on-demand manager's estimates
        self.times = PoolWaitTimes(pool, WaitStore(store.client))

    # -- knowing them ---------------------------------------------------------------------------
    def load(self, pending: Iterable[str]) -> None:
        """Learn which of the ``pending`` VMs were cloned for a request (from their hashes).
        May raise ``redis.RedisError``; then nothing is learnt."""
        self.learn(pending)
        self.loaded = True

    def learn(self, vms: Iterable[str]) -> None:
        """Add those of ``vms`` whose hash names a request. May raise ``redis.RedisError``."""
        self.owners.update(self.store.ondemand_owners(vms))

    def __contains__(self, vm: object) -> bool:
        return vm in self.owners

    def __len__(self) -> int:
        return len(self.owners)

    def owner(self, vm: str) -> tuple[str, str] | None:
        """``(request_id, alias)`` of a request's VM, else None."""
        return self.owners.get(vm)

    def adopt(self, vm: str, request: tuple[str, str]) -> None:
        """``vm`` is being cloned for ``request`` (``(request_id, alias)``)."""
        self.owners[vm] = request

    def drop(self, vm: str) -> None:
        """Forget ``vm`` (its clone could not be sent)."""
        self.owners.pop(vm, None)
        self._end(vm, "not sent", failed=True)

    def prune(self, pending: frozenset[str]) -> None:
        """Forget request VMs that left pending (delivered, or retired by their request)."""
        for vm in [vm for vm in self.owners if vm not in pending and vm not in self.busy]:
            del self.owners[vm]
            self._end(vm, "gone")

    # -- their spans (docs/tracing.md) -----------------------------------------------------------
    def traced(self, vm: str | None, span: Span) -> None:
        """``span`` follows ``vm`` until it is ready or failed; ended now without a VM."""
        if vm is None:
            span.set("vmpooler.outcome", "not started")
            span.end()
        elif span.recording:
            span.set("vmpooler.vm", vm)
            self.spans[vm] = span

    def event(self, vm: str, name: str, attributes: dict[str, float | str]) -> None:
        """Note ``name`` on the span of ``vm``, if it has one."""
        span = self.spans.get(vm)
        if span is not None:
            span.event(name, attributes)

    def _end(self, vm: str, outcome: str, *, failed: bool = False) -> None:
        span = self.spans.pop(vm, None)
        if span is not None:
            span.set("vmpooler.outcome", outcome)
            if failed:
                span.fail(outcome)
            span.end()

    # -- telling their requests -------------------------------------------------------------------
    def clone_answered(self, msg: CloneForRequest, vm: str | None) -> None:
        """Answer the on-demand manager's ``CloneForRequest`` (``vm`` None: not started),
        in the manager that granted it; a started clone is told to the request's actor
        first (``RequestVmCloning``), wherever it runs."""
        if vm is not None:
            self._tell_request(msg.request_id,
                               RequestVmCloning(msg.request_id, msg.alias, self.name, vm))
        answer = RequestCloneAnswered(msg.request_id, msg.alias, self.name, vm,
                                      grant=msg.grant)
        if msg.reply_to and msg.reply_to != self.router.member:
            self.router.to_manager(msg.reply_to, Address.ondemand(), answer)
        else:
            self.router.here(Address.ondemand(), answer)

    def ready(self, vm: str) -> None:
        """A request's VM passed its readiness check: its request's actor attaches it."""
        request_id, alias = self.owners[vm]
        self._end(vm, "ready")
        if self._tell_request(request_id, RequestVmReady(request_id, alias, self.name, vm)):
            return
        if self.requests.settle_orphan(request_id, self.name, vm):
            self.lost("abandoned")
            self.owners.pop(vm, None)
            self.forget(vm)
            log.info("[>] [%s] '%s' is ready but its request '%s' is finished, moved to "
                     "'completed'", self.name, vm, request_id)

    def settle_if_orphaned(self, vm: str) -> bool:
        """A request's VM still booting, with no actor of its request in this manager: to
        completed when the request is finished (True). Its actor retires only the VMs it
        knew of when it finished; one whose clone was answered after that would otherwise
        wait out the pending timeout. A running request (here or in another manager) keeps
        it."""
        request_id, _alias = self.owners[vm]
        if self.directory.get(Address.request(request_id).name) is not None:
            return False
        if not self.requests.settle_orphan(request_id, self.name, vm):
            return False
        self.lost("abandoned")
        self.owners.pop(vm, None)
        self.forget(vm)
        log.info("[>] [%s] '%s' is pending but its request '%s' is finished, moved to "
                 "'completed'", self.name, vm, request_id)
        return True

    def failed(self, vm: str, reason: str, *, permanent: bool = False,
               refused: bool = False) -> None:
        """A request's VM left pending without becoming ready: its request decides (nothing
        happens for a VM of the pool's own). ``refused``: nothing was attempted."""
        owner = self.owners.pop(vm, None)
        if owner is None:
            return
        self._end(vm, reason, failed=True)
        request_id, alias = owner
        self._tell_request(request_id,
                           RequestVmFailed(request_id, alias, self.name, vm, reason, permanent,
                                           refused))

    def blocked(self, msg: CloneForRequest, until: float, reason: str) -> None:
        """No clone starts for ``msg`` before ``until`` (epoch; ``reason`` says why): its
        request's actor decides whether it can still be met."""
        self._tell_request(msg.request_id,
                           RequestPoolBlocked(msg.request_id, self.name, until, reason))

    def slot_freed(self) -> None:
        """An on-demand clone slot was released: the on-demand managers (every manager's
        counts against one limit) may hand it on."""
        self.router.everywhere(Address.ondemand(), RequestSlotFreed())

    def _tell_request(self, request_id: str, message: Any) -> bool:
        """Tell the request's actor, here or in the manager holding the request's lease."""
        return self.router.tell(Address.request(request_id), message)
