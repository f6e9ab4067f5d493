"""The dummy provider's knobs, persistence and thread safety; the error classification.

Every test injects a seeded ``random.Random`` and a recording ``sleep``, so simulated
delays are observed, never waited for.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from vmpooler.providers.base import MigrationResult, ProviderContext
from vmpooler.providers.dummy import DummyProvider, fake_ip
from vmpooler.providers.dummy_store import DirectoryInventory, read_inventory
from vmpooler.providers.errors import (
    PermanentProviderError,
    ProviderError,
    TransientProviderError,
    VmNotFoundError,
    is_permanent,
)

POOLS = {"pool1": {"template": "templates/t1"}, "pool2": {"template": "templates/t2"}}


class RecordingSleep:
    """A ``sleep`` that records the requested durations and returns at once."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def make(
    settings: Mapping[str, Any] | None = None,
    *,
    seed: int = 7,
    sleep: Any = None,
) -> DummyProvider:
    context = ProviderContext("dummy", dict(settings or {}), POOLS, {}, {})
    return DummyProvider(context, rng=random.Random(seed), sleep=sleep or RecordingSleep())


def read_file(path: Path) -> dict[str, Any]:
    return read_inventory(path)


# -- delays ------------------------------------------------------------------------------


def running_vm(name: str = "vm1", pool: str = "pool1") -> dict[str, Any]:
    """A seed record for ``initial_state`` (seeding draws nothing from the rng)."""
    return {
        "name": name,
        "hostname": name,
        "poolname": pool,
        "template": pool,
        "powerstate": "PoweredOff",
        "dummy_state": "RUNNING",
        "vm_host": "HOST1",
        "snapshots": [],
        "disks": [],
    }


@pytest.mark.parametrize(
    ("knob", "operation"),
    [
        ("createvm_max_time", lambda p: p.create_vm("pool1", "vm2")),
        ("createdisk_max_time", lambda p: p.create_disk("pool1", "vm1", 8)),
        ("createsnapshot_max_time", lambda p: p.create_snapshot("pool1", "vm1", "s")),
        ("revertsnapshot_max_time", lambda p: p.revert_snapshot("pool1", "vm1", "s")),
        ("destroyvm_max_time", lambda p: p.destroy_vm("pool1", "vm1")),
        ("destroyvm_max_shutdown_time", lambda p: p.destroy_vm("pool1", "on")),
    ],
)
def test_max_time_knobs_sleep_like_vmpooler(knob: str, operation: Any) -> None:
    """An integer knob n sleeps 1 + randint(0, n-1) seconds: the operation's first draw."""
    seeded = {"pool": {"pool1": [running_vm(), {**running_vm("on"), "powerstate": "PoweredOn"}]}}
    sleep = RecordingSleep()
    operation(make({knob: 5, "initial_state": seeded}, seed=11, sleep=sleep))
    assert sleep.calls == [1 + random.Random(11).randrange(5)]


def test_delay_absent_or_zero_does_not_sleep() -> None:
    for settings in ({}, {"createvm_max_time": 0}, {"createvm_max_time": None}):
        sleep = RecordingSleep()
        make(settings, sleep=sleep).create_vm("pool1", "vm1")
        assert sleep.calls == []


def test_delay_accepts_floats() -> None:
    sleep = RecordingSleep()
    make({"createvm_max_time": 0.25}, sleep=sleep).create_vm("pool1", "vm1")
    assert len(sleep.calls) == 1
    assert 0 <= sleep.calls[0] <= 0.25
    sleep = RecordingSleep()
    make({"createvm_max_time": 3.0}, sleep=sleep).create_vm("pool1", "vm1")
    assert sleep.calls[0] in (1, 2, 3)


def test_vm_is_listed_while_cloning_and_not_ready() -> None:
    seen: dict[str, Any] = {}
    provider: DummyProvider

    def sleep(_seconds: float) -> None:  # runs in the middle of the clone
        seen["listed"] = provider.vms_in_pool("pool1")
        seen["ready"] = provider.vm_ready("pool1", "vm1")

    provider = make({"createvm_max_time": 30}, sleep=sleep)
    provider.create_vm("pool1", "vm1")
    assert seen == {"listed": ["vm1"], "ready": False}
    assert provider.vm_ready("pool1", "vm1") is True


# -- failures ----------------------------------------------------------------------------


def test_createvm_fail_percent_100_raises_and_removes_vm(tmp_path: Path) -> None:
    path = tmp_path / "dummy.yaml"
    provider = make({"createvm_fail_percent": 100, "filename": str(path)})
    with pytest.raises(TransientProviderError, match="Dummy Failure for createvm_fail_percent"):
        provider.create_vm("pool1", "vm1")
    assert provider.vms_in_pool("pool1") == []
    assert read_file(path) == {"pool": {"pool1": []}}


def test_fail_percent_0_never_fails() -> None:
    provider = make({"createvm_fail_percent": 0, "vmready_fail_percent": 0})
    for i in range(20):
        provider.create_vm("pool1", f"vm{i}")
        assert provider.vm_ready("pool1", f"vm{i}")


def test_fail_percent_rolls_like_vmpooler() -> None:
    """Fails exactly when randint(1, 100) <= percent."""
    roll = random.Random(5).randint(1, 100)
    with pytest.raises(TransientProviderError):
        make({"createvm_fail_percent": roll}, seed=5).create_vm("pool1", "vm1")
    make({"createvm_fail_percent": roll - 1}, seed=5).create_vm("pool1", "vm1")


@pytest.mark.parametrize(
    ("knob", "operation"),
    [
        ("createdisk_fail_percent", lambda p: p.create_disk("pool1", "vm1", 8)),
        ("createsnapshot_fail_percent", lambda p: p.create_snapshot("pool1", "vm1", "s")),
        ("revertsnapshot_fail_percent", lambda p: p.revert_snapshot("pool1", "vm1", "s")),
        ("vmready_fail_percent", lambda p: p.vm_ready("pool1", "vm1")),
        ("destroyvm_fail_percent", lambda p: p.destroy_vm("pool1", "vm1")),
    ],
)
def test_fail_percent_knobs(knob: str, operation: Any) -> None:
    provider = make({knob: 100})
    provider.create_vm("pool1", "vm1")
    with pytest.raises(TransientProviderError, match=f"^Dummy Failure for {knob}$"):
        operation(provider)
    assert provider.vms_in_pool("pool1") == ["vm1"]
    info = provider.get_vm("pool1", "vm1")
    assert info is not None
    assert info.snapshots == ()


def test_failed_destroy_leaves_vm_powered_off() -> None:
    provider = make({"destroyvm_fail_percent": 100})
    provider.create_vm("pool1", "vm1")
    with pytest.raises(TransientProviderError, match="destroyvm_fail_percent"):
        provider.destroy_vm("pool1", "vm1")
    info = provider.get_vm("pool1", "vm1")
    assert info is not None
    assert info.powerstate == "PoweredOff"


# -- destroy, get_vm, readiness ----------------------------------------------------------


def test_destroy_shuts_down_only_powered_on_vms() -> None:
    sleep = RecordingSleep()
    settings = {"destroyvm_max_shutdown_time": 1, "destroyvm_max_time": 1}
    provider = make(settings, sleep=sleep)
    provider.create_vm("pool1", "on")
    assert provider.destroy_vm("pool1", "on") is True
    assert sleep.calls == [1, 1]  # shutdown, then destroy

    sleep.calls.clear()
    provider = make({**settings, "getvm_poweroff_percent": 100}, sleep=sleep)
    provider.create_vm("pool1", "off")
    provider.get_vm("pool1", "off")  # powers it off
    assert provider.destroy_vm("pool1", "off") is True
    assert sleep.calls == [1]  # destroy only
    assert provider.vms_in_pool("pool1") == []


def test_destroy_of_missing_vm_is_true_and_wrong_pool_record_is_false() -> None:
    provider = make()
    assert provider.destroy_vm("pool1", "ghost") is True
    seeded = {"pool": {"pool1": [{"name": "odd", "poolname": "pool2", "powerstate": "Off"}]}}
    provider = make({"initial_state": seeded})
    assert provider.destroy_vm("pool1", "odd") is False
    assert provider.vms_in_pool("pool1") == ["odd"]


def test_getvm_poweroff_percent() -> None:
    provider = make({"getvm_poweroff_percent": 100})
    provider.create_vm("pool1", "vm1")
    info = provider.get_vm("pool1", "vm1")
    assert info is not None
    assert info.powerstate == "PoweredOff"
    assert make({"getvm_poweroff_percent": 0}).create_vm("pool1", "x").powerstate == "PoweredOn"


def test_getvm_rename_percent_100_renames_to_dummy_name() -> None:
    provider = make({"getvm_rename_percent": 100})
    provider.create_vm("pool1", "vm1")
    first = provider.get_vm("pool1", "vm1")
    second = provider.get_vm("pool1", "vm1")
    assert first is not None
    assert second is not None
    assert (first.name, first.hostname) == ("vm1", "DUMMYvm1")
    assert second.hostname == "DUMMYvm1"  # renamed once, not DUMMYDUMMY...


def test_vm_ready_unknown_or_other_pool_is_false() -> None:
    provider = make()
    provider.create_vm("pool1", "vm1")
    assert provider.vm_ready("pool1", "ghost") is False
    assert provider.vm_ready("pool2", "vm1") is False
    assert provider.vm_ready("pool1", "vm1") is True


def test_is_ready_timeout_caps_the_boot_pause_once() -> None:
    sleep = RecordingSleep()
    provider = make({"is_ready_timeout": 5}, sleep=sleep)
    provider.create_vm("pool1", "vm1")
    assert provider.vm_ready("pool1", "vm1") is True
    assert provider.vm_ready("pool1", "vm1") is True
    assert sleep.calls == [2.0]  # only the first successful probe pauses

    sleep = RecordingSleep()
    provider = make({"is_ready_timeout": 0.5}, sleep=sleep)
    provider.create_vm("pool1", "vm1")
    provider.vm_ready("pool1", "vm1")
    assert sleep.calls == [0.5]


def test_vm_ready_never_waits_for_a_cloning_vm() -> None:
    seeded = {"pool": {"pool1": [{"name": "vm1", "poolname": "pool1", "dummy_state": "CLONING"}]}}
    sleep = RecordingSleep()
    provider = make({"initial_state": seeded, "is_ready_timeout": 5}, sleep=sleep)
    assert provider.vm_ready("pool1", "vm1") is False
    assert sleep.calls == []


# -- disks, snapshots, migration ---------------------------------------------------------


def test_disks_and_snapshots_are_recorded(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    provider = make({"filename": str(path)})
    provider.create_vm("pool1", "vm1")
    assert provider.create_disk("pool1", "vm1", 20) is True
    assert provider.create_snapshot("pool1", "vm1", "before") is True
    assert provider.revert_snapshot("pool1", "vm1", "before") is True
    assert provider.revert_snapshot("pool1", "vm1", "unknown") is False
    vm = read_file(path)["pool"]["pool1"][0]
    assert (vm["disks"], vm["snapshots"]) == ([20], ["before"])


@pytest.mark.parametrize(
    "operation",
    [
        lambda p: p.create_disk("pool1", "ghost", 1),
        lambda p: p.create_snapshot("pool1", "ghost", "s"),
        lambda p: p.revert_snapshot("pool1", "ghost", "s"),
        lambda p: p.migrate_vm("pool1", "ghost"),
    ],
)
def test_operations_on_unknown_vm_raise_not_found(operation: Any) -> None:
    with pytest.raises(VmNotFoundError, match="ghost"):
        operation(make())


def test_migrate_without_couldmove_is_a_no_op() -> None:
    sleep = RecordingSleep()
    provider = make({"migratevm_max_time": 5, "migratevm_fail_percent": 100}, sleep=sleep)
    provider.create_vm("pool1", "vm1")
    assert provider.migrate_vm("pool1", "vm1") == MigrationResult(host="HOST1")
    info = provider.get_vm("pool1", "vm1")
    assert info is not None
    assert info.host == "HOST1"
    assert sleep.calls == []


def test_migrate_moves_to_another_host() -> None:
    sleep = RecordingSleep()
    provider = make({"migratevm_couldmove_percent": 100, "migratevm_max_time": 3}, sleep=sleep)
    provider.create_vm("pool1", "vm1")
    result = provider.migrate_vm("pool1", "vm1")
    info = provider.get_vm("pool1", "vm1")
    assert info is not None
    assert info.host is not None
    assert info.host != "HOST1"
    assert (result.host, result.moved_from) == (info.host, "HOST1")
    assert info.host in {f"HOST{n}" for n in range(1, 11)}
    assert len(sleep.calls) == 1
    assert 1 <= sleep.calls[0] <= 3


def test_migrate_not_allowed_to_move_only_reports_the_host() -> None:
    provider = make({"migratevm_couldmove_percent": 100})
    provider.create_vm("pool1", "vm1")
    assert provider.migrate_vm("pool1", "vm1", may_move=False) == MigrationResult(host="HOST1")
    assert provider.get_vm("pool1", "vm1").host == "HOST1"  # type: ignore[union-attr]


def test_migrate_couldmove_zero_stays_and_failure_keeps_host() -> None:
    provider = make({"migratevm_couldmove_percent": 0})
    provider.create_vm("pool1", "vm1")
    provider.migrate_vm("pool1", "vm1")
    assert provider.get_vm("pool1", "vm1").host == "HOST1"  # type: ignore[union-attr]
    provider = make({"migratevm_couldmove_percent": 100, "migratevm_fail_percent": 100})
    provider.create_vm("pool1", "vm1")
    with pytest.raises(TransientProviderError, match="migratevm_fail_percent"):
        provider.migrate_vm("pool1", "vm1")
    assert provider.get_vm("pool1", "vm1").host == "HOST1"  # type: ignore[union-attr]


# -- creation rules, IPs -----------------------------------------------------------------


def test_create_in_unserved_pool_is_permanent() -> None:
    with pytest.raises(PermanentProviderError, match="Pool nope does not exist") as caught:
        make().create_vm("nope", "vm1")
    assert is_permanent(caught.value)


def test_create_duplicate_name_raises() -> None:
    provider = make()
    provider.create_vm("pool1", "vm1")
    with pytest.raises(TransientProviderError, match="already exists"):
        provider.create_vm("pool2", "vm1")
    assert provider.inventory_snapshot() == {"pool1": ["vm1"]}


def test_fake_ip_is_deterministic_and_private() -> None:
    provider = make()
    provider.create_vm("pool1", "vm1")
    ip = provider.get_vm_ip_address("pool1", "vm1")
    assert ip == fake_ip("vm1") == provider.get_vm("pool1", "vm1").ip  # type: ignore[union-attr]
    octets = [int(part) for part in ip.split(".")]
    assert octets[:2] == [192, 168]
    assert 0 <= octets[2] <= 255
    assert 1 <= octets[3] <= 254
    assert fake_ip("vm1") != fake_ip("vm2")


def test_vm_info_fields() -> None:
    info = make().create_vm("pool1", "vm1")
    assert info.hostname == "vm1"
    assert info.template == "pool1"
    assert info.poolname == "pool1"
    assert info.powerstate == "PoweredOn"
    assert info.host == "HOST1"
    assert info.boottime is not None
    assert len(info.boottime) == len("2024-05-01 13:02:11 +0000")


# -- persistence -------------------------------------------------------------------------


def test_persistence_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    first = make({"filename": str(path)})
    first.create_vm("pool1", "vm1")
    first.create_vm("pool2", "vm2")
    first.vm_ready("pool1", "vm1")
    first.create_snapshot("pool1", "vm1", "snap")

    stored = read_file(path)
    vm1 = stored["pool"]["pool1"][0]
    assert list(vm1) == [
        "name", "hostname", "domain", "vm_template", "template", "poolname", "ready",
        "boottime", "powerstate", "vm_host", "dummy_state", "snapshots", "disks",
    ]  # fmt: skip
    assert vm1["domain"] == "dummy.local"
    assert vm1["vm_template"] == "templates/t1"
    assert (vm1["ready"], vm1["dummy_state"], vm1["vm_host"]) == (True, "RUNNING", "HOST1")
    assert isinstance(vm1["boottime"], str)

    second = make({"filename": str(path), "initial_state": {"pool": {"pool1": []}}})
    assert second.inventory_snapshot() == {"pool1": ["vm1"], "pool2": ["vm2"]}
    assert second.get_vm("pool1", "vm1") == first.get_vm("pool1", "vm1")
    assert second.vm_ready("pool1", "vm1") is True
    assert second.revert_snapshot("pool1", "vm1", "snap") is True
    # no temp files: the inventory's directory and the lock file that processes sharing it flock
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inventory.yaml.d", "inventory.yaml.lock"]
    assert sorted(p.name for p in (tmp_path / "inventory.yaml.d" / "pool1").iterdir()) == ["vm1"]


def test_initial_state_seeds_and_is_not_mutated() -> None:
    seeded = {"pool": {"pool1": [{"name": "old", "poolname": "pool1", "dummy_state": "RUNNING"}]}}
    provider = make({"initial_state": seeded})
    assert provider.vms_in_pool("pool1") == ["old"]
    provider.destroy_vm("pool1", "old")
    assert seeded["pool"]["pool1"][0]["name"] == "old"


def test_ruby_written_file_with_timestamp_boottime_loads(tmp_path: Path) -> None:
    path = tmp_path / "ruby.yaml"
    path.write_text(
        "---\npool:\n  pool1:\n  - name: rb1\n    hostname: rb1\n    poolname: pool1\n"
        "    boottime: 2024-05-01 13:02:11.123456789 +00:00\n    powerstate: PoweredOn\n"
        "    dummy_state: RUNNING\n    ready: true\n    snapshots: []\n    disks: []\n"
    )
    provider = make({"filename": str(path)})
    info = provider.get_vm("pool1", "rb1")
    assert info is not None
    assert info.boottime is not None
    assert info.boottime.startswith("2024-05-01")
    assert provider.destroy_vm("pool1", "rb1") is True
    assert read_file(path) == {"pool": {"pool1": []}}


def test_unreadable_file_is_a_permanent_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("pool: [unclosed\n")
    with pytest.raises(PermanentProviderError, match="configuration error") as caught:
        make({"filename": str(path)})
    assert is_permanent(caught.value)


def test_file_that_is_not_a_mapping_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(PermanentProviderError, match="configuration error"):
        make({"filename": str(path)})


def test_concurrent_mutations_lose_no_file_update(tmp_path: Path) -> None:
    """Eight clones overlap (all park in the simulated delay together), then finish at once."""
    path = tmp_path / "inventory.yaml"
    names = [f"vm{i}" for i in range(8)]
    barrier = threading.Barrier(len(names))
    provider = make(
        {"filename": str(path), "createvm_max_time": 5},
        sleep=lambda _seconds: barrier.wait(timeout=10),
    )
    with ThreadPoolExecutor(max_workers=len(names)) as workers:
        list(workers.map(lambda name: provider.create_vm("pool1", name), names))
    stored = read_file(path)["pool"]["pool1"]
    assert sorted(vm["name"] for vm in stored) == names
    assert {vm["dummy_state"] for vm in stored} == {"RUNNING"}

    with ThreadPoolExecutor(max_workers=len(names)) as workers:
        list(workers.map(lambda name: provider.destroy_vm("pool1", name), names[:4]))
    assert sorted(vm["name"] for vm in read_file(path)["pool"]["pool1"]) == names[4:]


# -- settings and error classification ---------------------------------------------------


def test_provider_settings() -> None:
    provider = make({"connection_pool_size": 2, "skip_dns_check_before_creating_vm": True})
    assert provider.name == "dummy"
    assert provider.max_concurrent_calls == 2
    assert provider.skip_dns_check_before_creating_vm is True


class ArgumentError(Exception):
    """Stands in for a Ruby-named error class raised by a plugin."""


class NoMethodError(Exception):
    """Stands in for a Ruby-named error class raised by a plugin."""


class _SubTypeError(TypeError):
    """Not matched: the class-name rule is exact, as in vmpooler."""


@pytest.mark.parametrize(
    ("exc", "permanent"),
    [
        (PermanentProviderError("anything"), True),
        (TransientProviderError("timed out"), False),
        (ProviderError("connection reset"), False),
        (VmNotFoundError("VM x does not exist"), False),
        (ArgumentError("wrong number of arguments"), True),
        (NoMethodError("undefined method"), True),
        (NameError("name 'x' is not defined"), True),
        (TypeError("bad call"), True),
        (AttributeError("no attribute"), True),
        (_SubTypeError("subclass"), False),
        (ValueError("bad value"), False),
        (RuntimeError("Template not found"), True),
        (RuntimeError("template 'centos-7' NOT FOUND"), True),
        (RuntimeError("template_not_found"), True),
        (RuntimeError("Template does not exist"), True),
        (RuntimeError("template-does-not-exist"), True),
        (RuntimeError("invalid template path /dc/vm/x"), True),
        (RuntimeError("Invalid_Path"), True),
        (RuntimeError("invalid-vm-folder-path given"), True),
        (RuntimeError("invalidated cache, paths rebuilt"), False),
        (RuntimeError("Folder not found"), True),
        (RuntimeError("datastore 'ds1' not found"), True),
        (RuntimeError("Resource pool not found"), True),
        (RuntimeError("resource_pool_not_found"), True),
        (RuntimeError("Permission denied"), True),
        (RuntimeError("authentication-failed"), True),
        (RuntimeError("Invalid credentials for user"), True),
        (RuntimeError("Configuration_Error: no template"), True),
        (RuntimeError("Dummy Failure for createvm_fail_percent"), False),
        (RuntimeError("circuit breaker is open"), False),
        (TimeoutError("execution expired"), False),
        (RuntimeError("VM not found"), False),
        (RuntimeError(""), False),
    ],
    ids=repr,
)
def test_is_permanent(exc: BaseException, permanent: bool) -> None:
    assert is_permanent(exc) is permanent


def test_is_permanent_survives_broken_str() -> None:
    class BrokenStrError(Exception):
        def __str__(self) -> str:
            raise RuntimeError("boom")

    assert is_permanent(BrokenStrError()) is False


def test_clone_in_flight_when_the_process_died_has_finished_on_reload(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(
        {"pool": {"pool1": [{"name": "vm1", "poolname": "pool1", "dummy_state": "CLONING"}]}}))
    provider = make({"filename": str(path)})
    assert provider.vm_ready("pool1", "vm1") is True


def test_two_providers_sharing_one_file_lose_no_write(tmp_path: Path) -> None:
    """Two providers over one file (as two managers' processes): every read-modify-write
    holds the file's flock and re-reads the other's writes, so none is lost, each sees the
    other's VMs and a name taken by one cannot be created by the other."""
    path = tmp_path / "inventory.yaml"
    left, right = make({"filename": str(path)}), make({"filename": str(path)})

    def create(provider: DummyProvider, prefix: str) -> None:
        for n in range(25):
            provider.create_vm("pool1", f"{prefix}{n}")

    threads = [threading.Thread(target=create, args=(p, name))
               for p, name in ((left, "l"), (right, "r"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected = {f"{prefix}{n}" for prefix in "lr" for n in range(25)}
    assert {vm["name"] for vm in read_file(path)["pool"]["pool1"]} == expected
    assert set(left.vms_in_pool("pool1")) == set(right.vms_in_pool("pool1")) == expected
    with pytest.raises(TransientProviderError):
        right.create_vm("pool1", "l3")
    assert left.destroy_vm("pool1", "r7")
    assert "r7" not in right.vms_in_pool("pool1")


def test_a_clone_left_by_a_dead_process_sharing_the_file_finishes_on_the_next_read(
    tmp_path: Path,
) -> None:
    """Two processes share one inventory; one dies mid-clone. Like a hypervisor's clone
    task, its clone finishes: the survivor's next read finds it RUNNING (ready), while a
    clone of a live process stays CLONING until that process finishes it."""
    path = tmp_path / "inventory.yaml"
    survivor = make({"filename": str(path)})
    survivor.create_vm("pool1", "mine")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    doc = read_file(path)
    base = {"domain": "dummy.local", "template": "pool1", "poolname": "pool1",
            "ready": False, "dummy_state": "CLONING", "snapshots": [], "disks": []}
    doc["pool"]["pool1"] += [
        {**base, "name": "orphan", "hostname": "orphan",
         "cloned_by": f"{socket.gethostname()}:{dead}"},
        {**base, "name": "busy", "hostname": "busy",
         "cloned_by": f"{socket.gethostname()}:{os.getpid()}"},
    ]
    other = DirectoryInventory(path, {})  # as the other process would have written them
    for record in doc["pool"]["pool1"][1:]:
        assert other.add("pool1", record)

    assert survivor.vm_ready("pool1", "orphan") is True
    assert survivor.vm_ready("pool1", "busy") is False
    stored = {vm["name"]: vm for vm in read_file(path)["pool"]["pool1"]}
    assert "cloned_by" not in stored["orphan"]
    assert stored["busy"]["cloned_by"] == f"{socket.gethostname()}:{os.getpid()}"
    assert "cloned_by" not in stored["mine"], "a finished clone's mark"
