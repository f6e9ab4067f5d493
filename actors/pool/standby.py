"""One pool's standby tier: suspended (or powered-off) VMs resumed when ``ready`` runs short.

A pool with ``standby`` keeps, besides its ``size`` ready VMs, up to ``target`` standby VMs
(docs/sizing.md, "Standby tier"). Each went through the same readiness check as a ready VM
and was then suspended, so a resumed VM is known good. They live in the pool's ``standby``
set (:mod:`~vmpooler.actors.storage.standby_store`), never in ``ready``; each VM's hash says
where it stands, so a new owner of the pool (a restarted or another manager) carries on
where the last one stopped:

``suspending`` → ``suspended`` → ``resuming`` → ``checking`` → ``ready``

* A pending VM that passes its check enters the tier when ``ready`` (with the VMs already
  waking) holds ``size`` and the tier is short (:meth:`Standby.takes`).
* Every cycle (:meth:`Standby.cycle`): a VM gone from the inventory is forgotten; each VM
  whose step has no call in flight is driven on (suspend, resume and readiness check are
  idempotent: asking again after a handover is harmless); one suspended longer than
  ``standby_ttl`` is recycled; when ``ready`` is short, suspended VMs are resumed (oldest
  first, at most ``standby_resume_limit`` waking at once); a tier above its target gives up
  its youngest suspended VMs.
* A resumed VM enters ``ready`` only once its readiness check passes; one that fails to
  suspend, to resume or to become ready within the pool's ``timeout`` is destroyed (dead
  letter ``standby``, ``vm.lost``) and the clone refill replaces it.

Clones fill both tiers: the refill counts ``size + target`` against ready, pending and
standby VMs (:meth:`Standby.shortfall`). Used only on the pool actor's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from vmpooler.actors.messages import CheckPending, ProviderCallFinished, ResumeVm, SuspendVm
from vmpooler.actors.pool.calls import ProviderCalls
from vmpooler.actors.pool.context import PoolIO, PoolSettings
from vmpooler.actors.pool.dead_letters import DeadLetters
from vmpooler.actors.pool.vm_cache import VmCache
from vmpooler.actors.storage.standby_store import StandbyStore, StandbyVm
from vmpooler.providers.base import Capability

__all__ = ["Standby"]

log = logging.getLogger(__name__)

PAUSE_AFTER_PERMANENT = 3600
"""Seconds no VM enters the tier after a permanent suspend failure (a missing privilege):
ready VMs are cloned as without a tier, the tier's VMs are still resumed."""

WAKING = frozenset({"resuming", "checking"})
"""States of VMs on their way to ``ready``."""


class Standby:
    """The standby tier of one pool (disabled without ``standby`` or when the provider
    cannot put VMs on standby in the configured state: then every method does nothing)."""

    def __init__(self, policy: PoolSettings, io: PoolIO, *, calls: ProviderCalls, vms: VmCache,
                 dead_letters: DeadLetters, modes: frozenset[Capability],
                 store: StandbyStore | None = None) -> None:
        self.policy, self.io, self.calls, self.vms = policy, io, calls, vms
        self.dead_letters = dead_letters
        self.store = store or StandbyStore(io.store.client, fence=io.store.fence)
        tier = policy.pool.standby
        self.tier = tier
        self.mode = (Capability.POWER_OFF if tier is not None and tier.state == "powered_off"
                     else Capability.SUSPEND)
        self.enabled = tier is not None and self.mode in modes
        if tier is not None and not self.enabled:
            log.warning("[!] [%s] provider '%s' cannot put VMs on standby (%s): the pool "
                        "keeps no standby VMs", policy.name, policy.pool.provider, tier.state)
        self.target = tier.count or 0 if self.enabled and tier is not None else 0
        self.members: dict[str, StandbyVm] = {}
        self.resume_sent: dict[str, float] = {}  # vm -> monotonic time its resume was sent
        # told how long each resume took until ready (the demand sizer learns resume times)
        self.on_resumed: Callable[[float], None] = lambda _seconds: None
        self.published: tuple[int, int] | None = None  # (count, target) last logged
        self.paused_until = 0.0  # monotonic: no VM enters the tier before (a permanent fault)

    # -- what the rest of the pool asks --------------------------------------------------------
    def owns(self, vm: str) -> bool:
        """Whether ``vm`` is in the tier (its provider answers come here)."""
        return vm in self.members

    def waking(self) -> int:
        """VMs resumed and not yet ready."""
        return sum(1 for m in self.members.values() if m.state in WAKING)

    def resting(self) -> list[StandbyVm]:
        """VMs suspended or being suspended, oldest first."""
        rest = [m for m in self.members.values() if m.state not in WAKING]
        return sorted(rest, key=lambda m: (m.since or 0.0, m.vm))

    def shortfall(self) -> int:
        """How many VMs the clone refill adds to the pool's size: the target less every
        standby VM, those on their way to ``ready`` included (they fill the running tier's
        gap, which the refill counts from ``ready`` alone). Negative: too many."""
        return self.target - len(self.members) if self.filling() else 0

    def room(self) -> int:
        """How many more VMs the tier may rest (suspended or being suspended)."""
        return self.target - len(self.resting()) if self.filling() else 0

    def filling(self) -> bool:
        """Whether VMs may enter the tier now: it is enabled and not paused after a
        permanent suspend failure (its VMs are still resumed meanwhile)."""
        return self.enabled and self.io.clock.monotonic() >= self.paused_until

    def auto_cost(self) -> float | None:
        """The tier's ``standby_cost`` when the demand sizer chooses its target (``standby:
        auto`` on a provider that can), else None."""
        tier = self.tier
        return tier.cost if self.enabled and tier is not None and tier.auto else None

    def set_target(self, target: int) -> None:
        """The tier's target (the demand sizer's, for ``standby: auto``, which logs its
        changes)."""
        if self.enabled and target != self.target:
            log.debug("[%s] standby target %d -> %d", self.policy.name, self.target, target)
            self.target = max(0, target)

    def takes(self, ready: int, size: int) -> bool:
        """Whether a pooled VM that just passed its check goes to standby rather than
        ``ready``: the running tier holds ``size`` (ready and waking VMs) and this one is short."""
        return self.filling() and ready + self.waking() >= size and self.room() > 0

    # -- a pending VM enters ---------------------------------------------------------------------
    def enter(self, vm: str, *, boot_seconds: float) -> int:
        """pending → standby, then suspend it. Returns the store's code (1 moved, 0 not
        pending, -1 a request's VM)."""
        now = self.io.clock.now()
        moved = self.store.enter(self.policy.name, vm, now=now, boot_seconds=boot_seconds)
        if moved == 1:
            self.members[vm] = StandbyVm(vm, "suspending", now, None, None)
            self.vms.forget(vm)
            self.io.metrics.timing("time_to_ready_state", boot_seconds,
                                   tags={"pool": self.policy.name})
            log.info("[>] [%s] '%s' moved from 'pending' to 'standby' (%s)", self.policy.name,
                     vm, self.tier.state if self.tier else "")
            self.calls.send(SuspendVm(self.mode), vm)
        return moved

    def absorb(self, ready: set[str], size: int) -> None:
        """Park ready VMs above ``size`` in the tier while it is short (youngest first: the
        oldest keep serving), instead of destroying them. ``ready`` is updated in place."""
        surplus = len(ready) - size
        if not self.filling() or surplus <= 0:
            return
        since = self.vms.ready_since
        for vm in sorted(ready - self.calls.busy, key=lambda v: (-since.get(v, 0.0), v)):
            if surplus <= 0 or self.room() <= 0:
                break
            now = self.io.clock.now()
            if self.store.park(self.policy.name, vm, now=now):
                ready.discard(vm)
                surplus -= 1
                self.members[vm] = StandbyVm(vm, "suspending", now, None, None)
                self.vms.forget(vm)
                log.info("[>] [%s] '%s' moved from 'ready' to 'standby': surplus to the pool "
                         "size", self.policy.name, vm)
                self.calls.send(SuspendVm(self.mode), vm)

    # -- the cycle -------------------------------------------------------------------------------
    def cycle(self, members: frozenset[str], inventory: set[str], ready: int,
              size: int) -> bool:
        """Drive every standby VM one step and move VMs between the tiers (see the module
        docstring). ``members`` is the standby set as the cycle read it; ``ready`` counts
        the pool's ready and held VMs. True if it was busy."""
        if not self.enabled and not members:
            self.members = {}
            return False
        self.members = self.store.read(self.policy.name, members)
        busy = self.calls.busy
        activity = False
        now = self.io.clock.now()
        ttl = self.tier.ttl if self.tier is not None else 0.0
        for vm, member in sorted(self.members.items()):
            if vm in busy:
                continue
            if vm not in inventory:
                self._leave(vm, "vanished", "is no longer in inventory", dead_letter=False)
            elif not self.enabled:
                self._leave(vm, "excess", "is in standby, which the pool no longer keeps",
                            dead_letter=False)
            elif member.state == "suspending":
                activity |= self.calls.send(SuspendVm(self.mode), vm)
            elif member.state == "resuming":
                activity |= self.calls.send(ResumeVm(), vm)
            elif member.state == "checking":
                activity |= self._check(vm, member, now)
            elif now - (member.suspended or member.since or now) > ttl:
                self._leave(vm, "standby_ttl",
                            f"was in standby over {ttl / 60:.0f} minutes (standby_ttl)",
                            dead_letter=False)
        if not self.enabled:
            return activity
        activity |= self._resume(ready, size)
        self._give_up_excess()
        self._publish()
        return activity

    def _resume(self, ready: int, size: int) -> bool:
        waking = self.waking()
        want = min(size - ready - waking, self.tier.resume_limit - waking if self.tier else 0)
        started = 0
        for member in self.resting():
            if started >= want:
                break
            if member.state != "suspended" or member.vm in self.calls.busy:
                continue
            if not self.store.set_state(self.policy.name, member.vm, "resuming"):
                continue
            self.members[member.vm] = StandbyVm(member.vm, "resuming", member.since,
                                                member.suspended, None)
            self.resume_sent[member.vm] = self.io.clock.monotonic()
            self.calls.send(ResumeVm(), member.vm)
            log.info("[>] [%s] '%s' is being resumed from standby (%d ready of %d)",
                     self.policy.name, member.vm, ready, size)
            started += 1
        return started > 0

    def _give_up_excess(self) -> None:
        excess = len(self.resting()) - self.target
        if excess <= 0:
            return
        resting = [m for m in reversed(self.resting())
                   if m.state == "suspended" and m.vm not in self.calls.busy]
        for member in resting[:excess]:
            self._leave(member.vm, "excess", "is surplus to the standby target",
                        dead_letter=False)

    def _check(self, vm: str, member: StandbyVm, now: float) -> bool:
        if self._timed_out(vm, member, now):
            return False
        return self.calls.send(CheckPending(), vm)

    def _timed_out(self, vm: str, member: StandbyVm, now: float) -> bool:
        """Destroy a resumed VM not ready within the pool's ``timeout`` (True)."""
        if member.resumed is None or now - member.resumed <= self.policy.timeout_min * 60:
            return False
        self._failed(vm, "resume", "Timeout",
                     f"not ready {self.policy.timeout_min} minutes after its resume")
        return True

    def drain(self) -> int:
        """The pool drained (reset, template change): every standby VM goes to completed.
        Returns how many moved."""
        moved = 0
        for vm in sorted(self.members):
            if self.io.store.retire(self.policy.name, vm, "standby"):
                moved += 1
            self._forget(vm)
        self.io.lost("drained", moved)
        return moved

    # -- provider answers -----------------------------------------------------------------------
    def answered(self, msg: ProviderCallFinished) -> None:
        """A provider answer about a standby VM: suspend, resume or readiness check."""
        vm = msg.vm or ""
        member = self.members.get(vm)
        if member is None:
            return
        handler: dict[str, Callable[[str, StandbyVm, ProviderCallFinished], None]] = {
            "suspend": self._suspended, "resume": self._resumed,
            "check_pending": self._checked}
        step = handler.get(msg.op.value)
        if step is not None:
            step(vm, member, msg)

    def _suspended(self, vm: str, member: StandbyVm, msg: ProviderCallFinished) -> None:
        if msg.failure is not None:
            if msg.failure.circuit_open:
                return  # refused before reaching the provider: the next cycle asks again
            self._failed(vm, "suspend", msg.failure.error_class, msg.failure.message)
            if msg.failure.permanent:  # a missing privilege, say: no clone churn meanwhile
                self.paused_until = self.io.clock.monotonic() + PAUSE_AFTER_PERMANENT
                log.error("[!] [%s] no VM enters the standby tier for %d minutes: %s",
                          self.policy.name, PAUSE_AFTER_PERMANENT // 60, msg.failure.message)
            return
        if not msg.result_of(bool):
            self._leave(vm, "vanished", "vanished while being suspended", dead_letter=False)
            return
        now = self.io.clock.now()
        if self.store.set_state(self.policy.name, vm, "suspended", stamp="suspended", now=now):
            self.members[vm] = StandbyVm(vm, "suspended", member.since, now, None)
            self.io.metrics.increment("standby.suspend", tags={
                "pool": self.policy.name, "result": "success"})
            log.info("[>] [%s] '%s' is on standby (%s in %.2f seconds)", self.policy.name, vm,
                     self.tier.state if self.tier else "", msg.seconds)

    def _resumed(self, vm: str, member: StandbyVm, msg: ProviderCallFinished) -> None:
        if msg.failure is not None:
            if msg.failure.circuit_open:
                return
            self._failed(vm, "resume", msg.failure.error_class, msg.failure.message)
            return
        if not msg.result_of(bool):
            self._leave(vm, "vanished", "vanished while being resumed", dead_letter=False)
            return
        now = self.io.clock.now()
        if self.store.set_state(self.policy.name, vm, "checking", stamp="resumed", now=now):
            self.members[vm] = StandbyVm(vm, "checking", member.since, member.suspended, now)
            self.calls.send(CheckPending(), vm)

    def _checked(self, vm: str, member: StandbyVm, msg: ProviderCallFinished) -> None:
        if msg.failure is None and msg.result:
            now = self.io.clock.now()
            if not self.store.wake(self.policy.name, vm, now=now):
                return
            self.members.pop(vm, None)
            self.vms.ready_since[vm] = now
            self.vms.next_check[vm] = (self.io.clock.monotonic()
                                       + self.policy.settings.vm_checktime * 60)
            sent = self.resume_sent.pop(vm, None)
            tags = {"pool": self.policy.name}
            if sent is not None:
                took = self.io.clock.monotonic() - sent
                self.io.metrics.timing("standby.resume_duration", took, tags=tags)
                self.on_resumed(took)
            self.io.metrics.increment("standby.resume", tags={**tags, "result": "success"})
            log.info("[>] [%s] '%s' moved from 'standby' to 'ready' queue", self.policy.name, vm)
            return
        if msg.failure is not None and not msg.failure.circuit_open:
            self.io.store.set_vm_fields(vm, {"open_socket_error": msg.failure.message})
        self._timed_out(vm, member, self.io.clock.now())  # else the next cycle checks again

    # -- leaving the tier ----------------------------------------------------------------------
    def _failed(self, vm: str, step: str, error_class: str, message: str) -> None:
        reason = "resume_failed" if step == "resume" else "suspend_failed"
        if self.io.store.retire(self.policy.name, vm, "standby"):
            self.io.lost(reason)
            self.dead_letters.add("standby", vm, error_class, f"{step}: {message}")
            self.io.metrics.increment(f"standby.{step}", tags={
                "pool": self.policy.name, "result": "failure"})
            log.error("[!] [%s] '%s' %s failed, moved to 'completed': %s: %s",
                      self.policy.name, vm, step, error_class, message)
        self._forget(vm)

    def _leave(self, vm: str, reason: str, why: str, *, dead_letter: bool) -> None:
        if self.io.store.retire(self.policy.name, vm, "standby"):
            self.io.lost(reason)
            if dead_letter:
                self.dead_letters.add("standby", vm, reason, why)
            log.info("[>] [%s] '%s' %s, moved from 'standby' to 'completed'",
                     self.policy.name, vm, why)
        self._forget(vm)

    def forget(self, vm: str) -> None:
        """Drop what is remembered of ``vm`` (it left the tier)."""
        self._forget(vm)

    def _forget(self, vm: str) -> None:
        self.members.pop(vm, None)
        self.resume_sent.pop(vm, None)
        self.vms.forget(vm)

    def _publish(self) -> None:
        count = len(self.members)
        self.io.metrics.gauge("standby", count, tags={"pool": self.policy.name})
        state = (count, self.target)
        if state != self.published:
            self.published = state
            log.debug("[%s] standby: %d of %d", self.policy.name, count, self.target)
