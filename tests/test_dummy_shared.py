"""The dummy provider's shared inventory (``filename``): several processes, no lost or
duplicated VM, the migration of a one-YAML file, and a change touching one VM's file only."""

from __future__ import annotations

import multiprocessing
import os
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from vmpooler.providers.base import ProviderContext
from vmpooler.providers.dummy import DummyProvider
from vmpooler.providers.dummy_store import read_inventory
from vmpooler.providers.errors import PermanentProviderError, TransientProviderError

POOLS = {"pool1": {"name": "pool1", "template": "templates/t1"},
         "pool2": {"name": "pool2", "template": "templates/t2"}}
WORKERS, OWN, SHARED, APPENDS = 3, 12, 8, 15


def make(settings: Mapping[str, Any]) -> DummyProvider:
    context = ProviderContext("dummy", dict(settings), POOLS, {}, {})
    return DummyProvider(context, rng=random.Random(1), sleep=lambda _s: None)


def _worker(filename: str, index: int, barrier: Any, won: Any) -> None:
    """One process: waits for the others, then creates its own VMs and destroys every other
    one, races the others for the shared names, and appends to one common VM's snapshots."""
    provider = make({"filename": filename})
    barrier.wait(timeout=60)
    for n in range(max(OWN, SHARED, APPENDS)):
        if n < OWN:
            provider.create_vm("pool1", f"w{index}-{n}")
            if n % 2:
                provider.destroy_vm("pool1", f"w{index}-{n - 1}")
        if n < SHARED:
            try:
                provider.create_vm("pool2", f"shared{n}")
                won.put((index, f"shared{n}"))
            except TransientProviderError:
                pass
        if n < APPENDS:
            provider.create_snapshot("pool1", "common", f"w{index}-{n}")


@pytest.mark.integration
def test_processes_sharing_the_inventory_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    """Three processes change the inventory at once: each keeps exactly its surviving VMs,
    each shared name is created by exactly one of them, and every append to one VM's record
    (a read-modify-write) is kept."""
    filename = str(tmp_path / "inventory.yaml")
    make({"filename": filename}).create_vm("pool1", "common")
    spawn = multiprocessing.get_context("spawn")
    barrier, won = spawn.Barrier(WORKERS), spawn.Queue()
    workers = [spawn.Process(target=_worker, args=(filename, i, barrier, won))
               for i in range(WORKERS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=90)
    assert [w.exitcode for w in workers] == [0] * WORKERS

    winners = [won.get(timeout=5) for _ in range(SHARED)]
    assert won.empty()
    assert sorted(name for _, name in winners) == sorted(f"shared{n}" for n in range(SHARED))
    document = read_inventory(filename)["pool"]
    own = {f"w{i}-{n}" for i in range(WORKERS) for n in range(1, OWN, 2)}
    assert sorted(vm["name"] for vm in document["pool1"]) == sorted(own | {"common"})
    assert sorted(vm["name"] for vm in document["pool2"]) == sorted(
        f"shared{n}" for n in range(SHARED))
    common = next(vm for vm in document["pool1"] if vm["name"] == "common")
    assert sorted(common["snapshots"]) == sorted(
        f"w{i}-{n}" for i in range(WORKERS) for n in range(APPENDS))
    assert all(vm["dummy_state"] == "RUNNING" and "cloned_by" not in vm
               for vms in document.values() for vm in vms)
    fresh = make({"filename": filename})
    assert fresh.vms_in_pool("pool1") == sorted(own | {"common"})


def test_a_one_yaml_file_is_migrated_at_start(tmp_path: Path) -> None:
    """A file in vmpooler's format at ``filename`` is read into the inventory at start (a
    clone in flight there has finished), renamed ``.migrated``, and not read again; one
    dropped there later is merged, its records winning, a VM never in two pools."""
    path = tmp_path / "dummy.yaml"
    path.write_text(
        "---\npool:\n  pool1:\n  - name: rb1\n    hostname: rb1\n    poolname: pool1\n"
        "    boottime: 2024-05-01 13:02:11.123456789 +00:00\n    powerstate: PoweredOn\n"
        "    dummy_state: RUNNING\n    ready: true\n    snapshots: [s1]\n    disks: []\n"
        "  - name: cl1\n    poolname: pool1\n    dummy_state: CLONING\n"
        "    snapshots: []\n    disks: []\n  pool2: []\n")
    provider = make({"filename": str(path)})
    assert not path.exists()
    assert (tmp_path / "dummy.yaml.migrated").is_file()
    assert provider.inventory_snapshot() == {"pool1": ["cl1", "rb1"], "pool2": []}
    assert provider.vm_ready("pool1", "cl1") is True  # finished while nobody watched
    assert provider.revert_snapshot("pool1", "rb1", "s1") is True
    info = provider.get_vm("pool1", "rb1")
    assert info is not None and info.boottime is not None
    assert info.boottime.startswith("2024-05-01")
    provider.destroy_vm("pool1", "rb1")

    again = make({"filename": str(path)})  # nothing to migrate: the destroyed VM stays gone
    assert again.inventory_snapshot() == {"pool1": ["cl1"], "pool2": []}

    path.write_text(yaml.safe_dump({"pool": {"pool2": [
        {"name": "cl1", "poolname": "pool2", "dummy_state": "RUNNING", "snapshots": [],
         "disks": []}]}}))
    merged = make({"filename": str(path)})
    assert merged.inventory_snapshot() == {"pool1": [], "pool2": ["cl1"]}
    assert read_inventory(path)["pool"]["pool2"][0]["poolname"] == "pool2"


def test_a_broken_file_to_migrate_is_a_configuration_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "dummy.yaml"
    path.write_text("pool:\n  pool1: {name: not-a-list}\n")
    named = re.escape(str(path))
    with pytest.raises(PermanentProviderError, match=f"configuration error.*{named}"):
        make({"filename": str(path)})
    assert path.is_file()  # left as it was


def test_a_change_rewrites_that_vms_file_only(tmp_path: Path) -> None:
    """The cost of a call does not grow with the inventory: a change of one VM leaves every
    other VM's file as it was."""
    path = tmp_path / "inventory.yaml"
    provider = make({"filename": str(path)})
    for n in range(20):
        provider.create_vm("pool1", f"vm{n}")
    folder = tmp_path / "inventory.yaml.d" / "pool1"
    before = {p.name: p.stat().st_ino for p in folder.iterdir()}
    assert provider.vm_ready("pool1", "vm7") is True
    after = {p.name: p.stat().st_ino for p in folder.iterdir()}
    assert sorted(after) == sorted(before)
    assert {name for name in after if after[name] != before[name]} == {"vm7"}


def test_vm_names_that_are_not_file_names_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    provider = make({"filename": str(path)})
    for name in ("a/b", ".hidden", "..", "x%2Fy"):
        provider.create_vm("pool1", name)
    again = make({"filename": str(path)})
    assert again.vms_in_pool("pool1") == sorted(["a/b", ".hidden", "..", "x%2Fy"])
    assert again.get_vm("pool1", "..") is not None
    assert len(os.listdir(tmp_path / "inventory.yaml.d" / "pool1")) == 4


def test_an_inventory_that_cannot_be_made_or_read_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    with pytest.raises(PermanentProviderError, match=r"configuration error.*plain"):
        make({"filename": str(tmp_path / "plain" / "inventory.yaml")})
    provider = make({"filename": str(tmp_path / "inventory.yaml")})
    provider.create_vm("pool1", "vm1")
    (tmp_path / "inventory.yaml.d" / "pool1" / "vm1").write_text("{broken")
    with pytest.raises(PermanentProviderError, match="vm1 is not JSON"):
        provider.get_vm("pool1", "vm1")
