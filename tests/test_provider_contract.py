"""The provider contract, checked against every provider implementation.

Each entry of ``FACTORIES`` builds a provider plus what the suite needs to drive it (a pool
it serves, and how to wait between readiness probes): the dummy, the vSphere provider
against a fresh vCenter simulator (``tests/vcsim.py``) and the aws provider against the
session's moto server, emptied (``tests/moto_ec2.py``), so base class and implementations
cannot drift apart. Each also serves misconfigured pools (``bad-template``, and
``bad-folder``/``bad-datastore`` or, on EC2, ``bad-subnet``) whose clones must fail with the
typed permanent error. Nothing here sleeps: the simulator finishes tasks inside the call and
reports guest tools and an IP at power-on, and moto's instances run at once with their
status checks ``ok``, so no probe has to wait.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import moto_ec2, vcsim
from vmpooler.providers.base import Provider, ProviderContext, VmInfo
from vmpooler.providers.dummy import DummyProvider
from vmpooler.providers.errors import (
    DatastoreNotFoundError,
    FolderNotFoundError,
    NetworkNotFoundError,
    PermanentProviderError,
    ProviderError,
    TemplateNotFoundError,
    is_permanent,
)


@dataclass(frozen=True)
class ProviderUnderTest:
    """A provider and the facts the contract suite needs to exercise it."""

    provider: Provider
    pool: str  # a pool the provider serves
    wait: Callable[[float], None]  # how to pause between readiness probes
    ready_attempts: int = 1  # probes before vm_ready must have become True
    cleanup: Callable[[], None] = lambda: None
    bad_pools: Mapping[str, type[ProviderError]] = field(
        default_factory=lambda: dict(BAD_POOLS))  # its misconfigured pools, and their errors


ProviderFactory = Callable[[Path], ProviderUnderTest]


def _no_wait(_seconds: float) -> None:
    """Nothing to wait for: the dummy's clones finish inside create_vm."""


BAD_POOLS: dict[str, type[ProviderError]] = {
    "bad-template": TemplateNotFoundError,
    "bad-folder": FolderNotFoundError,
    "bad-datastore": DatastoreNotFoundError,
}
AWS_BAD_POOLS: dict[str, type[ProviderError]] = {
    "bad-template": TemplateNotFoundError,  # an AMI EC2 does not have
    "bad-subnet": NetworkNotFoundError,
}


def dummy_factory(tmp_path: Path) -> ProviderUnderTest:
    """A file-backed dummy provider, serving pools ``pool1`` and ``pool2`` (and the bad ones:
    the dummy's ``templates``/``folders``/``datastores`` knobs list what exists)."""
    good = {"template": "templates/pool1", "folder": "f1", "datastore": "ds1"}
    context = ProviderContext(
        name="dummy",
        settings={"filename": str(tmp_path / "dummy.yaml"), "templates": ["templates/pool1"],
                  "folders": ["f1"], "datastores": ["ds1"]},
        pools={"pool1": good, "pool2": good,
               "bad-template": {**good, "template": "templates/gone"},
               "bad-folder": {**good, "folder": "gone"},
               "bad-datastore": {**good, "datastore": "gone"}},
        global_settings={},
        dns_domains={"pool1": "example.com", "pool2": None},
    )
    return ProviderUnderTest(DummyProvider(context, sleep=_no_wait), "pool1", _no_wait)


def vsphere_factory(tmp_path: Path) -> ProviderUnderTest:
    """The vSphere provider on a fresh simulator, probing readiness through VMware Tools;
    folders are not created on demand here, so the missing one is an error."""
    from vmpooler.providers.vsphere import VsphereProvider

    sim = vcsim.start(tmp_path / "vcsim", ("-guest-tools", "-guest-auto-ip"))
    si = sim.connect()
    vcsim.prepare(si, folders=("vmpooler/pool1", "vmpooler/pool2", "vmpooler/bad-template",
                               "vmpooler/bad-datastore"))
    pool = {"template": vcsim.TEMPLATE, "datastore": vcsim.DATASTORE,
            "clone_target": vcsim.CLUSTER}
    pools = {name: {**pool, "folder": f"vmpooler/{name}"}
             for name in ("pool1", "pool2", "bad-template", "bad-folder", "bad-datastore")}
    pools["bad-template"]["template"] = "Templates/gone"
    pools["bad-datastore"]["datastore"] = "gone"
    context = ProviderContext(
        name="vsphere",
        settings={"server": "127.0.0.1", "port": sim.port, "username": sim.username,
                  "password": sim.password, "insecure": True, "datacenter": "DC0",
                  "create_folders": False, "vm_ready_check": "guest_tools"},
        pools=pools, global_settings={}, dns_domains={"pool1": "example.com"},
    )
    return ProviderUnderTest(VsphereProvider(context, sleep=_no_wait), "pool1", _no_wait,
                             cleanup=sim.stop)


def aws_factory(tmp_path: Path) -> ProviderUnderTest:
    """The aws provider on the session's moto server (emptied first), readiness by EC2's
    status checks (nothing connects to the instances)."""
    from vmpooler.providers.aws import AwsProvider

    server = moto_ec2.shared()
    server.reset()
    pool = {"template": moto_ec2.AMI}
    pools = {"pool1": pool, "pool2": pool, "bad-template": {"template": "ami-00000000"},
             "bad-subnet": {**pool, "subnet_id": "subnet-00000000"}}
    provider = AwsProvider(moto_ec2.context(server.url, pools,
                                            dns_domains={"pool1": "example.com"}),
                           sleep=_no_wait)
    return ProviderUnderTest(provider, "pool1", _no_wait, bad_pools=AWS_BAD_POOLS)


FACTORIES = [pytest.param(dummy_factory, id="dummy"),
             pytest.param(vsphere_factory, id="vsphere"),
             pytest.param(aws_factory, id="aws")]


@pytest.fixture(params=FACTORIES)
def put(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProviderUnderTest]:
    factory: ProviderFactory = request.param
    under_test = factory(tmp_path)
    yield under_test
    under_test.provider.close()
    under_test.cleanup()


class TestProviderContract:
    def test_created_vm_is_listed_in_inventory(self, put: ProviderUnderTest) -> None:
        put.provider.create_vm(put.pool, "contract-vm1")
        assert "contract-vm1" in put.provider.vms_in_pool(put.pool)

    def test_create_returns_and_get_vm_finds_vm_info(self, put: ProviderUnderTest) -> None:
        created = put.provider.create_vm(put.pool, "contract-vm2")
        assert isinstance(created, VmInfo)
        assert created.name == "contract-vm2"
        info = put.provider.get_vm(put.pool, "contract-vm2")
        assert isinstance(info, VmInfo)
        assert (info.name, info.poolname) == ("contract-vm2", put.pool)
        assert put.provider.vm_exists(put.pool, "contract-vm2")

    def test_ip_address_is_a_non_empty_string(self, put: ProviderUnderTest) -> None:
        put.provider.create_vm(put.pool, "contract-vm3")
        ip = put.provider.get_vm_ip_address(put.pool, "contract-vm3")
        assert isinstance(ip, str)
        assert ip

    def test_vm_becomes_ready(self, put: ProviderUnderTest) -> None:
        put.provider.create_vm(put.pool, "contract-vm4")
        for _ in range(put.ready_attempts):
            if put.provider.vm_ready(put.pool, "contract-vm4"):
                break
            put.wait(1.0)
        assert put.provider.vm_ready(put.pool, "contract-vm4") is True

    def test_destroy_removes_and_is_idempotent(self, put: ProviderUnderTest) -> None:
        put.provider.create_vm(put.pool, "contract-vm5")
        assert put.provider.destroy_vm(put.pool, "contract-vm5") is True
        assert "contract-vm5" not in put.provider.vms_in_pool(put.pool)
        assert put.provider.get_vm(put.pool, "contract-vm5") is None
        assert put.provider.destroy_vm(put.pool, "contract-vm5") is True

    def test_unknown_vm(self, put: ProviderUnderTest) -> None:
        assert put.provider.get_vm(put.pool, "contract-nope") is None
        assert put.provider.vm_exists(put.pool, "contract-nope") is False
        assert not _ready_or_why(put, "contract-nope")
        assert put.provider.get_vm_ip_address(put.pool, "contract-nope") is None
        for operation in (lambda: put.provider.create_disk(put.pool, "contract-nope", 1),
                          lambda: put.provider.create_snapshot(put.pool, "contract-nope", "s")):
            with pytest.raises(ProviderError):
                operation()

    def test_disk_is_added(self, put: ProviderUnderTest) -> None:
        put.provider.create_vm(put.pool, "contract-disk")
        assert put.provider.create_disk(put.pool, "contract-disk", 2) is True

    def test_destroy_of_a_vm_never_created_is_success(self, put: ProviderUnderTest) -> None:
        assert put.provider.destroy_vm(put.pool, "contract-never") is True

    @pytest.mark.parametrize("pool", sorted(BAD_POOLS.keys() | AWS_BAD_POOLS.keys()))
    def test_misconfigured_pool_fails_with_typed_permanent_error(
        self, put: ProviderUnderTest, pool: str
    ) -> None:
        if pool not in put.bad_pools:
            pytest.skip(f"{pool}: no such setting for this provider")
        with pytest.raises(put.bad_pools[pool]) as caught:
            put.provider.create_vm(pool, f"contract-{pool}")
        assert is_permanent(caught.value)
        assert not put.provider.vm_exists(pool, f"contract-{pool}")

    def test_pool_not_served_is_permanent(self, put: ProviderUnderTest) -> None:
        with pytest.raises(PermanentProviderError):
            put.provider.create_vm("no-such-pool", "contract-x")

    def test_snapshot_create_and_revert(self, put: ProviderUnderTest) -> None:
        put.provider.create_vm(put.pool, "contract-vm6")
        assert put.provider.create_snapshot(put.pool, "contract-vm6", "snap1") is True
        info = put.provider.get_vm(put.pool, "contract-vm6")
        assert info is not None and "snap1" in info.snapshots
        assert put.provider.revert_snapshot(put.pool, "contract-vm6", "snap1") is True
        assert put.provider.revert_snapshot(put.pool, "contract-vm6", "never-taken") is False

    def test_concurrent_creates_all_land(self, put: ProviderUnderTest) -> None:
        names = [f"contract-par{i}" for i in range(8)]
        start = threading.Barrier(len(names))

        def create(name: str) -> VmInfo:
            start.wait(timeout=10)
            return put.provider.create_vm(put.pool, name)

        with ThreadPoolExecutor(max_workers=len(names)) as workers:
            created = list(workers.map(create, names))

        assert [info.name for info in created] == names
        assert set(names) <= set(put.provider.vms_in_pool(put.pool))
        assert all(put.provider.get_vm(put.pool, name) is not None for name in names)

    def test_concurrency_settings_are_sane(self, put: ProviderUnderTest) -> None:
        assert put.provider.max_concurrent_calls >= 1
        assert isinstance(put.provider.skip_dns_check_before_creating_vm, bool)
        put.provider.create_vm(put.pool, "contract-any")
        assert put.provider.tag_vm_user(put.pool, "contract-any", "alice") is True
        assert put.provider.tag_vm_user(put.pool, "contract-any", "alice") is True  # again


def _ready_or_why(put: ProviderUnderTest, vm: str) -> bool:
    """vm_ready's answer; a ProviderError (the documented "not ready, because") is False."""
    try:
        return put.provider.vm_ready(put.pool, vm)
    except ProviderError:
        return False


class _MinimalProvider(Provider):
    """Implements only the required methods, to check the base class's defaults."""

    def vms_in_pool(self, pool: str) -> list[str]:
        return []

    def get_vm(self, pool: str, vm: str) -> VmInfo | None:
        return VmInfo(name=vm, poolname=pool) if vm == "there" else None

    def create_vm(self, pool: str, vm: str) -> VmInfo:
        return VmInfo(name=vm)

    def get_vm_ip_address(self, pool: str, vm: str) -> str | None:
        return None

    def vm_ready(self, pool: str, vm: str) -> bool:
        return False

    def destroy_vm(self, pool: str, vm: str) -> bool:
        return True


def _minimal(settings: dict[str, object] | None = None) -> _MinimalProvider:
    return _MinimalProvider(ProviderContext("mini", settings or {}, {}, {}, {}))


class TestBaseDefaults:
    def test_unsupported_operations_raise_permanent_errors(self) -> None:
        provider = _minimal()
        calls: list[Callable[[], object]] = [
            lambda: provider.create_disk("p", "v", 10),
            lambda: provider.create_snapshot("p", "v", "s"),
            lambda: provider.revert_snapshot("p", "v", "s"),
            lambda: provider.purge_unconfigured_resources(["p"]),
        ]
        for call in calls:
            with pytest.raises(PermanentProviderError, match="does not support") as caught:
                call()
            assert is_permanent(caught.value)

    def test_a_provider_without_standby_declares_nothing_and_refuses_permanently(
            self) -> None:
        provider = _minimal()
        assert provider.capabilities == frozenset()
        for call in (lambda: provider.suspend_vm("pool1", "vm1"),
                     lambda: provider.resume_vm("pool1", "vm1")):
            with pytest.raises(PermanentProviderError,
                               match="does not support standby VMs") as info:
                call()
            assert is_permanent(info.value)

    def test_no_op_defaults(self) -> None:
        provider = _minimal()
        assert provider.migrate_vm("p", "v") is None
        assert provider.create_template_delta_disks("p") is None
        assert provider.tag_vm_user("p", "v", None) is True
        assert provider.close() is None

    def test_vm_exists_follows_get_vm(self) -> None:
        provider = _minimal()
        assert provider.vm_exists("p", "there") is True
        assert provider.vm_exists("p", "gone") is False

    def test_settings_derived_properties(self) -> None:
        assert _minimal().name == "mini"
        assert _minimal().max_concurrent_calls == 4
        assert _minimal({"connection_pool_size": 9}).max_concurrent_calls == 9
        assert _minimal().skip_dns_check_before_creating_vm is False
        flagged = _minimal({"skip_dns_check_before_creating_vm": True})
        assert flagged.skip_dns_check_before_creating_vm is True

    def test_abstract_methods_are_required(self) -> None:
        with pytest.raises(TypeError):
            Provider(ProviderContext("x", {}, {}, {}, {}))  # type: ignore[abstract]

    def test_vm_info_is_frozen(self) -> None:
        info = VmInfo(name="a")
        with pytest.raises(AttributeError):
            info.name = "b"  # type: ignore[misc]
