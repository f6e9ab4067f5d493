"""The replay's hypervisor: the dummy provider whose clones take a fixed time on a fake clock.

A clone's worker thread blocks in :meth:`SimulatedSleep.sleep` until the replay has moved
the fake clock past the clone's end and called :meth:`SimulatedSleep.wake`; until then the
VM is in the inventory but not ready, as on a hypervisor. Nothing here reads the real time.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
from collections import Counter
from collections.abc import Callable

from vmpooler.providers.base import ProviderContext, VmInfo
from vmpooler.providers.dummy import DummyProvider

__all__ = ["ReplayProvider", "SimulatedSleep"]


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
        self._sleeping = 0
        self._stopped = False

    def sleep(self, seconds: float) -> None:
        """Block until the clock has moved ``seconds`` on and :meth:`wake` was called."""
        with self._cond:
            entry = (self._monotonic() + max(0.0, seconds), next(self._seq))
            heapq.heappush(self._due, entry)
            self._sleeping += 1
            self._cond.notify_all()
            while not self._stopped and self._monotonic() < entry[0]:
                self._cond.wait()
            self._due.remove(entry)
            heapq.heapify(self._due)
            self._sleeping -= 1
            self._cond.notify_all()

    @property
    def sleeping(self) -> int:
        """How many callers are blocked in :meth:`sleep` now."""
        with self._cond:
            return self._sleeping

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
    """The dummy provider with a clone time of exactly ``clone_time`` simulated seconds and
    no failures; it counts the clones it started, per pool (:attr:`clones`)."""

    def __init__(self, context: ProviderContext, *, clone_time: float,
                 sleeper: SimulatedSleep) -> None:
        super().__init__(context, rng=random.Random(0), sleep=lambda _s: None)
        self.clone_time = clone_time
        self.sleeper = sleeper
        self.clones: Counter[str] = Counter()
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
            self.sleeper.sleep(self.clone_time)
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
