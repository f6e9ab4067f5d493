"""What each vCenter fault does to a pool (docs/vsphere.md, "What each vCenter fault does").

Under load vCenter refuses clones with ``InsufficientResourcesFault`` or ``TaskInProgress``,
and fails them with ``SystemError``: transient, retried with the pool's back-off, counted
against the circuit breaker. ``NoPermission`` is permanent: the pool enters its
configuration-error state (one error line, ``/status``, one trial clone now and then) and
recovers by itself once the privilege is there. A dropped connection (vCenter restarted)
is tests/test_vsphere_restart.py's and tests/test_vsphere_processes.py's.

First as the provider translates them and as the provider actor counts them, then through
``vmpooler run`` on the simulator (``-fault CloneVM_Task:P:Fault``). The simulator's
``NoPermission`` names no privilege, so the provider's message names the one a clone needs.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from pyVmomi import vim, vmodl

from tests import vcsim
from tests.harness import wait_until
from tests.http_client import get
from tests.test_provider_actor import Collector
from tests.vsphere_run import in_sync, log_lines, orphans, running, write_config
from vmpooler.actors.messages import CallProvider, CloneVm, ProviderCallFinished
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.provider.provider_actor import ProviderActor
from vmpooler.actors.runtime.breaker import BreakerState, CircuitBreaker
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.dlq_store import parse_member
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.providers.base import Provider, ProviderContext, VmInfo
from vmpooler.providers.errors import PermissionDeniedError, is_permanent
from vmpooler.providers.vsphere.faults import CLONE_PRIVILEGE, clone_refusal, translate

THRESHOLD = 3

TRANSIENT = {
    "InsufficientResourcesFault": vim.fault.InsufficientResourcesFault(msg="no room"),
    "TaskInProgress": vim.fault.TaskInProgress(msg="busy"),
    "SystemError": vmodl.fault.SystemError(reason="panic"),
    "connection refused": ConnectionRefusedError(111, "Connection refused"),
    "connection dropped": http.client.RemoteDisconnected("closed"),
}
PERMANENT = {
    "NoPermission": vim.fault.NoPermission(privilegeId="VirtualMachine.Provisioning.Clone"),
    "InvalidLogin": vim.fault.InvalidLogin(),
}


def _translated(fault: BaseException) -> Exception:
    return translate(fault, server="vc", username="svc")


# -- as the provider translates them ---------------------------------------------------------

@pytest.mark.parametrize("name", TRANSIENT)
def test_faults_vcenter_raises_under_load_are_transient(name: str) -> None:
    error = _translated(TRANSIENT[name])
    assert not is_permanent(error), (name, error)
    if name[0].isupper():  # a vCenter fault: named in the message the operator reads
        assert name in str(error)


@pytest.mark.parametrize("name", PERMANENT)
def test_refused_privileges_and_logins_are_permanent(name: str) -> None:
    assert is_permanent(_translated(PERMANENT[name]))


def test_a_refused_clone_names_the_privilege_when_vcenter_does_not() -> None:
    named = _translated(PERMANENT["NoPermission"])
    assert isinstance(named, PermissionDeniedError)
    assert named.privilege == CLONE_PRIVILEGE and clone_refusal(named) is named
    unnamed = _translated(vim.fault.NoPermission())
    assert isinstance(unnamed, PermissionDeniedError) and unnamed.privilege is None
    assert "did not name" in str(unnamed)
    refusal = clone_refusal(unnamed)
    assert is_permanent(refusal) and f"needs privilege {CLONE_PRIVILEGE}" in str(refusal)


# -- as the provider actor counts them --------------------------------------------------------

class Faulting(Provider):
    """A provider whose clones raise ``error``; everything else answers at once."""

    def __init__(self, error: Exception) -> None:
        super().__init__(ProviderContext(name="vc", settings={}, pools={"p": {}},
                                         global_settings={}, dns_domains={}))
        self.error = error

    def vms_in_pool(self, pool: str) -> list[str]:
        return []

    def get_vm(self, pool: str, vm: str) -> VmInfo | None:
        return None

    def create_vm(self, pool: str, vm: str, **overrides: Any) -> VmInfo:
        raise self.error

    def get_vm_ip_address(self, pool: str, vm: str) -> str | None:
        return None

    def vm_ready(self, pool: str, vm: str) -> bool:
        return False

    def destroy_vm(self, pool: str, vm: str) -> bool:
        return True


def _clone_failures(error: Exception) -> tuple[CircuitBreaker, list[ProviderCallFinished]]:
    """``THRESHOLD`` clones failing with ``error`` through a ProviderActor: its breaker and
    the answers."""
    clock = FakeClock()
    breaker = CircuitBreaker("vc", clock=clock.monotonic, metrics=RecordingMetrics(),
                             failure_threshold=THRESHOLD, timeout=60.0, half_open_attempts=1)
    inbox: queue.Queue[ProviderCallFinished] = queue.Queue()
    reply_to = Collector.start(inbox)
    actor = ProviderActor.start(
        name="vc", provider=Faulting(error), dns_plugins={}, clock=clock, scheduler=clock,
        metrics=RecordingMetrics(), breaker=breaker, clone_workers=1, call_timeout=30.0,
        resolve_reply_to=lambda _pool: None, resolver=lambda _fqdn: False)
    try:
        answers = []
        for n in itertools.islice(itertools.count(), THRESHOLD):
            actor.tell(CallProvider(request=CloneVm(), pool="p", vm=f"vm{n}",
                                    reply_to=reply_to, call_id=n))
            answers.append(inbox.get(timeout=5))
        actor.ask("ping", timeout=5)
        return breaker, answers
    finally:
        actor.stop(timeout=5)
        reply_to.stop(timeout=5)


@pytest.mark.parametrize("name", TRANSIENT)
def test_transient_faults_count_against_the_breaker(name: str) -> None:
    breaker, answers = _clone_failures(_translated(TRANSIENT[name]))
    assert all(a.failure is not None and not a.failure.permanent for a in answers)
    assert breaker.state is BreakerState.OPEN


@pytest.mark.parametrize("name", PERMANENT)
def test_permanent_faults_do_not_count_against_the_breaker(name: str) -> None:
    breaker, answers = _clone_failures(_translated(PERMANENT[name]))
    assert all(a.failure is not None and a.failure.permanent for a in answers)
    assert breaker.state is BreakerState.CLOSED


# -- through vmpooler run on the simulator -----------------------------------------------------

POOLS = ("alpha", "beta")
SIZE = 3
SOURCE = "DC0_C0_RP0_VM0"  # a VM of the default inventory: no clone needed to make it
BASE = ("-guest-tools", "-guest-auto-ip")


def _pools(*names: str) -> dict[str, dict[str, Any]]:
    return {name: {"template": SOURCE, "create_linked_clone": False} for name in names}


def _dead_letters(client: redis.Redis) -> list[Any]:
    return [parse_member("clone", member)
            for member in client.zrange(schema.dlq("clone"), 0, -1)]


@pytest.fixture
def started(tmp_path: Path, redis_server: EmbeddedRedis,
            ) -> Iterator[Any]:
    """``start(flags, pools, **config)``: the simulator with ``flags`` and ``vmpooler run``
    on it, yielding ``(simulator, api port, log path)``; both stopped afterwards."""
    with contextlib.ExitStack() as stack:
        def start(flags: tuple[str, ...], pools: tuple[str, ...], **config: Any,
                  ) -> tuple[vcsim.Simulator, int, Path]:
            sim = stack.enter_context(vcsim.running(tmp_path / "vcsim", flags))
            path = write_config(tmp_path / "vmpooler.yaml", sim, redis_server.port,
                                pools=_pools(*pools), size=SIZE,
                                config={"task_limit": 6, "circuit_breaker_timeout": 2,
                                        "dlq_enabled": True, **config})
            _process, port = stack.enter_context(running(path, sim))
            return sim, port, tmp_path / "vmpooler.log"

        yield start


@pytest.mark.integration
@pytest.mark.parametrize(("fault", "share"), [
    ("InsufficientResourcesFault", 0.3), ("TaskInProgress", 0.3), ("SystemError", 0.3)])
def test_pools_fill_through_transient_clone_faults(
        started: Any, redis_client: redis.Redis, fault: str, share: float) -> None:
    flags = (*BASE, "-fault", f"CloneVM_Task:{share}:{fault}", "-fault-seed", "7")
    sim, _port, log = started(flags, POOLS)
    si = sim.connect()
    wait_until(lambda: in_sync(redis_client, si, POOLS, SIZE), 120,
               f"both pools full and in sync despite {fault}")
    failed = log_lines(log, "clone failed: VcenterFaultError")
    assert failed, "the simulator refused some clones"
    assert all(f"{fault}" in line for line in failed), failed
    letters = _dead_letters(redis_client)
    assert len(letters) == len(failed)
    assert all(fault in letter.error_message and letter.error_class == "VcenterFaultError"
               for letter in letters)
    assert not orphans(redis_client, si, POOLS)
    assert not log_lines(log, "configuration error"), "a transient fault is no config error"
    print(f"{fault} at {share}: {len(failed)} clones refused on the way to {2 * SIZE} VMs")


def _stamp(line: str) -> float:
    return time.mktime(time.strptime(line[1:20], "%Y-%m-%d %H:%M:%S"))


def _tasks(si: Any) -> int:
    """Clone tasks vCenter knows of (its recent tasks, finished or not)."""
    return sum(1 for task in si.content.taskManager.recentTask
               if task.info.descriptionId == "VirtualMachine.cloneVm")


@pytest.mark.integration
def test_no_permission_stops_the_pool_once_and_it_recovers_when_granted(
        started: Any, redis_client: redis.Redis) -> None:
    interval = 3
    sim, port, log = started((*BASE, "-fault", "CloneVM_Task:1:NoPermission"), ("alpha",),
                             config_error_retry_interval=interval)

    def pool() -> dict[str, Any]:
        code, body = get(f"http://127.0.0.1:{port}/api/v3/status")
        return body["pools"]["alpha"] if code == 200 else {}

    wait_until(lambda: "config_error" in pool(), 60, "/status showing the configuration error")
    entry = pool()["config_error"]
    assert entry["error_class"] == "PermissionDeniedError", entry
    assert CLONE_PRIVILEGE in entry["message"] and entry["since"]

    # Three trials, and no other clone: the first fill's clones, then one per interval.
    wait_until(lambda: len(log_lines(log, "[alpha] configuration error: trial clone")) >= 3,
               10 * interval, "three trial clones")
    text = log.read_text().splitlines()
    trials = [line for line in text if "[alpha] configuration error: trial clone" in line]
    sent = [line for line in text if "[alpha] '" in line and "is being cloned" in line]
    entered = [line for line in text if "[alpha] configuration error: clone of" in line]
    assert len(sent) == SIZE + len(trials), "\n".join(sent)
    assert _stamp(trials[2]) - _stamp(trials[0]) >= 2 * interval - 1
    assert len(entered) == 1, entered  # says why once
    assert "failed permanently: PermissionDeniedError" in entered[0]
    assert CLONE_PRIVILEGE in entered[0]
    assert not [line for line in text if "clone failed" in line]  # each failure at debug
    tasks = _tasks(sim.connect())
    assert tasks <= len(sent), (tasks, len(sent))  # what vCenter saw: no storm either
    print(f"{len(sent)} clones in {_stamp(text[-1]) - _stamp(sent[0]):.0f}s, "
          f"{len(trials)} of them trials; vCenter ran {tasks} clone tasks")

    # The privilege is granted: vCenter comes back without the fault.
    sim.flags = BASE
    sim.restart()
    si = sim.connect()
    wait_until(lambda: in_sync(redis_client, si, ("alpha",), SIZE), 90,
               "the pool recovered and filled")
    wait_until(lambda: "config_error" not in pool(), 10, "/status without the error")
    assert len(log_lines(log, "[alpha] configuration error cleared")) == 1
    assert not orphans(redis_client, si, ("alpha",))
