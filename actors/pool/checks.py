"""Per-queue checks of a pool cycle (reference §4.3–§4.6): running lifetimes, ready TTL and
re-checks, pending VMs that vanished. Used only on the pool actor's thread; provider work is
sent as messages (``self.calls``).
"""

from __future__ import annotations

import logging
from collections.abc import Set

from vmpooler.actors.messages import CheckReady, CheckRunning
from vmpooler.actors.pool.brake import Brake
from vmpooler.actors.pool.calls import ProviderCalls
from vmpooler.actors.pool.context import PoolIO, PoolSettings
from vmpooler.actors.pool.dead_letters import DeadLetters
from vmpooler.actors.pool.request_vms import OnDemandVms
from vmpooler.actors.pool.vm_cache import VmCache
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.pool_snapshot import PoolSnapshot

__all__ = ["PoolChecks"]

log = logging.getLogger(__name__)

_MISMATCH_GRACE = 60.0  # seconds a VM must be ready before its hostname is checked


class PoolChecks:
    """Checks of running, ready and vanished pending VMs."""

    def __init__(self, policy: PoolSettings, io: PoolIO, *, calls: ProviderCalls, vms: VmCache,
                 ondemand: OnDemandVms, dead_letters: DeadLetters, brake: Brake) -> None:
        self.policy, self.io, self.calls, self.vms = policy, io, calls, vms
        self.ondemand = ondemand
        self.dead_letters = dead_letters
        self.brake = brake
        self.suspects: dict[str, int] = {}  # pending VM -> the listing that first missed it

    def check_held(self, size: int) -> set[str]:
        """The mass-failure brake's turn at the start of a cycle (before discovery):
        release it when the failures stopped and check held VMs again. Returns the held
        VMs, which are in no queue the discovery knows of."""
        return self.brake.review(size)

    def check_running(self, snap: PoolSnapshot, inventory: set[str], now: float) -> None:
        """Retire running VMs gone from the inventory, without an ``active`` entry or past
        their lifetime; send ``CHECK_RUNNING`` to the others every ``vm_checktime``."""
        store, name, vms = self.io.store, self.policy.name, self.vms
        due = []
        mono = self.io.clock.monotonic()
        for vm in snap.running - self.calls.busy:
            if vm not in inventory:
                if store.retire(name, vm, "running"):
                    log.info("[>] [%s] '%s' not in inventory, moved to 'completed'", name, vm)
                continue
            if vms.next_running_check.get(vm, 0.0) <= mono:
                due.append(vm)
        if not due:
            return
        fields = store.vm_fields(due, ["checkout", "lifetime", "user_tagged", "token:user"])
        active = store.active_members(name, due)
        for vm in due:
            vms.next_running_check[vm] = mono + self.policy.settings.vm_checktime * 60
            checkout, lifetime, tagged, user = fields[vm]
            if vm not in active:
                if store.retire(name, vm, "running"):
                    log.info("[>] [%s] '%s' has no active entry, moved to 'completed'",
                             name, vm)
                continue
            hours = self.policy.lifetime.hours(lifetime)
            started = timefmt.parse_epoch(checkout)
            if hours > 0 and started is not None and int((now - started) // 3600) >= hours:
                if store.retire(name, vm, "running"):
                    log.info("[>] [%s] '%s' reached its lifetime of %dh, moved to 'completed'",
                             name, vm, hours)
                continue
            self.calls.send(CheckRunning(tag_user=tagged != "true", user=user), vm)

    def check_ready(self, snap: PoolSnapshot, inventory: set[str], now: float) -> set[str]:
        """Retire ready VMs gone from the inventory or past ``ready_ttl``; stamp ``check`` on
        the due ones and send them ``CHECK_READY``. Returns the ready VMs still ready."""
        store, name, vms = self.io.store, self.policy.name, self.vms
        ready = set(snap.ready)
        mono = self.io.clock.monotonic()
        unknown = [vm for vm in snap.ready if vm not in vms.ready_since]
        if unknown:
            for vm, (stamp, check) in store.vm_fields(unknown, ["ready", "check"]).items():
                started = timefmt.parse_epoch(stamp)
                vms.ready_since[vm] = started if started is not None else 0.0
                last = timefmt.parse_epoch(check)
                age = now - last if last is not None else None
                checktime = self.policy.settings.vm_checktime * 60
                vms.next_check[vm] = mono + (checktime - age if age is not None and
                                             age < checktime else 0.0)
        stamps: dict[str, str] = {}
        for vm in snap.ready - self.calls.busy:
            if vm not in inventory:
                if store.retire(name, vm, "ready"):
                    ready.discard(vm)
                    self.io.lost("vanished")
                    log.info("[>] [%s] '%s' not in inventory, moved to 'completed'", name, vm)
                continue
            if vms.next_check.get(vm, 0.0) > mono:
                continue
            vms.next_check[vm] = mono + self.policy.settings.vm_checktime * 60
            stamps[vm] = timefmt.format_epoch(now)
            since = vms.ready_since.get(vm) or None
            if since is None or (now - since) / 60.0 > self.policy.pool.ready_ttl:
                if store.retire(name, vm, "ready"):
                    ready.discard(vm)
                    self.io.lost("ready_ttl")
                    log.info("[>] [%s] '%s' reached its ready TTL of %s min, moved to "
                             "'completed'", name, vm, self.policy.pool.ready_ttl)
                continue
            check_name = bool(self.policy.check_hostname) and now - since > _MISMATCH_GRACE
            self.calls.send(CheckReady(check_hostname=check_name), vm)
        store.set_check_times(stamps)
        return ready

    def keep_suspects(self, missing: Set[str]) -> None:
        """Forget the suspects not in ``missing`` (listed again, or no longer pending)."""
        self.suspects = {vm: n for vm, n in self.suspects.items() if vm in missing}

    def pending_vanished(self, vm: str, listed_at: float, listing: int) -> bool:
        """A pending VM missing from the inventory with no clone running for it, anywhere.

        vmpooler waits for the pending timeout; we know better: the clone that reserved it
        died with an earlier process (or the VM vanished), so it can never become ready.
        A VM reserved at or after ``listed_at`` (monotonic: when this cycle's inventory was
        requested) is simply too new. A VM some manager still holds a clone slot for is
        being cloned there (a pool's former owner, say). Otherwise the VM is a suspect, and
        is removed only if a later listing (numbered ``listing``, requested after this
        judgement) is still without it: a clone answered just after this listing was
        requested shows up in the next one. True if the VM is no longer the pool's pending
        VM.
        """
        name = self.policy.name
        reserved = self.vms.reserved_at.get(vm)
        if reserved is not None and reserved >= listed_at:
            return False
        if self.io.store.clone_in_flight(vm):
            self.suspects.pop(vm, None)
            return False
        if self.suspects.setdefault(vm, listing) >= listing:
            return False
        del self.suspects[vm]
        if self.io.store.clone_failed(name, vm, error="VM is not in the provider's inventory",
                                  error_class="VmNotFound", ttl=self.policy.data_ttl,
                                  release_slot=False):
            self.io.lost("vanished")
            log.info("[!] [%s] '%s' is pending but not in the provider's inventory and no clone "
                     "is running for it; removed from 'pending'", name, vm)
            self.io.metrics.increment("vmpooler_errors.markedasfailed", tags={"pool": name})
            self.dead_letters.add("pending", vm, "VmNotFound",
                                  "VM is not in the provider's inventory")
        self.ondemand.failed(vm, "VM is not in the provider's inventory")
        self.vms.forget(vm)
        return True
