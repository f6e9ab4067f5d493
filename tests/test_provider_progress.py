"""A provider that says its work is queued (vCenter's task queue) is not a slow one: the
provider actor pauses the call's timeout while the work is queued, counts it from when the
work runs, measures the queue wait (``task.queue_wait``) and leaves it out of the adaptive
timeout's samples. Driven through ``ProviderActor`` with a fake clock; nothing sleeps."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tests.harness import wait_until
from tests.test_provider_actor import (  # noqa: F401 (make_rig is a fixture)
    WAIT,
    GatedProvider,
    Rig,
    make_rig,
)
from vmpooler.actors.messages import ProviderOp
from vmpooler.actors.runtime.adaptive_timeout import CallTimeouts
from vmpooler.providers import progress
from vmpooler.providers.base import VmInfo

CAP = 600.0  # provider_call_timeout: the longest a task may wait in vCenter's queue
CLONE_SECONDS = 20.0  # what every earlier clone took: the clone timeout shrinks to 60 s
QUEUED_FOR = 7.0


class QueueingProvider(GatedProvider):
    """``create_vm`` says its task is queued, waits for the gate ``queue:<vm>``, says it
    runs (after :data:`QUEUED_FOR` s queued) and then waits for the gate ``<vm>``."""

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        super().__init__(settings)
        self.runs = threading.Event()

    def create_vm(self, pool: str, vm: str, **overrides: Any) -> VmInfo:
        progress.queued()
        self._run("queue", f"queue:{vm}")
        progress.running(QUEUED_FOR)
        self.runs.set()
        return super().create_vm(pool, vm, **overrides)


def learned() -> CallTimeouts:
    timeouts = CallTimeouts(cap=CAP)
    for _ in range(20):
        timeouts.record(ProviderOp.CLONE, CLONE_SECONDS)
    assert timeouts.for_op(ProviderOp.CLONE) == 60.0
    return timeouts


def queued_clone(make_rig: Callable[..., Rig]) -> tuple[Rig, CallTimeouts]:
    """A rig whose clone of ``vm-9`` is queued by the provider (held there)."""
    timeouts = learned()
    rig = make_rig(provider_class=QueueingProvider, timeouts=timeouts)
    rig.provider.hold("queue:vm-9")
    rig.provider.hold("vm-9")
    rig.call(ProviderOp.CLONE, "vm-9")
    wait_until(lambda: rig.provider.count("queue") == 1, WAIT, "the clone queued")
    rig.settle()
    return rig, timeouts


def test_a_queued_task_is_not_timed_out_however_long_it_waits(
        make_rig: Callable[..., Rig]) -> None:
    rig, _ = queued_clone(make_rig)
    rig.clock.advance(CAP - 1)  # far beyond the clone's 60 s, still queued
    rig.assert_no_reply()
    rig.clock.advance(2)  # but not for ever: provider_call_timeout in the queue
    reply = rig.reply()
    assert reply.failure is not None and reply.failure.timed_out


def test_a_task_times_out_counted_from_when_it_starts_running(
        make_rig: Callable[..., Rig]) -> None:
    rig, _ = queued_clone(make_rig)
    rig.clock.advance(100)
    rig.provider.release("queue:vm-9")
    assert isinstance(rig.provider, QueueingProvider)
    assert rig.provider.runs.wait(WAIT)
    rig.settle()
    rig.clock.advance(59)
    rig.assert_no_reply()
    rig.clock.advance(2)
    reply = rig.reply()
    assert reply.failure is not None and reply.failure.timed_out
    assert "timed out after 161s" in reply.failure.message


def test_the_queue_wait_is_measured_and_left_out_of_the_timeout_samples(
        make_rig: Callable[..., Rig]) -> None:
    rig, timeouts = queued_clone(make_rig)
    rig.clock.advance(QUEUED_FOR)
    rig.provider.release("queue:vm-9")
    rig.settle()
    rig.clock.advance(CLONE_SECONDS)
    rig.provider.release("vm-9")
    assert rig.reply().failure is None
    waits = [(value, tags) for _kind, name, value, tags in rig.metrics.records
             if name == "task.queue_wait"]
    assert waits == [(QUEUED_FOR, {"provider": "gated", "op": "clone"})]
    assert timeouts.readings()[ProviderOp.CLONE].p95 == CLONE_SECONDS  # not 27 s
