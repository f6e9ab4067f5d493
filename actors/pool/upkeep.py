"""Keeping a pool at its size and template (a mixin of ``PoolActor``, reference §4.7–§4.8):
overrides, drains, template preparation, refill within the clone limit, surplus removal
and the empty-pool flag. Runs on the pool actor's thread only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from vmpooler.actors.config.overrides import effective_size, size_override
from vmpooler.actors.messages import CloneSlotFreed, PoolChanged, ProviderOp, WantCloneSlot
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.store import CloneReservation, PoolSnapshot

if TYPE_CHECKING:
    from vmpooler.actors.pool.actor import PoolActor

__all__ = ["PoolUpkeep"]

log = logging.getLogger(__name__)


class PoolUpkeep:
    """Size, template and refill decisions of one pool."""

    # -- overrides, template, size ------------------------------------------------------------
    def _apply_overrides(self: PoolActor, snap: PoolSnapshot) -> bool:
        """Apply size/template/clone-target overrides and resets. True if the pool drained."""
        drained = False
        if snap.undo_size:
            self.store.ack_undo(self.name, size=True)
        size = effective_size(self.pool.size, snap.size_override)
        if snap.size_override is not None and size_override(snap.size_override) is None:
            log.warning("[!] [%s] ignoring size override %r", self.name, snap.size_override)
        if size != self.size:
            log.info("[*] [%s] size changed from %d to %d", self.name, self.size, size)
            self.size = size
        if snap.undo_template:
            self.store.ack_undo(self.name, template=True)
        template = snap.template_override or self.pool.template
        if template != self.template:
            log.info("[*] [%s] template changed from '%s' to '%s'", self.name, self.template,
                     template)
            self.template = template
            drained |= self._drain(f"template changed to '{template}'") >= 0
        target = snap.clone_target_override or self.pool.clone_target
        if target != self.clone_target:
            self.clone_target = target
            drained |= self._drain(f"clone target changed to '{target}'") >= 0
        if snap.reset_requested and self.store.ack_reset(self.name):
            drained |= self._drain("pool reset requested") >= 0
        if snap.prepared_template != self.template and not self.preparing:
            self._prepare_template()
        return drained

    def _drain(self: PoolActor, reason: str) -> int:
        moved = self.store.drain(self.name)
        self._lost("drained", moved)
        log.info("[*] [%s] %s: %d ready and pending VMs moved to 'completed'", self.name, reason,
                 moved)
        self.actor_ref.tell(PoolChanged(self.name, "drained"))
        return moved

    def _prepare_template(self: PoolActor) -> None:
        if self.settings.create_template_delta_disks and not self.store.has_delta_disks(
            self.template
        ):
            provider = self._provider()
            if provider is not None:
                self.preparing = True
                self.preparing_since = self.clock.monotonic()
                provider.tell(self._call(ProviderOp.PREPARE_TEMPLATE, f"template:{self.template}"))
                return
        self.store.set_prepared_template(self.name, self.template)

    # -- refill and excess ----------------------------------------------------------------------
    def _repopulate(self: PoolActor, ready: int, pending: int) -> bool:
        if self.preparing:
            return False
        if self.clock.monotonic() < self.clone_retry_at:
            return False  # clones failed just now; the periodic cycle tries again
        want = self.size - ready - pending
        started = 0
        for _ in range(max(0, want)):
            if not self._start_clone():
                break
            started += 1
        else:
            self.slot_wait_since = None  # no clone is waiting for a slot any more
        return started > 0

    def _want_slot(self: PoolActor) -> None:
        if not self.waiting_for_slot:
            self.waiting_for_slot = True
            broker = self.directory.get("slots")
            if broker is not None:
                broker.tell(WantCloneSlot(self.name))

    def _start_clone(self: PoolActor, request: tuple[str, str] | None = None) -> str | None:
        """Reserve a name and a clone slot and start a clone; the VM's name, or None.

        ``request`` is ``(request_id, alias)`` for a clone of an on-demand request: it takes
        an on-demand slot, and the VM is the request's (see ``OnDemandVms``).
        """
        provider = self._provider()
        if provider is None:
            return None
        limit = self.settings.task_limit if request is None else self.settings.ondemand_clone_limit
        for _ in range(3):
            vm = self.hostnames.candidate(self.settings.prefix)
            now = self.clock.now()
            code = self.store.reserve_clone(
                self.name, vm, limit=limit, clone_time=timefmt.format_epoch(now),
                domain=self.pool.domain, request=request,
            )
            if code == CloneReservation.NO_SLOT:
                if request is None:
                    if self.slot_wait_since is None:
                        self.slot_wait_since = self.clock.monotonic()
                    self._want_slot()
                return None
            if code == CloneReservation.NAME_TAKEN:
                self.metrics.increment("vmpooler_errors.duplicatehostname",
                                       tags={"pool": self.name})
                continue
            self.clone_started[vm] = now
            self.reserved_at[vm] = self.clock.monotonic()
            if request is None:  # a request's wait is timed by the on-demand manager
                waited = self.slot_wait_since
                self.metrics.timing(
                    "clone.queue_wait",
                    0.0 if waited is None else max(0.0, self.reserved_at[vm] - waited),
                    tags={"pool": self.name, "kind": "pool"})
            if request is not None:
                self.ondemand[vm] = request
            if not self._send(ProviderOp.CLONE, vm, self.template, self.clone_target):
                self.store.clone_failed(self.name, vm, error="provider unavailable",
                                        error_class="ProviderUnavailable", ttl=self.data_ttl,
                                        release_slot=True, ondemand=request is not None)
                self.ondemand.pop(vm, None)
                return None
            log.info("[*] [%s] '%s' is being cloned from '%s'%s", self.name, vm, self.template,
                     f" for request '{request[0]}'" if request else "")
            return vm
        log.error("[!] [%s] could not find a free hostname in 3 attempts", self.name)
        return None

    def _remove_excess(self: PoolActor, ready: set[str], pending: set[str]) -> None:
        surplus = len(ready) - self.size
        if surplus <= 0:
            return
        for vm in sorted(ready - self.busy.keys())[:surplus]:
            if self.store.retire(self.name, vm, "ready"):
                ready.discard(vm)
                self._lost("excess")
                log.info("[>] [%s] '%s' is surplus to the pool size, moved to 'completed'",
                         self.name, vm)
        if pending:
            self._lost("excess", self.store.drain(self.name, include_ready=False))

    def refill(self: PoolActor, *, freed: int = 0) -> None:
        """Start clones if the pool is short. ``freed`` clone slots were just released by
        this pool: those it does not reuse go to pools waiting for one."""
        self.waiting_for_slot = False
        started = 0
        backing_off = self.clock.monotonic() < self.clone_retry_at
        if not self.preparing and self.initialised and not backing_off:
            counts = self.store.counts(self.name, ("ready", "pending"))
            pooled_pending = max(0, counts["pending"] - len(self.ondemand))
            want = self.size - counts["ready"] - pooled_pending
            for _ in range(max(0, want)):
                if not self._start_clone():
                    break
                started += 1
            else:
                self.slot_wait_since = None  # no clone is waiting for a slot any more
        if freed > started and not self.waiting_for_slot:
            broker = self.directory.get("slots")
            if broker is not None:
                broker.tell(CloneSlotFreed(freed - started))

    def _flag_empty(self: PoolActor, snap: PoolSnapshot, ready: int) -> None:
        if ready == 0 and self.size > 0:
            if not snap.empty_flag:
                self.store.set_empty_flag(self.name, True)
                log.info("[!] [%s] is empty", self.name)
        elif snap.empty_flag:
            self.store.set_empty_flag(self.name, False)
