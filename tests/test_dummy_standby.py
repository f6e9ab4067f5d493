"""The dummy provider's standby operations: ``suspend_vm`` / ``resume_vm``, their delays and
failure rates, idempotence, and the capabilities it declares.

Delays go through a recording ``sleep`` and draws through a seeded ``random.Random``: nothing
waits, and every outcome is reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from vmpooler.providers.base import Capability, ProviderContext
from vmpooler.providers.dummy import DummyProvider
from vmpooler.providers.dummy_store import read_inventory
from vmpooler.providers.errors import TransientProviderError

POOLS = {"pool1": {"template": "templates/t1"}}


class RecordingSleep:
    """A ``sleep`` that records the requested durations and returns at once."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def make(settings: Mapping[str, Any] | None = None, *, seed: int = 7,
         sleep: RecordingSleep | None = None) -> DummyProvider:
    context = ProviderContext("dummy", dict(settings or {}), POOLS, {}, {})
    return DummyProvider(context, rng=random.Random(seed), sleep=sleep or RecordingSleep())


def ready_vm(provider: DummyProvider, vm: str = "vm1") -> None:
    """Clone ``vm`` and probe it once, so it is a ready, running VM."""
    provider.create_vm("pool1", vm)
    assert provider.vm_ready("pool1", vm)


def powerstate(provider: DummyProvider, vm: str = "vm1") -> str | None:
    info = provider.get_vm("pool1", vm)
    assert info is not None
    return info.powerstate


def test_the_dummy_declares_both_standby_modes() -> None:
    assert make().capabilities == frozenset({Capability.SUSPEND, Capability.POWER_OFF})


@pytest.mark.parametrize(("mode", "state"), [(Capability.SUSPEND, "Suspended"),
                                             (Capability.POWER_OFF, "PoweredOff")])
def test_standby_then_resume_round_trip(mode: Capability, state: str) -> None:
    provider = make()
    ready_vm(provider)
    assert provider.suspend_vm("pool1", "vm1", mode=mode) is True
    assert powerstate(provider) == state
    assert provider.vm_ready("pool1", "vm1") is False  # a standby VM accepts nothing
    assert provider.resume_vm("pool1", "vm1") is True
    assert powerstate(provider) == "PoweredOn"
    assert provider.vm_ready("pool1", "vm1") is True


def test_suspend_is_the_default_mode() -> None:
    provider = make()
    ready_vm(provider)
    provider.suspend_vm("pool1", "vm1")
    assert powerstate(provider) == "Suspended"


def test_delays_come_from_their_own_knobs() -> None:
    sleep = RecordingSleep()
    provider = make({"suspendvm_max_time": 0.5, "resumevm_max_time": 3}, sleep=sleep)
    ready_vm(provider)
    sleep.calls.clear()
    provider.suspend_vm("pool1", "vm1")
    assert len(sleep.calls) == 1 and 0 <= sleep.calls[0] <= 0.5  # uniform(0, 0.5)
    provider.resume_vm("pool1", "vm1")
    assert len(sleep.calls) == 2 and sleep.calls[1] in (1.0, 2.0, 3.0)  # 1 + randrange(3)


def test_no_knob_means_no_delay() -> None:
    sleep = RecordingSleep()
    provider = make({"createvm_max_time": 5}, sleep=sleep)
    ready_vm(provider)
    sleep.calls.clear()
    provider.suspend_vm("pool1", "vm1")
    provider.resume_vm("pool1", "vm1")
    assert sleep.calls == []


def test_already_there_is_success_at_once() -> None:
    """Idempotence: no delay, no failure roll, no change."""
    sleep = RecordingSleep()
    provider = make({"suspendvm_max_time": 5, "resumevm_max_time": 5,
                     "suspendvm_fail_percent": 100, "resumevm_fail_percent": 100}, sleep=sleep)
    ready_vm(provider)
    assert provider.resume_vm("pool1", "vm1") is True  # running already
    assert sleep.calls == []
    with pytest.raises(TransientProviderError):
        provider.suspend_vm("pool1", "vm1")
    provider = make({"suspendvm_max_time": 5, "resumevm_fail_percent": 100}, sleep=sleep)
    ready_vm(provider)
    provider.suspend_vm("pool1", "vm1")
    sleep.calls.clear()
    assert provider.suspend_vm("pool1", "vm1") is True  # suspended already
    assert provider.suspend_vm("pool1", "vm1", mode=Capability.POWER_OFF) is True  # moves on
    assert powerstate(provider) == "PoweredOff"
    assert provider.suspend_vm("pool1", "vm1") is True  # powered off: stays so
    assert powerstate(provider) == "PoweredOff"
    assert len(sleep.calls) == 1  # only the move from suspended to powered off


def test_a_missing_vm_is_false() -> None:
    provider = make({"suspendvm_fail_percent": 100, "resumevm_fail_percent": 100})
    assert provider.suspend_vm("pool1", "nope") is False
    assert provider.resume_vm("pool1", "nope") is False
    ready_vm(provider)
    assert provider.suspend_vm("pool2", "vm1") is False  # not in that pool


@pytest.mark.parametrize("op", ["suspendvm", "resumevm"])
def test_failure_rates_follow_the_seeded_draw(op: str) -> None:
    """``randint(1, 100) <= percent`` fails, as for the other operations: the draw of seed
    5 fails at exactly its own value and not one below."""
    roll = random.Random(5).randint(1, 100)

    def attempt(percent: int) -> DummyProvider:
        provider = make({f"{op}_fail_percent": percent}, seed=5)
        provider._inventory.add("pool1", {
            "name": "vm1", "hostname": "vm1", "poolname": "pool1",
            "powerstate": "PoweredOn" if op == "suspendvm" else "Suspended",
            "dummy_state": "RUNNING" if op == "suspendvm" else "STANDBY",
            "snapshots": [], "disks": []})
        return provider

    failing = attempt(roll)
    before = powerstate(failing)
    with pytest.raises(TransientProviderError, match=f"Dummy Failure for {op}_fail_percent"):
        if op == "suspendvm":
            failing.suspend_vm("pool1", "vm1")
        else:
            failing.resume_vm("pool1", "vm1")
    assert powerstate(failing) == before  # a failure leaves the VM as it was
    passing = attempt(roll - 1)
    if op == "suspendvm":
        assert passing.suspend_vm("pool1", "vm1") is True
    else:
        assert passing.resume_vm("pool1", "vm1") is True


def test_the_standby_state_is_persisted(tmp_path: Path) -> None:
    path = tmp_path / "dummy.yaml"
    provider = make({"filename": str(path)})
    ready_vm(provider)
    provider.suspend_vm("pool1", "vm1")
    again = make({"filename": str(path)})
    assert powerstate(again) == "Suspended"
    assert again.vm_ready("pool1", "vm1") is False
    assert read_inventory(path)["pool"]["pool1"][0]["powerstate"] == "Suspended"
    assert again.resume_vm("pool1", "vm1") is True
    assert again.vm_ready("pool1", "vm1") is True

