"""``ProviderActor`` driven directly: one answer per call, per-VM exclusion, timeouts, the
circuit breaker, DNS staleness and the bounded clone pool.

The provider here is :class:`GatedProvider`: every method records its call and then blocks
on a per-VM :class:`threading.Event` the test controls, so a call can be held in flight
for as long as a test needs. Time is a :class:`FakeClock`; nothing sleeps.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pykka
import pytest

from tests.harness import wait_until
from vmpooler.actors.messages import (
    CallProvider,
    CheckPending,
    CloneResult,
    CloneVm,
    DestroyVm,
    ListVms,
    ProviderCallFinished,
    ProviderOp,
)
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.provider.provider_actor import ProviderActor
from vmpooler.actors.runtime.breaker import BreakerState, CircuitBreaker
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.providers.base import Provider, ProviderContext, VmInfo
from vmpooler.providers.dns import DnsPlugin, DynamicDns
from vmpooler.providers.errors import (
    PermanentProviderError,
    ProviderError,
    TaskLostError,
    TransientProviderError,
)

POOL = "a"
CALL_TIMEOUT = 30.0
BREAKER_THRESHOLD = 3
BREAKER_TIMEOUT = 60.0
WAIT = 5.0  # seconds a test waits for something that should happen at once


class GatedProvider(Provider):
    """A provider whose calls block on events the test controls.

    ``hold(vm)`` makes every later call naming ``vm`` wait until ``release(vm)``;
    ``fail(method, exc)`` makes ``method`` raise ``exc`` (after its gate) until cleared.
    ``calls`` counts entries per method, ``running``/``peak`` the calls in progress.
    """

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        super().__init__(ProviderContext(
            name="gated", settings=dict(settings or {}), pools={POOL: {}},
            global_settings={}, dns_domains={POOL: "example.test"},
        ))
        self.inventory: list[str] = ["vm-1", "vm-2"]
        self._lock = threading.Lock()
        self._gates: dict[str | None, threading.Event] = {}
        self._errors: dict[str, BaseException] = {}
        self.calls: Counter[str] = Counter()
        self.entered: list[tuple[str, str | None]] = []
        self.running: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()

    # -- test controls ----------------------------------------------------------------------
    def hold(self, vm: str | None) -> None:
        with self._lock:
            self._gates[vm] = threading.Event()

    def release(self, vm: str | None) -> None:
        with self._lock:
            gate = self._gates.pop(vm, None)
        if gate is not None:
            gate.set()

    def release_all(self) -> None:
        with self._lock:
            gates, self._gates = list(self._gates.values()), {}
        for gate in gates:
            gate.set()

    def fail(self, method: str, exc: BaseException | None) -> None:
        with self._lock:
            if exc is None:
                self._errors.pop(method, None)
            else:
                self._errors[method] = exc

    def started(self, method: str) -> list[str | None]:
        """VMs for which ``method`` was entered, in order."""
        with self._lock:
            return [vm for m, vm in self.entered if m == method]

    def count(self, method: str) -> int:
        with self._lock:
            return self.calls[method]

    def _run(self, method: str, vm: str | None) -> None:
        with self._lock:
            self.calls[method] += 1
            self.entered.append((method, vm))
            self.running[method] += 1
            self.peak[method] = max(self.peak[method], self.running[method])
            gate = self._gates.get(vm)
            error = self._errors.get(method)
        try:
            if gate is not None and not gate.wait(timeout=30):
                raise AssertionError(f"{method}({vm}) was held for 30 s; test forgot it")
        finally:
            with self._lock:
                self.running[method] -= 1
        if error is not None:
            raise error

    # -- the contract -----------------------------------------------------------------------
    def vms_in_pool(self, pool: str) -> list[str]:
        self._run("vms_in_pool", None)
        return list(self.inventory)

    def get_vm(self, pool: str, vm: str) -> VmInfo | None:
        self._run("get_vm", vm)
        return VmInfo(name=vm, hostname=vm)

    def create_vm(self, pool: str, vm: str, **overrides: Any) -> VmInfo:
        self._run("create_vm", vm)
        return VmInfo(name=vm, hostname=vm)

    def get_vm_ip_address(self, pool: str, vm: str) -> str | None:
        self._run("get_vm_ip_address", vm)
        return "192.0.2.10"

    def vm_ready(self, pool: str, vm: str) -> bool:
        self._run("vm_ready", vm)
        return True

    def destroy_vm(self, pool: str, vm: str) -> bool:
        self._run("destroy_vm", vm)
        return True


class Collector(pykka.ThreadingActor):
    """A reply_to that puts every ProviderCallFinished it gets into a queue."""

    def __init__(self, inbox: queue.Queue[ProviderCallFinished]) -> None:
        super().__init__()
        self.inbox = inbox

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, ProviderCallFinished):
            self.inbox.put(message)
        return None


@dataclass
class Rig:
    """A started ProviderActor with its provider, clock, breaker and a reply collector."""

    actor: pykka.ActorRef[Any]
    provider: GatedProvider
    clock: FakeClock
    metrics: RecordingMetrics
    breaker: CircuitBreaker
    replies: queue.Queue[ProviderCallFinished]
    reply_to: pykka.ActorRef[Any]
    reroute: dict[str, pykka.ActorRef[Any]]
    resolved: list[str] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def call(self, op: ProviderOp, vm: str | None, *args: Any,
             reply_to: pykka.ActorRef[Any] | None = None) -> int:
        """Tell the actor one call; returns its call_id."""
        call_id = next(self._ids)
        request = {ProviderOp.LIST_VMS: ListVms, ProviderOp.CHECK_PENDING: CheckPending,
                   ProviderOp.DESTROY: DestroyVm, ProviderOp.CLONE: CloneVm}[op](*args)
        self.actor.tell(CallProvider(request=request, pool=POOL, vm=vm,
                                     reply_to=reply_to or self.reply_to, call_id=call_id))
        return call_id

    def reply(self) -> ProviderCallFinished:
        return self.replies.get(timeout=WAIT)

    def settle(self) -> None:
        """Wait until the actor and the collector have handled everything sent so far."""
        self.actor.ask("ping", timeout=WAIT)
        self.reply_to.ask("ping", timeout=WAIT)

    def assert_no_reply(self) -> None:
        self.settle()
        assert self.replies.empty(), f"unexpected reply {self.replies.queue[0]!r}"

    def in_flight(self) -> int:
        return int(self.actor.proxy().in_flight().get(timeout=WAIT))

    def open_breaker(self) -> None:
        """Fail BREAKER_THRESHOLD listings with 'vCenter unreachable'."""
        self.provider.fail("vms_in_pool", TransientProviderError("vCenter unreachable"))
        for _ in range(BREAKER_THRESHOLD):
            self.call(ProviderOp.LIST_VMS, None)
            self.reply()
        self.provider.fail("vms_in_pool", None)


@pytest.fixture
def make_rig() -> Iterator[Callable[..., Rig]]:
    """Build a Rig; every actor it started is stopped and every held call released after."""
    started: list[Rig] = []

    def build(
        *,
        settings: dict[str, Any] | None = None,
        clone_workers: int = 2,
        resolver: Callable[[str], bool] | None = None,
        dns_plugins: dict[str, DnsPlugin] | None = None,
        provider_class: type[GatedProvider] | None = None,
        **actor_options: Any,
    ) -> Rig:
        clock = FakeClock()
        metrics = RecordingMetrics()
        breaker = CircuitBreaker(
            "gated", clock=clock.monotonic, metrics=metrics, failure_threshold=BREAKER_THRESHOLD,
            timeout=BREAKER_TIMEOUT, half_open_attempts=1,
        )
        provider = (provider_class or GatedProvider)(settings)
        replies: queue.Queue[ProviderCallFinished] = queue.Queue()
        reply_to = Collector.start(replies)
        reroute: dict[str, pykka.ActorRef[Any]] = {}
        resolved: list[str] = []

        def resolve_reply_to(pool: str) -> pykka.ActorRef[Any] | None:
            resolved.append(pool)
            return reroute.get(pool)

        actor = ProviderActor.start(
            name="gated", provider=provider, dns_plugins=dns_plugins or {}, clock=clock,
            scheduler=clock, metrics=metrics, breaker=breaker, clone_workers=clone_workers,
            call_timeout=CALL_TIMEOUT, resolve_reply_to=resolve_reply_to,
            resolver=resolver or (lambda _fqdn: False), **actor_options,
        )
        rig = Rig(actor, provider, clock, metrics, breaker, replies, reply_to, reroute, resolved)
        started.append(rig)
        return rig

    yield build
    for rig in started:
        rig.provider.release_all()
        for ref in (rig.actor, rig.reply_to, *rig.reroute.values()):
            if ref.is_alive():
                ref.stop(timeout=WAIT)


# -- one call, one answer ---------------------------------------------------------------------
def test_result_comes_back_as_one_message(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    call_id = rig.call(ProviderOp.LIST_VMS, None)
    msg = rig.reply()
    assert (msg.op, msg.pool, msg.vm, msg.call_id) == (ProviderOp.LIST_VMS, POOL, None, call_id)
    assert msg.failure is None
    assert msg.result == ("vm-1", "vm-2")
    call_id = rig.call(ProviderOp.CHECK_PENDING, "vm-1")
    msg = rig.reply()
    assert (msg.op, msg.vm, msg.call_id, msg.result, msg.failure) == (
        ProviderOp.CHECK_PENDING, "vm-1", call_id, True, None)
    rig.assert_no_reply()


@pytest.mark.parametrize(("error", "permanent"), [
    (TransientProviderError("host is busy"), False),
    (RuntimeError("socket closed"), False),
    (PermanentProviderError("no support"), True),
    (ProviderError("Template 'centos-7' not found"), True),
    (TypeError("destroy_vm() takes 3 arguments"), True),
    (SystemExit(3), False),
])
def test_exception_becomes_a_classified_failure(
    make_rig: Callable[..., Rig], error: BaseException, permanent: bool
) -> None:
    rig = make_rig()
    rig.provider.fail("destroy_vm", error)
    call_id = rig.call(ProviderOp.DESTROY, "vm-1", "vm-1.example.test")
    msg = rig.reply()
    assert msg.call_id == call_id and msg.op is ProviderOp.DESTROY and msg.vm == "vm-1"
    assert msg.result is None
    assert msg.failure is not None
    assert msg.failure.error_class == type(error).__name__
    assert msg.failure.permanent is permanent
    assert not (msg.failure.busy or msg.failure.timed_out or msg.failure.circuit_open)
    assert rig.actor.is_alive()
    rig.assert_no_reply()


# -- per-VM exclusion and timeouts -------------------------------------------------------------
def test_second_call_for_a_busy_vm_is_refused_at_once(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    rig.provider.hold("vm-1")
    first = rig.call(ProviderOp.CHECK_PENDING, "vm-1")
    wait_until(lambda: rig.provider.count("vm_ready") == 1, WAIT, "the first call to start")
    second = rig.call(ProviderOp.DESTROY, "vm-1", None)
    msg = rig.reply()  # answered while the first call is still held
    assert msg.call_id == second and msg.failure is not None and msg.failure.busy
    assert rig.provider.count("destroy_vm") == 0
    other = rig.call(ProviderOp.CHECK_PENDING, "vm-2")  # another VM is not affected
    assert rig.reply().call_id == other
    rig.provider.release("vm-1")
    msg = rig.reply()
    assert msg.call_id == first and msg.failure is None
    assert rig.provider.count("vm_ready") == 2
    rig.assert_no_reply()


def test_held_call_times_out_once_and_its_late_result_is_dropped(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig()
    rig.provider.hold("vm-1")
    call_id = rig.call(ProviderOp.CHECK_PENDING, "vm-1")
    wait_until(lambda: rig.provider.count("vm_ready") == 1, WAIT, "the call to start")
    rig.clock.advance(CALL_TIMEOUT - 0.5)
    rig.assert_no_reply()
    rig.clock.advance(0.5)
    msg = rig.reply()
    assert msg.call_id == call_id and msg.failure is not None and msg.failure.timed_out
    assert msg.failure.error_class == "TimeoutError"
    # The worker still runs: the VM stays busy until it really returns.
    busy = rig.call(ProviderOp.DESTROY, "vm-1", None)
    msg = rig.reply()
    assert msg.call_id == busy and msg.failure is not None and msg.failure.busy
    assert rig.provider.count("destroy_vm") == 0
    rig.provider.release("vm-1")
    wait_until(lambda: rig.in_flight() == 0, WAIT, "the late result to be handled")
    rig.assert_no_reply()  # exactly one answer: the timeout
    again = rig.call(ProviderOp.DESTROY, "vm-1", None)
    msg = rig.reply()
    assert msg.call_id == again and msg.failure is None
    assert rig.provider.count("destroy_vm") == 1


def test_timeouts_of_guarded_calls_count_against_the_breaker(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig()
    for n in range(BREAKER_THRESHOLD):
        vm = f"vm-{n}"
        rig.provider.hold(vm)
        rig.call(ProviderOp.DESTROY, vm, None)
        wait_until(lambda n=n: rig.provider.count("destroy_vm") == n + 1, WAIT, "a destroy")
        rig.clock.advance(CALL_TIMEOUT)
        msg = rig.reply()
        assert msg.failure is not None and msg.failure.timed_out
    rig.call(ProviderOp.LIST_VMS, None)
    msg = rig.reply()
    assert msg.failure is not None and msg.failure.circuit_open


# -- the circuit breaker -------------------------------------------------------------------------
def test_breaker_opens_after_transient_failures_and_half_opens_after_timeout(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig()
    rig.provider.fail("vms_in_pool", TransientProviderError("vCenter unreachable"))
    for _ in range(BREAKER_THRESHOLD):
        rig.call(ProviderOp.LIST_VMS, None)
        msg = rig.reply()
        assert msg.failure is not None and not msg.failure.circuit_open
    assert rig.metrics.counts("circuit_breaker.opened", provider="gated") == 1
    rig.provider.fail("vms_in_pool", None)

    listed = rig.call(ProviderOp.LIST_VMS, None)
    msg = rig.reply()
    assert msg.call_id == listed and msg.failure is not None and msg.failure.circuit_open
    assert msg.failure.error_class == "CircuitOpenError"
    cloned = rig.call(ProviderOp.CLONE, "vm-9")
    msg = rig.reply()
    assert msg.call_id == cloned and msg.failure is not None and msg.failure.circuit_open
    assert rig.provider.count("vms_in_pool") == BREAKER_THRESHOLD
    assert rig.provider.count("create_vm") == 0
    # Readiness probes are not guarded: they still reach the provider.
    rig.call(ProviderOp.CHECK_PENDING, "vm-1")
    assert rig.reply().failure is None

    rig.clock.advance(BREAKER_TIMEOUT - 1)
    rig.call(ProviderOp.LIST_VMS, None)
    msg = rig.reply()
    assert msg.failure is not None and msg.failure.circuit_open
    rig.clock.advance(1)
    rig.call(ProviderOp.LIST_VMS, None)  # the half-open trial
    msg = rig.reply()
    assert msg.failure is None and msg.result == ("vm-1", "vm-2")
    assert rig.provider.count("vms_in_pool") == BREAKER_THRESHOLD + 1
    assert rig.metrics.counts("circuit_breaker.half_open", provider="gated") == 1
    assert rig.breaker.state is BreakerState.CLOSED


def test_failing_readiness_probes_do_not_open_the_breaker(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    rig.provider.fail("vm_ready", TransientProviderError("connection refused"))
    for n in range(BREAKER_THRESHOLD * 2):
        rig.call(ProviderOp.CHECK_PENDING, f"vm-{n}")
        msg = rig.reply()
        assert msg.failure is not None and not msg.failure.permanent
    assert rig.breaker.state is BreakerState.CLOSED
    rig.call(ProviderOp.LIST_VMS, None)
    assert rig.reply().failure is None
    assert rig.metrics.counts("circuit_breaker.opened") == 0


def test_permanent_errors_do_not_open_the_breaker(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    rig.provider.fail("create_vm", PermanentProviderError("template 'tpl-a' not found"))
    for n in range(BREAKER_THRESHOLD * 2):
        rig.call(ProviderOp.CLONE, f"vm-{n}")
        msg = rig.reply()
        assert msg.failure is not None and msg.failure.permanent
        assert not msg.failure.circuit_open
    assert rig.provider.count("create_vm") == BREAKER_THRESHOLD * 2
    assert rig.breaker.state is BreakerState.CLOSED
    assert rig.metrics.counts("circuit_breaker.opened") == 0


def test_tasks_lost_with_a_restarted_provider_do_not_open_the_breaker(
    make_rig: Callable[..., Rig],
) -> None:
    # The (new) provider answered that it no longer knows the clones' tasks: each clone is
    # a transient failure (retried) but says nothing about the provider's health.
    rig = make_rig()
    rig.provider.fail("create_vm", TaskLostError("clone of vm: vCenter lost task task-7"))
    for n in range(BREAKER_THRESHOLD * 2):
        rig.call(ProviderOp.CLONE, f"vm-{n}")
        msg = rig.reply()
        assert msg.failure is not None and not msg.failure.permanent
        assert msg.failure.error_class == "TaskLostError" and not msg.failure.circuit_open
    assert rig.provider.count("create_vm") == BREAKER_THRESHOLD * 2
    assert rig.breaker.state is BreakerState.CLOSED
    assert rig.metrics.counts("circuit_breaker.opened") == 0


# -- where answers go ---------------------------------------------------------------------------
def test_reply_to_a_dead_caller_is_rerouted(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    rerouted: queue.Queue[ProviderCallFinished] = queue.Queue()
    rig.reroute[POOL] = Collector.start(rerouted)
    dead = Collector.start(queue.Queue())
    dead.stop(timeout=WAIT)
    call_id = rig.call(ProviderOp.CHECK_PENDING, "vm-1", reply_to=dead)
    msg = rerouted.get(timeout=WAIT)
    assert msg.call_id == call_id and msg.result is True
    assert rig.resolved == [POOL]
    # With no live actor to re-route to, the answer is dropped and the actor lives on.
    del rig.reroute[POOL]
    rig.call(ProviderOp.CHECK_PENDING, "vm-2", reply_to=dead)
    wait_until(lambda: rig.resolved == [POOL, POOL], WAIT, "a second re-route attempt")
    assert rig.actor.is_alive()
    rig.call(ProviderOp.CHECK_PENDING, "vm-3")
    assert rig.reply().result is True


# -- cloning ---------------------------------------------------------------------------------------
def _dyn() -> dict[str, DnsPlugin]:
    return {POOL: DynamicDns("dyn", {"domain": "example.test"})}


def test_clone_of_a_name_already_in_dns_fails_without_creating(
    make_rig: Callable[..., Rig],
) -> None:
    asked: list[str] = []

    def resolver(fqdn: str) -> bool:
        asked.append(fqdn)
        return True

    rig = make_rig(resolver=resolver, dns_plugins=_dyn())
    call_id = rig.call(ProviderOp.CLONE, "vm-7")
    msg = rig.reply()
    assert msg.call_id == call_id and msg.failure is not None
    assert msg.failure.error_class == "StaleDnsError"
    assert not msg.failure.permanent
    assert asked == ["vm-7.example.test"]
    assert rig.provider.count("create_vm") == 0
    assert rig.breaker.failure_count == 0  # a taken name says nothing about the provider


def test_clone_skips_the_dns_check_when_configured(make_rig: Callable[..., Rig]) -> None:
    asked: list[str] = []

    def resolver(fqdn: str) -> bool:
        asked.append(fqdn)
        return True

    rig = make_rig(settings={"skip_dns_check_before_creating_vm": True}, resolver=resolver,
                   dns_plugins=_dyn())
    rig.call(ProviderOp.CLONE, "vm-7")
    msg = rig.reply()
    assert msg.failure is None
    assert isinstance(msg.result, CloneResult) and msg.result.ip == "192.0.2.10"
    assert asked == []
    assert rig.provider.started("create_vm") == ["vm-7"]


def test_clone_pool_is_bounded_and_does_not_block_other_calls(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(clone_workers=2)
    vms = [f"vm-{n}" for n in range(5)]
    for vm in vms:
        rig.provider.hold(vm)
        rig.call(ProviderOp.CLONE, vm)
    wait_until(lambda: len(rig.provider.started("create_vm")) == 2, WAIT, "two clones to start")
    rig.settle()  # all five were submitted
    # Listings and checks have pools of their own: they are not stuck behind the clones.
    rig.call(ProviderOp.LIST_VMS, None)
    assert rig.reply().op is ProviderOp.LIST_VMS
    rig.call(ProviderOp.CHECK_PENDING, "other")
    assert rig.reply().op is ProviderOp.CHECK_PENDING
    assert rig.provider.started("create_vm") == vms[:2]
    assert rig.provider.peak["create_vm"] == 2
    # Finishing one clone lets exactly one more start.
    rig.provider.release("vm-0")
    assert rig.reply().vm == "vm-0"
    wait_until(lambda: len(rig.provider.started("create_vm")) == 3, WAIT, "a third clone")
    rig.provider.release_all()
    done = {rig.reply().vm for _ in range(4)}
    assert done == set(vms[1:])
    assert rig.provider.peak["create_vm"] == 2
    assert rig.provider.count("create_vm") == 5
    rig.assert_no_reply()
