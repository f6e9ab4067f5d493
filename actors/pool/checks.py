"""Per-queue checks of a pool cycle (a mixin of ``PoolActor``, reference §4.3–§4.6):
running lifetimes, ready TTL and re-checks, pending VMs that vanished. Runs on the pool
actor's thread only; provider work is sent as messages.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from vmpooler.actors.messages import ProviderOp
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.store import PoolSnapshot

if TYPE_CHECKING:
    from vmpooler.actors.pool.actor import PoolActor

__all__ = ["PoolChecks"]

log = logging.getLogger(__name__)

_MISMATCH_GRACE = 60.0  # seconds a VM must be ready before its hostname is checked


class PoolChecks:
    """Checks of running, ready and vanished pending VMs."""

    def _check_running(
        self: PoolActor, snap: PoolSnapshot, inventory: set[str], now: float
    ) -> None:
        due = []
        mono = self.clock.monotonic()
        for vm in snap.running - self.busy.keys():
            if vm not in inventory:
                if self.store.retire(self.name, vm, "running"):
                    log.info("[>] [%s] '%s' not in inventory, moved to 'completed'", self.name, vm)
                continue
            if self.next_running_check.get(vm, 0.0) <= mono:
                due.append(vm)
        if not due:
            return
        fields = self.store.vm_fields(due, ["checkout", "lifetime", "user_tagged", "token:user"])
        active = self.store.active_members(self.name, due)
        for vm in due:
            self.next_running_check[vm] = mono + self.settings.vm_checktime * 60
            checkout, lifetime, tagged, user = fields[vm]
            if vm not in active:
                if self.store.retire(self.name, vm, "running"):
                    log.info("[>] [%s] '%s' has no active entry, moved to 'completed'",
                             self.name, vm)
                continue
            hours = self.lifetime.hours(lifetime)
            started = timefmt.parse_epoch(checkout)
            if hours > 0 and started is not None and int((now - started) // 3600) >= hours:
                if self.store.retire(self.name, vm, "running"):
                    log.info("[>] [%s] '%s' reached its lifetime of %dh, moved to 'completed'",
                             self.name, vm, hours)
                continue
            self._send(ProviderOp.CHECK_RUNNING, vm, tagged != "true", user)

    def _check_ready(
        self: PoolActor, snap: PoolSnapshot, inventory: set[str], now: float
    ) -> set[str]:
        ready = set(snap.ready)
        mono = self.clock.monotonic()
        unknown = [vm for vm in snap.ready if vm not in self.ready_since]
        if unknown:
            for vm, (since, check) in self.store.vm_fields(unknown, ["ready", "check"]).items():
                started = timefmt.parse_epoch(since)
                self.ready_since[vm] = started if started is not None else 0.0
                last = timefmt.parse_epoch(check)
                age = now - last if last is not None else None
                checktime = self.settings.vm_checktime * 60
                self.next_check[vm] = mono + (checktime - age if age is not None and
                                              age < checktime else 0.0)
        stamps: dict[str, str] = {}
        for vm in snap.ready - self.busy.keys():
            if vm not in inventory:
                if self.store.retire(self.name, vm, "ready"):
                    ready.discard(vm)
                    self._lost("vanished")
                    log.info("[>] [%s] '%s' not in inventory, moved to 'completed'", self.name, vm)
                continue
            if self.next_check.get(vm, 0.0) > mono:
                continue
            self.next_check[vm] = mono + self.settings.vm_checktime * 60
            stamps[vm] = timefmt.format_epoch(now)
            since = self.ready_since.get(vm) or None
            if since is None or (now - since) / 60.0 > self.pool.ready_ttl:
                if self.store.retire(self.name, vm, "ready"):
                    ready.discard(vm)
                    self._lost("ready_ttl")
                    log.info("[>] [%s] '%s' reached its ready TTL of %s min, moved to "
                             "'completed'", self.name, vm, self.pool.ready_ttl)
                continue
            check_name = bool(self.check_hostname) and now - since > _MISMATCH_GRACE
            self._send(ProviderOp.CHECK_READY, vm, check_name)
        self.store.set_check_times(stamps)
        return ready

    def _pending_vanished(self: PoolActor, vm: str) -> bool:
        """A pending VM missing from the inventory with no clone of ours running for it.

        vmpooler waits for the pending timeout; we know better: the clone that reserved it
        died with an earlier process (or the VM vanished), so it can never become ready.
        A VM reserved after this cycle's inventory was requested is simply too new.
        """
        reserved = self.reserved_at.get(vm)
        if reserved is not None and reserved >= self.list_sent_at:
            return False
        if self.store.clone_failed(self.name, vm, error="VM is not in the provider's inventory",
                                   error_class="VmNotFound", ttl=self.data_ttl,
                                   release_slot=False):
            self._lost("vanished")
            log.info("[!] [%s] '%s' is pending but not in the provider's inventory and no clone "
                     "is running for it; removed from 'pending'", self.name, vm)
            self.metrics.increment("vmpooler_errors.markedasfailed", tags={"pool": self.name})
            self._dead_letter("pending", vm, "VmNotFound", "VM is not in the provider's inventory")
        self._ondemand_lost(vm, "VM is not in the provider's inventory")
        self._forget_caches(vm)
        return True

