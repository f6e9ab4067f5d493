"""The provider actor runs the standby calls (``SuspendVm``, ``ResumeVm``) as it runs the
others: on a worker, one answer each, failures classified, guarded by the circuit breaker.
No pool asks for them yet; these tests ask as a pool will."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from tests.test_provider_actor import (  # noqa: F401 (make_rig: a fixture)
    BREAKER_THRESHOLD,
    POOL,
    GatedProvider,
    Rig,
    make_rig,
)
from vmpooler.actors.messages import (
    CallProvider,
    ProviderCallFinished,
    ProviderOp,
    ProviderRequest,
    ResumeVm,
    SuspendVm,
)
from vmpooler.actors.runtime.adaptive_timeout import LONG_OPS
from vmpooler.actors.runtime.breaker import BreakerState
from vmpooler.providers.base import Capability
from vmpooler.providers.errors import TransientProviderError

_IDS = itertools.count(1000)


class StandbyProvider(GatedProvider):
    """The gated provider with both standby modes; ``modes`` records each suspend's mode.
    ``vm-gone`` does not exist."""

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        super().__init__(settings)
        self.modes: list[Capability] = []

    @property
    def capabilities(self) -> frozenset[Capability]:
        return frozenset({Capability.SUSPEND, Capability.POWER_OFF})

    def suspend_vm(self, pool: str, vm: str, *, mode: Capability = Capability.SUSPEND) -> bool:
        self._run("suspend_vm", vm)
        self.modes.append(mode)
        return vm != "vm-gone"

    def resume_vm(self, pool: str, vm: str) -> bool:
        self._run("resume_vm", vm)
        return vm != "vm-gone"


def ask(rig: Rig, request: ProviderRequest, vm: str) -> ProviderCallFinished:
    call_id = next(_IDS)
    rig.actor.tell(CallProvider(request=request, pool=POOL, vm=vm, reply_to=rig.reply_to,
                                call_id=call_id))
    msg = rig.reply()
    assert (msg.call_id, msg.op, msg.vm) == (call_id, request.op, vm)
    return msg


def test_suspend_and_resume_reach_the_provider(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(provider_class=StandbyProvider)
    msg = ask(rig, SuspendVm(mode=Capability.POWER_OFF), "vm-1")
    assert (msg.failure, msg.result_of(bool)) == (None, True)
    msg = ask(rig, SuspendVm(), "vm-2")
    assert (msg.failure, msg.result_of(bool)) == (None, True)
    assert rig.provider.modes == [Capability.POWER_OFF, Capability.SUSPEND]
    msg = ask(rig, ResumeVm(), "vm-1")
    assert (msg.failure, msg.result_of(bool)) == (None, True)
    assert rig.provider.started("suspend_vm") == ["vm-1", "vm-2"]
    assert rig.provider.started("resume_vm") == ["vm-1"]
    rig.assert_no_reply()


def test_a_missing_vm_answers_false(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(provider_class=StandbyProvider)
    for request in (SuspendVm(), ResumeVm()):
        msg = ask(rig, request, "vm-gone")
        assert (msg.failure, msg.result) == (None, False)


def test_a_provider_without_standby_refuses_permanently(make_rig: Callable[..., Rig]) -> None:
    """The default of the contract: a permanent failure, which the breaker does not count."""
    rig = make_rig()
    assert rig.provider.capabilities == frozenset()
    for _ in range(BREAKER_THRESHOLD):
        for request in (SuspendVm(), ResumeVm()):
            msg = ask(rig, request, "vm-1")
            assert msg.failure is not None and msg.failure.permanent
            assert "does not support standby VMs" in msg.failure.message
    assert rig.breaker.state is BreakerState.CLOSED


def test_transient_failures_count_against_the_breaker(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(provider_class=StandbyProvider)
    rig.provider.fail("resume_vm", TransientProviderError("vCenter unreachable"))
    for _ in range(BREAKER_THRESHOLD):
        msg = ask(rig, ResumeVm(), "vm-1")
        assert msg.failure is not None and not msg.failure.permanent
    assert rig.breaker.state is BreakerState.OPEN
    msg = ask(rig, SuspendVm(), "vm-2")
    assert msg.failure is not None and msg.failure.circuit_open
    assert rig.provider.count("suspend_vm") == 0


def test_standby_calls_get_the_long_timeouts() -> None:
    assert {ProviderOp.SUSPEND, ProviderOp.RESUME} <= LONG_OPS
