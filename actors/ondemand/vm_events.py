"""``VmEvents``: what a request's actor does when its pools tell it of its VMs — a clone
started (:class:`RequestVmCloning`), a VM ready (:class:`RequestVmReady`, attached by the
``ATTACH`` compare-and-set script), a clone failed (:class:`RequestVmFailed`: retried until
``max_vm_retries``, a permanent provider error failing the request at once) — and its check
that the VMs on their way are still pending (:class:`VerifyInFlight`).

Runs only inside the request actor's mailbox, one message at a time; it lets a Redis error
or :class:`~vmpooler.actors.storage.lease_store.Fenced` through to the actor, which handles
the message again later (the scripts make that safe) or stops.
"""

from __future__ import annotations

import logging
from typing import Protocol

from vmpooler.actors.config import GlobalSettings
from vmpooler.actors.messages import RequestVmFailed, RequestVmReady
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.ondemand.ending import Ending
from vmpooler.actors.ondemand.ledger import EntryKey, Ledger
from vmpooler.actors.ondemand.lifecycle import Phase, ttl_reason, verify_interval
from vmpooler.actors.runtime.clock import Clock
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.request_store import AttachOutcome, Entry, RequestStore

__all__ = ["RequestHost", "VmEvents"]

log = logging.getLogger(__name__)


class RequestHost(Protocol):
    """What :class:`VmEvents` needs of the request's actor: its phase and ledger (read at
    each call: the claim replaces the ledger), and the transitions only the actor makes."""

    phase: Phase
    vms: Ledger

    def fail(self, reason: str) -> None:
        """Fail the request (``FAIL``) and finish."""

    def finish(self, status: str) -> None:
        """Finish with ``status``: retire the VMs on their way, tell the manager, stop."""

    def fulfil(self) -> bool:
        """Try the ready transition (``FULFIL``); True if the request is finished."""

    def ask_for_missing(self) -> None:
        """Ask the manager for the VMs neither delivered, on their way nor queued."""


class VmEvents:
    """The VM events of request ``request_id`` for its actor ``host``. ``retries`` and
    ``has_token`` are the request's (set from the claim): the clone retries spent, and
    whether it was made with a token (its VMs then get ``vm_lifetime_auth``). ``store`` is
    the request actor's, behind the request's fence."""

    def __init__(self, host: RequestHost, *, request_id: str, store: RequestStore,
                 settings: GlobalSettings, ending: Ending, clock: Clock,
                 metrics: Metrics) -> None:
        self.host = host
        self.request_id = request_id
        self.store = store
        self.settings = settings
        self.ending = ending
        self.clock = clock
        self.metrics = metrics
        self.retries = 0
        self.has_token = False

    def cloning(self, vm: str, key: EntryKey) -> None:
        """``vm``'s clone started for ``key``. An outcome heard before (the two may come
        through different managers) is applied now: a failure is counted, a delivered VM is
        not on its way any more."""
        vms = self.host.vms
        vms.cloning(vm, key)
        if vm not in vms.early:
            return
        outcome = vms.early.pop(vm)
        if outcome is None:
            vms.in_flight.pop(vm, None)
        else:
            self.failed(outcome)

    def ready(self, msg: RequestVmReady) -> None:
        """Attach the ready VM (or have it retired when the request cannot take it; one
        that left pending behind the request's back counts as failed). The last one makes
        the request ``ready``."""
        key = (msg.alias, msg.pool)
        vms = self.host.vms
        announced = vms.in_flight.pop(msg.vm, None) is not None
        entry = vms.entries.get(key) or Entry(msg.alias, msg.pool, 0)  # 0: refused
        lifetime = self.settings.vm_lifetime_auth if self.has_token else None
        outcome = self.store.attach(self.request_id, entry, msg.vm,
                                    now=timefmt.format_epoch(self.clock.now()),
                                    lifetime=lifetime)
        if not announced and outcome is not AttachOutcome.NOT_PENDING:
            vms.heard_early(msg.vm, None)  # its clone's start may still be on its way
        if outcome is AttachOutcome.ATTACHED:
            vms.delivered[key] += 1
            log.info("[>] [%s] '%s' delivered to request '%s' (%d of %d)", msg.pool, msg.vm,
                     self.request_id, vms.delivered[key], entry.count)
            if vms.complete():
                self.host.fulfil()
        elif outcome is AttachOutcome.REFUSED:
            self.ending.lost(msg.pool)
            log.info("[>] [%s] '%s' not needed by request '%s', moved to 'completed'",
                     msg.pool, msg.vm, self.request_id)
            status = self.store.status(self.request_id)
            if status is not None:
                self.host.finish(status)
        elif outcome is AttachOutcome.NOT_PENDING:
            # It left pending behind our back (retired by someone else): replace it.
            self.failed(RequestVmFailed(self.request_id, msg.alias, msg.pool, msg.vm,
                                        "VM left 'pending' before it was delivered"),
                        tracked=True)

    def failed(self, msg: RequestVmFailed, *, tracked: bool = False) -> None:
        """A clone of the request failed: fail the request (a permanent error, or retries
        spent), or count a retry and ask for a replacement. ``tracked``: ``msg.vm`` was
        already taken off the VMs on their way. A failure of a VM not on its way is kept for
        its clone's start (:meth:`cloning`)."""
        key = (msg.alias, msg.pool)
        if not tracked and self.host.vms.in_flight.pop(msg.vm, None) is None:
            # not ours, already counted, or its clone's start is still on its way
            self.host.vms.heard_early(msg.vm, msg)
            return
        if msg.permanent:
            self.metrics.increment("vmpooler_errors.permanently_failed", tags={"pool": msg.pool})
            self.host.fail(f"Configuration error: {msg.reason}")
            return
        if msg.refused:  # nothing was tried: no retry spent; asked again at the next check
            log.info("[!] [%s] '%s' of request '%s' not cloned (%s); asking again in %.0fs",
                     msg.pool, msg.vm, self.request_id, msg.reason,
                     verify_interval(self.settings))
            self.grace_over_if_idle()
            return
        if self.retries >= self.settings.max_vm_retries:
            self.metrics.increment("vmpooler_errors.permanently_failed", tags={"pool": msg.pool})
            self.host.fail("Max retry attempts exceeded")
            return
        self.retries = self.store.record_retry(self.request_id)
        log.info("[!] [%s] '%s' of request '%s' failed (%s); retry %d of %d", msg.pool,
                 msg.vm, self.request_id, msg.reason, self.retries,
                 self.settings.max_vm_retries)
        if self.host.phase is Phase.GRACE:
            self.grace_over_if_idle()
        elif key in self.host.vms.entries:
            self.host.ask_for_missing()

    def grace_over_if_idle(self) -> None:
        """In the grace window, a request with no VM left on its way fails at once."""
        if self.host.phase is Phase.GRACE and not self.host.vms.in_flight:
            self.host.fail(ttl_reason(self.settings))

    def verify_in_flight(self) -> None:
        """A VM on its way that left pending without a word (its pool's message was lost
        with a manager that died) counts as failed, so it is replaced. Stops at the first
        failure that finishes the request."""
        in_flight = self.host.vms.in_flight
        if not in_flight:
            return
        pending = self.store.still_pending({vm: key[1] for vm, key in in_flight.items()})
        for vm, (alias, pool) in list(in_flight.items()):
            if vm not in pending:
                self.failed(RequestVmFailed(self.request_id, alias, pool, vm,
                                            "VM left 'pending' unannounced"))
                if self.host.phase is Phase.FINISHED:
                    return
