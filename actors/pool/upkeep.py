"""Keeping a pool at its size and template (reference §4.7–§4.8): the overrides in effect,
drains, template preparation, surplus removal and the empty-pool flag.

:class:`PoolUpkeep` owns the pool's effective ``size``, ``template`` and ``clone_target``
(the configured values until an override says otherwise) and whether a template is being
prepared. Used only on the pool actor's thread.
"""

from __future__ import annotations

import logging

from vmpooler.actors.config.overrides import effective_size, size_override
from vmpooler.actors.messages import PoolChanged, ProviderCallFinished, ProviderOp
from vmpooler.actors.pool.context import PoolContext
from vmpooler.actors.storage.store import PoolSnapshot

__all__ = ["PoolUpkeep"]

log = logging.getLogger(__name__)


class PoolUpkeep:
    """Size, template and clone-target decisions of one pool.

    ``initialised`` turns true on the first snapshot, whose overrides are adopted without a
    drain (a restarted manager must not drain every overridden pool).
    """

    def __init__(self, ctx: PoolContext) -> None:
        self.ctx = ctx
        self.size = ctx.pool.size
        self.template = ctx.pool.template
        self.clone_target = ctx.pool.clone_target
        self.initialised = False
        self.preparing = False
        self.preparing_since = 0.0  # monotonic

    # -- overrides, template, size ------------------------------------------------------------
    def initialise(self, snap: PoolSnapshot) -> None:
        """Adopt the template and clone-target overrides of the first snapshot."""
        if snap.template_override:
            self.template = snap.template_override
        if snap.clone_target_override:
            self.clone_target = snap.clone_target_override
        self.initialised = True

    def apply_overrides(self, snap: PoolSnapshot) -> bool:
        """Apply size/template/clone-target overrides and resets. True if the pool drained."""
        ctx, store, name = self.ctx, self.ctx.store, self.ctx.name
        drained = False
        if snap.undo_size:
            store.ack_undo(name, size=True)
        size = effective_size(ctx.pool.size, snap.size_override)
        if snap.size_override is not None and size_override(snap.size_override) is None:
            log.warning("[!] [%s] ignoring size override %r", name, snap.size_override)
        if size != self.size:
            log.info("[*] [%s] size changed from %d to %d", name, self.size, size)
            self.size = size
        if snap.undo_template:
            store.ack_undo(name, template=True)
        template = snap.template_override or ctx.pool.template
        if template != self.template:
            log.info("[*] [%s] template changed from '%s' to '%s'", name, self.template,
                     template)
            self.template = template
            drained |= self.drain(f"template changed to '{template}'") >= 0
        target = snap.clone_target_override or ctx.pool.clone_target
        if target != self.clone_target:
            self.clone_target = target
            drained |= self.drain(f"clone target changed to '{target}'") >= 0
        if snap.reset_requested and store.ack_reset(name):
            drained |= self.drain("pool reset requested") >= 0
        if snap.prepared_template != self.template and not self.preparing:
            self.prepare_template()
        return drained

    def drain(self, reason: str) -> int:
        """Move every ready and pending VM of the pool's own to completed, then wake the
        pool actor (``PoolChanged``). Returns how many moved."""
        ctx = self.ctx
        moved = ctx.store.drain(ctx.name)
        ctx.lost("drained", moved)
        log.info("[*] [%s] %s: %d ready and pending VMs moved to 'completed'", ctx.name, reason,
                 moved)
        ctx.self_ref.tell(PoolChanged(ctx.name, "drained"))
        return moved

    def prepare_template(self) -> None:
        """Prepare the template in effect: ``PREPARE_TEMPLATE`` when delta disks are wanted
        and the template has none yet, else just record it as prepared."""
        ctx = self.ctx
        if ctx.settings.create_template_delta_disks and not ctx.store.has_delta_disks(
            self.template
        ):
            provider = ctx.calls.provider()
            if provider is not None:
                self.preparing = True
                self.preparing_since = ctx.clock.monotonic()
                provider.tell(ctx.calls.call(ProviderOp.PREPARE_TEMPLATE,
                                             f"template:{self.template}"))
                return
        ctx.store.set_prepared_template(ctx.name, self.template)

    def template_prepared(self, msg: ProviderCallFinished) -> None:
        """The answer to ``PREPARE_TEMPLATE``: record the delta disks (on success) and the
        prepared template (always)."""
        ctx = self.ctx
        self.preparing = False
        if msg.failure is not None:
            log.error("[!] [%s] failed while preparing template '%s': %s", ctx.name,
                      self.template, msg.failure.message)
        else:
            ctx.store.add_delta_disks(self.template)
        ctx.store.set_prepared_template(ctx.name, self.template)

    def expire_preparing(self, mono: float) -> None:
        """Stop waiting for a template preparation whose answer is overdue."""
        if self.preparing and mono - self.preparing_since > self.ctx.lost_after:
            self.preparing = False

    # -- excess and the empty flag ---------------------------------------------------------------
    def remove_excess(self, ready: set[str], pending: set[str]) -> None:
        """When ``ready`` exceeds the size, retire the surplus (sorted, not busy) and, as
        vmpooler does, drain every pending VM too. ``ready`` is updated in place."""
        ctx, name = self.ctx, self.ctx.name
        surplus = len(ready) - self.size
        if surplus <= 0:
            return
        for vm in sorted(ready - ctx.calls.busy)[:surplus]:
            if ctx.store.retire(name, vm, "ready"):
                ready.discard(vm)
                ctx.lost("excess")
                log.info("[>] [%s] '%s' is surplus to the pool size, moved to 'completed'",
                         name, vm)
        if pending:
            ctx.lost("excess", ctx.store.drain(name, include_ready=False))

    def flag_empty(self, snap: PoolSnapshot, ready: int) -> None:
        """Set ``vmpooler__empty__<pool>`` (logging once) when nothing is ready, else clear it."""
        ctx = self.ctx
        if ready == 0 and self.size > 0:
            if not snap.empty_flag:
                ctx.store.set_empty_flag(ctx.name, True)
                log.info("[!] [%s] is empty", ctx.name)
        elif snap.empty_flag:
            ctx.store.set_empty_flag(ctx.name, False)
