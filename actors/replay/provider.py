"""The replay's hypervisor: the dummy provider whose clones, suspends and resumes take a
fixed time on a fake clock.

A clone's worker thread blocks in :meth:`SimulatedSleep.sleep` until the replay has moved
the fake clock past the clone's end and called :meth:`SimulatedSleep.wake`; until then the
VM is in the inventory but not ready, as on a hypervisor. A suspend (or power-off: the same
time) blocks its worker :data:`SUSPEND_TIME_S`, a resume the replay's resume time, the same
way; a VM on standby or still resuming is not ready. Nothing here reads the real time.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
from collections import Counter
from collections.abc import Callable

from vmpooler.providers.base import Capability, ProviderContext, VmInfo
from vmpooler.providers.dummy import DummyProvider

__all__ = ["SUSPEND_TIME_S", "ReplayProvider", "SimulatedSleep"]

SUSPEND_TIME_S = 5.0
"""Simulated seconds a suspend (or a power-off) of a standby VM takes."""

CLONE = "clone"
"""The :meth:`SimulatedSleep.sleep` kind of a clone (on the provider's clone workers)."""
CALL = "call"
"""The kind of any other call's sleep (a suspend or resume, on the provider's call workers)."""


class SimulatedSleep:
    """Sleeps measured on a clock that only moves when told (``monotonic``).

    Thread-safe. :meth:`sleep` blocks its caller; :meth:`next_wake` says when the soonest
    sleeper is due; :meth:`wake` releases every sleeper that is due by now and waits until
    each has left :meth:`sleep` (so what it does next is the caller's to wait for).
    """

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._cond = threading.Condition()
        self._due: list[tuple[float, int]] = []
        self._seq = itertools.count()
        self._sleeping: Counter[str] = Counter()
        self._stopped = False

    def sleep(self, seconds: float, kind: str = CLONE) -> None:
        """Block until the clock has moved ``seconds`` on and :meth:`wake` was called;
        ``kind`` (:data:`CLONE` or :data:`CALL`) is what :meth:`asleep` counts it as."""
        with self._cond:
            entry = (self._monotonic() + max(0.0, seconds), next(self._seq))
            heapq.heappush(self._due, entry)
            self._sleeping[kind] += 1
            self._cond.notify_all()
            while not self._stopped and self._monotonic() < entry[0]:
                self._cond.wait()
            self._due.remove(entry)
            heapq.heapify(self._due)
            self._sleeping[kind] -= 1
            self._cond.notify_all()

    @property
    def sleeping(self) -> int:
        """How many callers are blocked in :meth:`sleep` now."""
        with self._cond:
            return sum(self._sleeping.values())

    def asleep(self, kind: str) -> int:
        """How many callers of ``kind`` are blocked in :meth:`sleep` now."""
        with self._cond:
            return self._sleeping[kind]

    def next_wake(self) -> float | None:
        """Seconds from now until the soonest sleeper is due (0 if one is), or None."""
        with self._cond:
            if not self._due:
                return None
            return max(0.0, self._due[0][0] - self._monotonic())

    def wake(self, timeout: float = 30.0) -> None:
        """Release the sleepers due by now; return once they have all left :meth:`sleep`."""
        with self._cond:
            self._cond.notify_all()
            self._cond.wait_for(
                lambda: not self._due or self._due[0][0] > self._monotonic(), timeout)

    def stop(self) -> None:
        """Release every sleeper now, and any later one at once."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()


class ReplayProvider(DummyProvider):
    """The dummy provider with a clone time of exactly ``clone_time`` simulated seconds, a
    resume time of ``resume_time``, a suspend time of :data:`SUSPEND_TIME_S`, and no
    failures; it can keep standby VMs suspended or powered off, and counts, per pool, the
    clones it started (:attr:`clones`) and the standby VMs it resumed (:attr:`resumes`)."""

    def __init__(self, context: ProviderContext, *, clone_time: float,
                 sleeper: SimulatedSleep, resume_time: float = 15.0) -> None:
        super().__init__(context, rng=random.Random(0), sleep=lambda _s: None)
        self.clone_time = clone_time
        self.resume_time = resume_time
        self.sleeper = sleeper
        self.clones: Counter[str] = Counter()
        self.resumes: Counter[str] = Counter()
        self._cloning: set[str] = set()
        self._count_lock = threading.Lock()

    def create_vm(self, pool: str, vm: str, *, template: str | None = None,
                  clone_target: str | None = None) -> VmInfo:
        """Create the VM (not ready until its clone time has passed), then return."""
        with self._count_lock:
            self.clones[pool] += 1
            self._cloning.add(vm)
        try:
            info = super().create_vm(pool, vm, template=template, clone_target=clone_target)
            self.sleeper.sleep(self.clone_time, CLONE)
        finally:
            with self._count_lock:
                self._cloning.discard(vm)
        return info

    def vm_ready(self, pool: str, vm: str) -> bool:
        """False while the VM's clone time runs, else the dummy's answer."""
        with self._count_lock:
            if vm in self._cloning:
                return False
        return super().vm_ready(pool, vm)

    @property
    def capabilities(self) -> frozenset[Capability]:
        """Both standby modes: suspended and powered off."""
        return frozenset({Capability.SUSPEND, Capability.POWER_OFF})

    def suspend_vm(self, pool: str, vm: str, *, mode: Capability = Capability.SUSPEND) -> bool:
        """The dummy's suspend (or power-off), :data:`SUSPEND_TIME_S` for a running VM."""
        if self._powerstate(pool, vm) == "PoweredOn":
            self.sleeper.sleep(SUSPEND_TIME_S, CALL)
        return super().suspend_vm(pool, vm, mode=mode)

    def resume_vm(self, pool: str, vm: str) -> bool:
        """The dummy's resume, ``resume_time`` for a VM on standby (suspended or powered off
        alike), counted in :attr:`resumes`; not ready until it has returned."""
        if self._powerstate(pool, vm) in (None, "PoweredOn"):
            return super().resume_vm(pool, vm)
        self.sleeper.sleep(self.resume_time, CALL)
        resumed = super().resume_vm(pool, vm)
        if resumed:
            with self._count_lock:
                self.resumes[pool] += 1
        return resumed

    def _powerstate(self, pool: str, vm: str) -> str | None:
        info = self.get_vm(pool, vm)
        return None if info is None else info.powerstate
