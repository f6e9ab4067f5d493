"""Waiting for instances to change state without a poll per instance.

:class:`InstanceWatch` keeps the instances that callers wait for (a launch waiting for
``running`` and an address, a termination, a stop or a start) and one thread that looks at
all of them with one ``DescribeInstances`` (filtered by ``instance-id``, so an instance EC2
does not show yet is simply absent, never an error) every ``poll_interval`` seconds while
anyone waits, and not at all otherwise. A waiter blocks on a condition, not on the API: the
calls per poll do not grow with the instances in flight.

EC2 is eventually consistent: an instance just launched may be missing from answers for a
while. An instance missing for less than ``grace`` seconds since its waiter started is "not
visible yet", not lost; after that it counts as gone. When the watch's own calls fail
``failures`` times in a row, every waiter gets the last error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from vmpooler.providers.errors import ProviderError, TransientProviderError

__all__ = ["InstanceWatch", "Seen"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Seen:
    """One instance as the last ``DescribeInstances`` showed it (None fields: not shown)."""

    instance_id: str
    state: str
    private_ip: str | None = None
    reason: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


Describe = Callable[[list[str]], Iterable[dict[str, Any]]]
"""``DescribeInstances`` of these instance ids: the instances EC2 shows."""


def seen(instance: dict[str, Any]) -> Seen:
    """A :class:`Seen` from one instance of a ``DescribeInstances`` answer."""
    reason = instance.get("StateReason") or {}
    return Seen(instance_id=str(instance["InstanceId"]),
                state=str((instance.get("State") or {}).get("Name") or "pending"),
                private_ip=instance.get("PrivateIpAddress") or None,
                reason=reason.get("Message") or reason.get("Code"), raw=instance)


class _Waiter:
    def __init__(self, instance_id: str, until: Callable[[Seen | None], bool],
                 started: float) -> None:
        self.instance_id = instance_id
        self.until = until
        self.started = started
        self.result: Seen | None = None
        self.done = False
        self.error: ProviderError | None = None


class InstanceWatch:
    """See the module docstring. Thread-safe; the thread starts with the first wait."""

    def __init__(self, name: str, describe: Describe, *, poll_interval: float = 5.0,
                 grace: float = 60.0, failures: int = 3,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._describe = describe
        self.poll_interval = poll_interval
        self.grace = grace
        self.failures_allowed = failures
        self._clock = clock
        self._cond = threading.Condition()
        self._waiters: list[_Waiter] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self.polls = 0
        """``DescribeInstances`` calls made so far (for tests and benchmarks)."""

    def wait(self, instance_id: str, until: Callable[[Seen | None], bool], timeout: float,
             what: str) -> Seen | None:
        """Block until ``until(seen)`` holds for the instance (``seen`` is None once it is
        missing for longer than the grace), at most ``timeout`` seconds; return that
        :class:`Seen` (or None). Raises TransientProviderError on timeout, naming ``what``,
        and the watch's error when EC2 cannot be reached."""
        waiter = _Waiter(instance_id, until, self._clock())
        with self._cond:
            if self._closed:
                raise TransientProviderError("the provider is closed")
            self._waiters.append(waiter)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"{self.name}-ec2-watch")
                self._thread.start()
            self._cond.notify_all()
            finished = self._cond.wait_for(lambda: waiter.done, timeout=timeout)
            if not finished:
                self._waiters.remove(waiter)
                raise TransientProviderError(f"{what}: not done after {timeout:.0f} s")
        if waiter.error is not None:
            raise waiter.error
        return waiter.result

    def close(self) -> None:
        """Stop the thread; waiters still waiting get an error."""
        with self._cond:
            self._closed = True
            for waiter in self._waiters:
                waiter.error = TransientProviderError("the provider is closed")
                waiter.done = True
            self._waiters.clear()
            self._cond.notify_all()

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or bool(self._waiters))
                if self._closed:
                    return
                ids = sorted({w.instance_id for w in self._waiters})
            try:
                shown = {s.instance_id: s for s in map(seen, self._describe(ids))}
                failures = 0
            except Exception as exc:
                failures += 1
                error = exc if isinstance(exc, ProviderError) else TransientProviderError(
                    f"watching instances: {exc}")
                log.debug("[%s] instance watch failed (%d): %s", self.name, failures, error)
                if failures >= self.failures_allowed:
                    self._fail_all(error)
                    failures = 0
                shown = None
            with self._cond:
                self.polls += 1
                if shown is not None:
                    self._publish(shown)
                if self._waiters and not self._closed:
                    self._cond.wait(self.poll_interval)

    def _publish(self, shown: dict[str, Seen]) -> None:
        now = self._clock()
        for waiter in list(self._waiters):
            current = shown.get(waiter.instance_id)
            if current is None and now - waiter.started < self.grace:
                continue  # not visible yet (eventual consistency)
            try:
                done = waiter.until(current)
            except ProviderError as exc:
                waiter.error, done = exc, True
            if done:
                waiter.result, waiter.done = current, True
                self._waiters.remove(waiter)
        self._cond.notify_all()

    def _fail_all(self, error: ProviderError) -> None:
        with self._cond:
            for waiter in self._waiters:
                waiter.error, waiter.done = error, True
            self._waiters.clear()
            self._cond.notify_all()
