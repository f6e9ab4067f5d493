"""Keeping a pool at its size and template (reference §4.7–§4.8): the overrides in effect,
drains, template preparation, surplus removal and the empty-pool flag.

:class:`PoolUpkeep` owns the pool's effective ``size`` (``base``, the configured size until
an override says otherwise, plus ``extra``, what alias failover takes over), ``template`` and
``clone_target`` (the configured values until an override says otherwise), whether a
template is being prepared, and what it last read of the pool's override keys and flags,
with when to read them again:

* everything (the override keys ``vmpooler__config__poolsize``/``template``/
  ``clone_target``, ``vmpooler__poolreset`` and the undo sets, and the flags
  ``vmpooler__template__prepared`` and ``vmpooler__empty__<pool>``) on the first cycle,
  after a Redis error, and then again once :attr:`PoolUpkeep.refresh_period` seconds have
  passed: the safety net for writers that tell nobody (vmpooler's Ruby API, ``redis-cli``);
* the override keys also on the first cycle after the pool is told of a change
  (``PoolChanged``: our API sends one whenever it writes them);
* in between, the actor goes by what it read, less the undo and reset marks it
  acknowledged, plus the flags it wrote itself.

Used only on the pool actor's thread.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping

from vmpooler.actors.config.overrides import effective_size, size_override
from vmpooler.actors.messages import PoolChanged, PrepareTemplate, ProviderCallFinished
from vmpooler.actors.pool.calls import ProviderCalls
from vmpooler.actors.pool.context import PoolIO, PoolSettings
from vmpooler.actors.pool.sizing import PoolSizing
from vmpooler.actors.storage.pool_snapshot import PoolFlags, PoolOverrides, PoolSnapshot

__all__ = ["OVERRIDE_REFRESH_CYCLES", "PoolUpkeep"]

log = logging.getLogger(__name__)

_NOT_YET = object()

OVERRIDE_REFRESH_CYCLES = 5
"""The safety-net period is ``OVERRIDE_REFRESH_CYCLES × check_loop_delay_max`` seconds: at
most every fifth idle cycle reads the keys (5 min at vmpooler's default of 60 s). A key
written without telling the manager is applied within that period plus one cycle
(docs/compatibility.md)."""


class PoolUpkeep:
    """Size, template and clone-target decisions of one pool.

    ``initialised`` turns true on the first snapshot, whose overrides are adopted without a
    drain (a restarted manager must not drain every overridden pool).
    """

    def __init__(self, policy: PoolSettings, io: PoolIO, *, calls: ProviderCalls,
                 on_drain: Callable[[], int] | None = None,
                 standby_cost: float | None = None) -> None:
        """``standby_cost``: demand sizing sizes the pool's standby tier too (see
        :class:`~vmpooler.actors.pool.sizing.PoolSizing`)."""
        self.policy, self.io, self.calls = policy, io, calls
        self.on_drain = on_drain  # also drains what the pool holds aside (the brake's VMs)
        self.base = min(self.policy.pool.size, self.policy.max_size)  # configured, or its override
        self.extra = 0  # taken over from alias siblings (alias failover; never below 0)
        demand = self.policy.pool.demand
        self.sizing = None if demand is None else PoolSizing(policy, io, demand,
                                                             standby_cost=standby_cost)
        self.standby_target: int | None = None  # the sizer's, for ``standby: auto``
        if demand is not None:
            self.base = demand.size_min  # until the first cycle reads the demand
        self.template = self.policy.pool.template
        self.clone_target = self.policy.pool.clone_target
        self.initialised = False
        self.preparing = False
        self.preparing_since = 0.0  # monotonic
        self.overrides = PoolOverrides()  # as last read, less what this actor acknowledged
        self.flags = PoolFlags()  # as last read, with what this actor wrote since
        self.refresh_period = OVERRIDE_REFRESH_CYCLES * self.policy.backoff.max
        self._read_at: float | None = None  # monotonic, of the last read of both; None: now
        self._overrides_stale = False  # told of a change since the override keys were read
        self._warned_size: object = _NOT_YET  # the last size override logged as refused

    @property
    def size(self) -> int:
        """The size the pool keeps: ``base`` (the configured size or its override, at most
        ``max_pool_size``; for a pool sized by demand, its demand target) plus ``extra``, what
        it takes over for alias siblings that cannot deliver
        (:mod:`~vmpooler.actors.pool.failover_watch`)."""
        return self.base + self.extra

    # -- reading the override keys and flags ---------------------------------------------------
    def reads_due(self, mono: float) -> tuple[bool, bool]:
        """Whether this cycle's snapshot must read ``(overrides, flags)``."""
        read_at = self._read_at
        periodic = read_at is None or mono - read_at >= self.refresh_period
        return periodic or self._overrides_stale, periodic

    def adopt(self, snap: PoolSnapshot, mono: float) -> None:
        """Take what the snapshot read (taken at ``mono``) as the state of Redis."""
        if snap.overrides is not None:
            self.overrides = snap.overrides
            self._overrides_stale = False
        if snap.flags is not None:
            self.flags = snap.flags
            if snap.overrides is not None:
                self._read_at = mono

    def changed(self) -> None:
        """The pool was told of a change: read the override keys on the next cycle."""
        self._overrides_stale = True

    def redis_failed(self) -> None:
        """Redis failed (it may have restarted and lost keys): read everything again."""
        self._read_at = None

    # -- overrides, template, size ------------------------------------------------------------
    def initialise(self) -> None:
        """Adopt the template and clone-target overrides of the first snapshot."""
        if self.overrides.template:
            self.template = self.overrides.template
        if self.overrides.clone_target:
            self.clone_target = self.overrides.clone_target
        self.initialised = True

    def _acknowledged(self, **marks: bool) -> None:
        self.overrides = dataclasses.replace(self.overrides, **marks)  # type: ignore[arg-type]

    def apply_overrides(self) -> bool:
        """Apply the size/template/clone-target overrides and resets last read. True if the
        pool drained."""
        store, name, ov = self.io.store, self.policy.name, self.overrides
        drained = False
        if ov.undo_size:
            store.ack_undo(name, size=True)
            self._acknowledged(undo_size=False)
        size = self._size(ov.size)
        if self.sizing is not None:  # an override is the floor of a pool sized by demand
            self.sizing.set_floor(size if ov.size is not None else None)
        elif size != self.base:
            log.info("[*] [%s] size changed from %d to %d", name, self.base, size)
            self.base = size
        if ov.undo_template:
            store.ack_undo(name, template=True)
            self._acknowledged(undo_template=False)
        template = ov.template or self.policy.pool.template
        if template != self.template:
            log.info("[*] [%s] template changed from '%s' to '%s'", name, self.template,
                     template)
            self.template = template
            drained |= self.drain(f"template changed to '{template}'") >= 0
        target = ov.clone_target or self.policy.pool.clone_target
        if target != self.clone_target:
            self.clone_target = target
            drained |= self.drain(f"clone target changed to '{target}'") >= 0
        if ov.reset_requested:
            ours = store.ack_reset(name)
            self._acknowledged(reset_requested=False)
            if ours:
                drained |= self.drain("pool reset requested") >= 0
        if self.flags.prepared_template != self.template and not self.preparing:
            self.prepare_template()
        return drained

    def follow_demand(self, ready: int) -> None:
        """For a pool sized by demand, take its target now as ``base`` (``ready``: its ready
        VMs, for the metrics)."""
        if self.sizing is not None:
            target = self.sizing.update(ready)
            self.base = target.size
            if self.sizing.standby_cost is not None:
                self.standby_target = target.standby

    def cloned(self, seconds: float) -> None:
        """A clone of the pool finished in ``seconds`` (demand sizing learns clone times)."""
        if self.sizing is not None:
            self.sizing.cloned(seconds)

    def _size(self, override: str | None) -> int:
        """The size in effect for the override last read (None: none): never above
        ``max_size``. An override that is no integer or above the limit is logged once per
        value it takes (whoever wrote it: our API refuses both)."""
        name = self.policy.name
        size = effective_size(self.policy.pool.size, override)
        shown = override if override is None or len(override) <= 40 else f"{override[:40]}..."
        if override is not None and size_override(override) is None:
            self._warn_once(override, "[!] [%s] ignoring size override %r: not an integer",
                            name, shown)
        elif size > self.policy.max_size:
            self._warn_once(override, "[!] [%s] size %s is above max_pool_size %d: the pool "
                            "is kept at %d", name, shown or size, self.policy.max_size,
                            self.policy.max_size)
            size = self.policy.max_size
        return size

    def _warn_once(self, value: object, message: str, *args: object) -> None:
        if value != self._warned_size:
            self._warned_size = value
            log.warning(message, *args)

    def _prepared(self, template: str) -> None:
        self.io.store.set_prepared_template(self.policy.name, template)
        self.flags = dataclasses.replace(self.flags, prepared_template=template)

    def drain(self, reason: str) -> int:
        """Move every ready and pending VM of the pool's own to completed, then wake the
        pool actor (``PoolChanged``). Returns how many moved."""
        moved = self.io.store.drain(self.policy.name)
        self.io.lost("drained", moved)
        if self.on_drain is not None:
            moved += self.on_drain()
        log.info("[*] [%s] %s: %d ready and pending VMs moved to 'completed'", self.policy.name,
                 reason, moved)
        self.io.self_ref.tell(PoolChanged(self.policy.name, "drained"))
        return moved

    def prepare_template(self) -> None:
        """Prepare the template in effect: ``PREPARE_TEMPLATE`` when delta disks are wanted
        and the template has none yet, else just record it as prepared."""
        if self.policy.settings.create_template_delta_disks and not self.io.store.has_delta_disks(
            self.template
        ):
            provider = self.calls.provider()
            if provider is not None:
                self.preparing = True
                self.preparing_since = self.io.clock.monotonic()
                provider.tell(self.calls.call(PrepareTemplate(self.template),
                                             f"template:{self.template}"))
                return
        self._prepared(self.template)

    def template_prepared(self, msg: ProviderCallFinished) -> None:
        """The answer to ``PREPARE_TEMPLATE``: record the delta disks (on success) and the
        prepared template (always)."""
        self.preparing = False
        if msg.failure is not None:
            log.error("[!] [%s] failed while preparing template '%s': %s", self.policy.name,
                      self.template, msg.failure.message)
        else:
            self.io.store.add_delta_disks(self.template)
        self._prepared(self.template)

    def expire_preparing(self, mono: float) -> None:
        """Stop waiting for a template preparation whose answer is overdue."""
        if self.preparing and mono - self.preparing_since > self.policy.lost_after:
            self.preparing = False

    # -- excess and the empty flag ---------------------------------------------------------------
    def remove_excess(self, ready: set[str], pending: set[str],
                      ready_since: Mapping[str, float] | None = None) -> None:
        """When ``ready`` exceeds the size, retire the surplus (sorted, not busy) and, as
        vmpooler does, drain every pending VM too. A pool sized by demand retires its oldest
        ready VMs (by ``ready_since``) and lets its pending ones finish (its target shrinks
        with hysteresis: they are likely wanted). ``ready`` is updated in place."""
        name = self.policy.name
        surplus = len(ready) - self.size
        if surplus <= 0:
            return
        if self.sizing is not None:
            since = ready_since or {}
            surplus_vms = sorted(ready - self.calls.busy,
                                 key=lambda vm: (since.get(vm, 0.0), vm))
            pending = set()
        else:
            surplus_vms = sorted(ready - self.calls.busy)
        for vm in surplus_vms[:surplus]:
            if self.io.store.retire(name, vm, "ready"):
                ready.discard(vm)
                self.io.lost("excess")
                log.info("[>] [%s] '%s' is surplus to the pool size, moved to 'completed'",
                         name, vm)
        if pending:
            self.io.lost("excess", self.io.store.drain(name, include_ready=False))

    def flag_empty(self, ready: int) -> None:
        """Set ``vmpooler__empty__<pool>`` (logging once) when nothing is ready, else clear it."""
        if ready == 0 and self.size > 0:
            if not self.flags.empty:
                self.io.store.set_empty_flag(self.policy.name, True)
                self.flags = dataclasses.replace(self.flags, empty=True)
                log.info("[!] [%s] is empty", self.policy.name)
        elif self.flags.empty:
            self.io.store.set_empty_flag(self.policy.name, False)
            self.flags = dataclasses.replace(self.flags, empty=False)
