"""The mass-failure brake of one pool (after Cluster API's ``maxUnhealthy``).

When more than ``max_unhealthy`` of a pool's size fails a check within
``max_unhealthy_window`` seconds, the provider or the network is sick, not the VMs: the
brake *engages*. A failing ready VM is then moved to the pool's ``held`` set (out of
``ready``, so no checkout takes it) instead of being destroyed, a failing running VM stays
where it is, and no clone replaces a held VM; healthy VMs keep being served. Once the window
holds no more failures than the share allows the brake *releases*: each held VM is checked
again and goes back to ready, or is destroyed as usual.

:class:`BrakeRule` and :class:`FailureWindow` are the pure part; :class:`Brake` wires them to
the pool (its Redis set, log lines, metrics, re-checks). A failure is one VM: the same VM
failing again only refreshes its time. Used only on the pool actor's thread.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass

import redis

from vmpooler.actors.messages import CheckReady
from vmpooler.actors.pool.calls import ProviderCalls
from vmpooler.actors.pool.context import PoolIO, PoolSettings
from vmpooler.actors.pool.vm_cache import VmCache
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.brake_store import BrakeStore
from vmpooler.actors.storage.lease_store import Fenced

__all__ = ["Brake", "BrakeRule", "FailureWindow"]

log = logging.getLogger(__name__)

MIN_FAILURES = 2
"""Fewer failing VMs than this never engage the brake (nor does a pool smaller than it)."""


@dataclass(frozen=True, slots=True)
class BrakeRule:
    """``share`` (0..1) of the pool's size that may fail within ``window`` seconds."""

    share: float
    window: float

    def over(self, failures: int, size: int) -> bool:
        """Whether ``failures`` VMs failing within the window engage the brake for a pool of
        ``size``: more than ``share × size``, at least :data:`MIN_FAILURES`, and a pool of
        at least that many VMs."""
        return (size >= MIN_FAILURES and failures >= MIN_FAILURES
                and failures > self.share * size)


class FailureWindow:
    """The VMs that failed a check, by the monotonic time of their last failure."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.failed_at: dict[str, float] = {}

    def record(self, vm: str, mono: float) -> None:
        """``vm`` failed a check at ``mono``."""
        self.failed_at[vm] = mono

    def count(self, mono: float) -> int:
        """How many VMs failed within the window ending at ``mono`` (older ones are dropped)."""
        cutoff = mono - self.window
        for vm in [vm for vm, at in self.failed_at.items() if at <= cutoff]:
            del self.failed_at[vm]
        return len(self.failed_at)


class Brake:
    """One pool's brake. ``engaged`` and the failure window live in memory; the held VMs in
    Redis (mirrored in ``self.vms.held``), so a restarted actor that finds held VMs starts
    engaged and releases them one window later."""

    def __init__(self, policy: PoolSettings, io: PoolIO, *, calls: ProviderCalls, vms: VmCache,
                 store: BrakeStore | None = None) -> None:
        self.policy, self.io, self.calls, self.vms = policy, io, calls, vms
        self.store = store or BrakeStore(self.io.store.client, fence=self.io.store.fence)
        share, window = self.policy.pool.brake(self.policy.settings)
        self.rule = BrakeRule(share, window) if share is not None else None
        self.window = FailureWindow(window)
        self.engaged = False
        self.loaded = False  # self.vms.held mirrors Redis
        self.published: tuple[bool, int, int] | None = None  # the state last written

    @property
    def held(self) -> set[str]:
        """The pool's held VMs (as last read or written)."""
        return self.vms.held

    def failures(self) -> int:
        """VMs that failed a check within the window."""
        return self.window.count(self.io.clock.monotonic())

    # -- a check failed ---------------------------------------------------------------------
    def failed(self, vm: str, size: int) -> bool:
        """Count ``vm``'s failed check. True if the brake is engaged: the caller must hold
        the VM (:meth:`hold`, or leave a running VM where it is) instead of destroying it.
        Always False while the brake is off."""
        if self.rule is None:
            return False
        mono = self.io.clock.monotonic()
        self.window.record(vm, mono)
        count = self.window.count(mono)
        if not self.engaged and self.rule.over(count, size):
            self.engaged = True
            self.io.metrics.increment("brake.engagements", tags={"pool": self.policy.name})
            log.warning(
                "[!] [%s] mass-failure brake engaged: %d VMs failed checks within %.0fs, more "
                "than max_unhealthy %s of size %d; failing VMs are held, not destroyed or "
                "replaced, until the failures stop", self.policy.name, count, self.rule.window,
                _percent(self.rule.share), size)
        return self.engaged

    def hold(self, vm: str) -> bool:
        """Move a failing ready VM to the held set; False if it was no longer ready."""
        moved = self._write(lambda: self.store.hold(
            self.policy.name, vm, now=timefmt.format_epoch(self.io.clock.now())))
        if moved:
            self.held.add(vm)
            self.vms.next_check.pop(vm, None)
            self.io.metrics.increment("brake.held", tags={"pool": self.policy.name})
            log.info("[!] [%s] '%s' failed its check while the brake is engaged: held, not "
                     "destroyed", self.policy.name, vm)
        return moved

    # -- every cycle ------------------------------------------------------------------------
    def review(self, size: int) -> set[str]:
        """Called at the start of every cycle, before discovery: read the held set when it
        is not known, release the brake when the failures stopped, re-check held VMs while
        released, emit ``brake.engaged``. Returns the held VMs (in no other queue, so not
        to be discovered). May raise ``redis.RedisError``."""
        if not self.loaded:
            self.vms.held = self.store.held(self.policy.name)
            self.loaded = True
            if self.held and not self.engaged and self.rule is not None:
                self.engaged = True  # held by an earlier actor: wait one window
                mono = self.io.clock.monotonic()
                for vm in self.held:
                    self.window.record(vm, mono)
        if self.engaged and (self.rule is None
                             or not self.rule.over(self.failures(), size)):
            self.engaged = False
            log.warning(
                "[*] [%s] mass-failure brake released: %d VMs failed checks within the last "
                "%.0fs; checking %d held VMs again", self.policy.name, self.failures(),
                self.window.window, len(self.held))
        if not self.engaged:
            for vm in sorted(self.held - self.calls.busy):
                self.calls.send(CheckReady(check_hostname=False), vm)
        if self.rule is not None:
            self.io.metrics.gauge("brake.engaged", 1 if self.engaged else 0,
                              tags={"pool": self.policy.name})
            self.publish()
        return set(self.held)

    def publish(self) -> None:
        """Write the brake's state for ``/status`` when it changed since the last write."""
        state = (self.engaged, self.failures(), len(self.held))
        if state != self.published:
            self.store.publish(self.policy.name, engaged=state[0], failures=state[1], held=state[2],
                               updated=timefmt.format_epoch(self.io.clock.now()))
            self.published = state

    def rechecked(self, vm: str, healthy: bool, size: int) -> None:
        """The answer to a held VM's check: back to ready when healthy; otherwise held again
        if its failure engages the brake, else destroyed (``vm.lost{reason=check_failed}``)."""
        if healthy:
            if self._write(lambda: self.store.unhold(self.policy.name, vm, to_ready=True)):
                self.held.discard(vm)
                self.vms.next_check[vm] = (self.io.clock.monotonic()
                                          + self.policy.settings.vm_checktime * 60)
                log.info("[>] [%s] '%s' passed its check after the brake: back to 'ready'",
                         self.policy.name, vm)
            return
        if self.failed(vm, size):
            return  # engaged again: stays held
        if self._write(lambda: self.store.unhold(self.policy.name, vm, to_ready=False)):
            self.held.discard(vm)
            self.io.lost("check_failed")
            self.vms.forget(vm)
            log.info("[>] [%s] '%s' failed its check after the brake, moved to 'completed'",
                     self.policy.name, vm)

    def drain(self) -> int:
        """The pool drained (reset, template change): every held VM goes to completed.
        Returns how many moved."""
        moved = 0
        for vm in sorted(self.held):
            if self._write(functools.partial(self.store.unhold, self.policy.name, vm,
                                             to_ready=False)):
                moved += 1
            self.held.discard(vm)
        self.io.lost("drained", moved)
        return moved

    def _write(self, op: Callable[[], bool]) -> bool:
        try:
            return op()
        except (redis.RedisError, Fenced):
            self.loaded = False  # unknown whether it applied, or another owner moved VMs
            raise


def _percent(share: float) -> str:
    text = f"{share * 100:.1f}".rstrip("0").rstrip(".")
    return f"{text}%"
