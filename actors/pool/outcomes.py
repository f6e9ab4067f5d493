"""How a pool actor acts on the answers of its checks and destroys.

:class:`Outcomes` handles the :class:`~vmpooler.actors.messages.ProviderCallFinished` of
pending, ready and running checks and of destroys (:meth:`Outcomes.handlers`); the pool
actor routes the other answers to the collaborator that sent the call (clones, migrations,
template preparation, the cycle's ``LIST_VMS``). Each handler runs inside the pool actor's
mailbox, one at a time, and applies its transition through a compare-and-set script: an
answer about a VM that has since moved (drained, checked out, reaped) changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from vmpooler.actors.messages import (
    LogFailureEvents,
    ProviderCallFinished,
    ProviderOp,
    ReadyCheckResult,
    RunningCheckResult,
)
from vmpooler.actors.pool.brake import Brake
from vmpooler.actors.pool.calls import ProviderCalls, log_failure
from vmpooler.actors.pool.context import PoolIO, PoolSettings
from vmpooler.actors.pool.dead_letters import DeadLetters
from vmpooler.actors.pool.lifecycle_rules import PendingVerdict, hostname_mismatch, pending_verdict
from vmpooler.actors.pool.request_vms import OnDemandVms
from vmpooler.actors.pool.standby import Standby
from vmpooler.actors.pool.vm_cache import VmCache
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.queues import Queue

__all__ = ["Outcomes"]

log = logging.getLogger(__name__)


class Outcomes:
    """Handlers for :class:`ProviderCallFinished`, by operation."""

    def __init__(self, policy: PoolSettings, io: PoolIO, *, calls: ProviderCalls, vms: VmCache,
                 ondemand: OnDemandVms, dead_letters: DeadLetters, brake: Brake,
                 size: Callable[[], int], standby: Standby) -> None:
        self.policy, self.io, self.calls, self.vms = policy, io, calls, vms
        self.brake = brake
        self.ondemand = ondemand
        self.dead_letters = dead_letters
        self.size = size  # the pool's size in effect (overrides included)
        self.standby = standby

    def handlers(self) -> dict[ProviderOp, Callable[[ProviderCallFinished], None]]:
        """The answers this object handles, by operation."""
        return {
            ProviderOp.CHECK_PENDING: self._pending_checked,
            ProviderOp.CHECK_READY: self._ready_checked,
            ProviderOp.CHECK_RUNNING: self._running_checked,
            ProviderOp.DESTROY: self._destroyed,
        }

    # -- pending --------------------------------------------------------------------------------
    def _pending_checked(self, msg: ProviderCallFinished) -> None:
        store, name, vms = self.io.store, self.policy.name, self.vms
        vm = msg.vm or ""
        now = self.io.clock.now()
        if msg.failure is None and msg.result and vm in self.ondemand:
            started = vms.clone_started_at(vm)
            if started is not None:
                self.ondemand.times.ready(vm, now - started)
            self.ondemand.ready(vm)
            return
        if msg.failure is None and msg.result:
            started = vms.clone_started_at(vm)
            boot = now - started if started is not None else 0.0
            self.ondemand.times.ready(vm, boot)
            if self._to_standby() and self.standby.enter(vm, boot_seconds=boot) >= 0:
                return  # moved (1) or no longer pending (0); a request's VM (-1) goes on
            moved = store.mark_ready(name, vm, now=timefmt.format_epoch(now),
                                     boot_seconds=boot, date=timefmt.date_bucket(now))
            if moved < 0:  # a request's VM this actor did not know of: its request takes it
                self.ondemand.learn([vm])
                if vm in self.ondemand:
                    self.ondemand.ready(vm)
                return
            if moved:
                vms.ready_since[vm] = now
                vms.next_check[vm] = (self.io.clock.monotonic()
                                      + self.policy.settings.vm_checktime * 60)
                vms.clone_started.pop(vm, None)
                vms.reserved_at.pop(vm, None)
                vms.notified.discard(vm)
                self.io.metrics.timing("time_to_ready_state", boot, tags={"pool": name})
                log.info("[>] [%s] '%s' moved from 'pending' to 'ready' queue", name, vm)
            return
        if vm in self.ondemand and self.ondemand.settle_if_orphaned(vm):
            return
        if msg.failure is not None:
            store.set_vm_fields(vm, {"open_socket_error": msg.failure.message})
        verdict = pending_verdict(
            now=now, clone_started=vms.clone_started_at(vm), timeout_min=self.policy.timeout_min,
            notification_min=self.policy.notify_min, already_notified=vm in vms.notified,
        )
        if verdict == PendingVerdict.NOTIFY:
            vms.notified.add(vm)
            store.set_vm_fields(vm, {"timeout_notification": "1"})
            log.warning("[!] [%s] '%s' has been pending for over %s minutes and will fail "
                        "after %s minutes", name, vm, self.policy.notify_min,
                        self.policy.timeout_min)
        elif verdict == PendingVerdict.FAIL:
            if store.retire(name, vm, "pending"):
                self.io.lost("pending_timeout")
                self.dead_letters.add("pending", vm, "Timeout", msg.failure.message
                                      if msg.failure is not None
                                      else "VM timed out during pending phase")
                self.io.metrics.increment("vmpooler_errors.markedasfailed", tags={"pool": name})
                reason = msg.failure.message if msg.failure is not None else "not ready"
                log.error("[>] [%s] '%s' marked as 'failed' after %s minutes (%s)", name,
                          vm, self.policy.timeout_min, reason)
                self.calls.send(LogFailureEvents(), vm)  # why, when configured
            self.ondemand.failed(vm, f"not ready after {self.policy.timeout_min} minutes")
            vms.forget(vm)

    def _to_standby(self) -> bool:
        """Whether a pooled VM that passed its check goes to the standby tier."""
        if not self.standby.enabled:
            return False
        ready = self.io.store.counts(self.policy.name, (Queue.READY,))[Queue.READY]
        return self.standby.takes(ready + len(self.vms.held), self.size())

    # -- ready ----------------------------------------------------------------------------------
    def _ready_checked(self, msg: ProviderCallFinished) -> None:
        store, name = self.io.store, self.policy.name
        vm = msg.vm or ""
        if msg.failure is not None:
            log_failure(msg.failure, "[!] [%s] could not check ready VM '%s': %s", name,
                        vm, msg.failure.message, level=logging.WARNING)
            return
        result = msg.result_of(ReadyCheckResult)
        if vm in self.brake.held:  # checked again after the brake released
            self.brake.rechecked(vm, result.ready, self.size())
            return
        failing = hostname_mismatch(vm, result.hostname) or not result.ready
        if failing and self.brake.failed(vm, self.size()):
            if result.reason:
                store.set_vm_fields(vm, {"open_socket_error": result.reason})
            self.brake.hold(vm)
            return
        if hostname_mismatch(vm, result.hostname):
            if store.retire(name, vm, "ready"):
                self.io.lost("check_failed")
                log.info("[>] [%s] '%s' has mismatched hostname '%s', moved to 'completed'",
                         name, vm, result.hostname)
                self.vms.forget(vm)
            return
        if not result.ready:
            if result.reason:
                store.set_vm_fields(vm, {"open_socket_error": result.reason})
            if store.retire(name, vm, "ready"):
                self.io.lost("check_failed")
                self.dead_letters.add("ready", vm, "NotReady",
                                      result.reason or "VM became unreachable in ready queue")
                log.info("[>] [%s] '%s' is unreachable, moved to 'completed'", name, vm)
                self.vms.forget(vm)

    # -- running --------------------------------------------------------------------------------
    def _running_checked(self, msg: ProviderCallFinished) -> None:
        store, name = self.io.store, self.policy.name
        vm = msg.vm or ""
        if msg.failure is not None:
            log_failure(msg.failure, "[!] [%s] could not check running VM '%s': %s",
                        name, vm, msg.failure.message, level=logging.WARNING)
            return
        result = msg.result_of(RunningCheckResult)
        if result.tagged:
            store.set_vm_fields(vm, {"user_tagged": "true"})
        if not result.exists and self.brake.failed(vm, self.size()):
            log.info("[!] [%s] '%s' is no longer in inventory, but the brake is engaged: "
                     "left in 'running'", name, vm)
            return
        if not result.exists and store.retire(name, vm, "running"):
            log.info("[>] [%s] '%s' is no longer in inventory, moved to 'completed'", name,
                     vm)
            self.vms.forget(vm)

    # -- destroy -------------------------------------------------------------------------
    def _destroyed(self, msg: ProviderCallFinished) -> None:
        name = self.policy.name
        vm = msg.vm or ""
        if msg.failure is not None:
            log_failure(msg.failure, "[!] [%s] '%s' destroy failed: %s", name, vm,
                        msg.failure.message)
            return
        self.io.store.forget(name, vm, delete_hash=False)
        self.vms.forget(vm)
        self.io.metrics.gauge("vmpooler_destroy", msg.seconds, tags={"pool": name})
        log.info("[-] [%s] '%s' destroyed in %.2f seconds", name, vm, msg.seconds)
