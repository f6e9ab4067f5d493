"""The vSphere provider against a real vCenter API (the simulator of ``tests/vcsim.py``).

What the provider did is read back with the test's own pyvmomi session, never through the
provider. Nothing sleeps: the simulator finishes tasks inside the call, and where the
provider would wait (an IP that never comes) its ``sleep`` is a recorder.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyVmomi import vim

from tests import vcsim
from tests.harness import wait_until
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.providers.base import ProviderContext
from vmpooler.providers.errors import (
    AuthenticationError,
    ClusterNotFoundError,
    FolderNotFoundError,
    NetworkNotFoundError,
    PermanentProviderError,
    ProviderError,
    TemplateNotFoundError,
    is_permanent,
)
from vmpooler.providers.vsphere import VsphereProvider
from vmpooler.providers.vsphere.vm_ready_checks import NotReadyError

pytestmark = pytest.mark.integration  # each test runs the vCenter simulator (a process)

POOL = {"template": vcsim.TEMPLATE, "folder": "vmpooler/p1", "datastore": vcsim.DATASTORE,
        "clone_target": vcsim.CLUSTER}


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[vcsim.Simulator]:
    with vcsim.running(tmp_path / "vcsim") as simulator:
        vcsim.prepare(simulator.connect(), folders=("vmpooler/p1",),
                      snapshot="vmpooler-linked-clone")
        yield simulator


def make(sim: vcsim.Simulator, pools: dict[str, dict[str, Any]] | None = None,
         global_settings: dict[str, Any] | None = None, **settings: Any) -> VsphereProvider:
    base = {"server": "127.0.0.1", "port": sim.port, "username": sim.username,
            "password": sim.password, "insecure": True, "datacenter": "DC0",
            "vm_ready_check": "guest_tools", "connection_pool_size": 4}
    pools = pools if pools is not None else {"p1": dict(POOL)}
    context = ProviderContext("vsphere", {**base, **settings}, pools,
                              {"retry_factor": 0, **(global_settings or {})},
                              {name: None for name in pools})
    return VsphereProvider(context, sleep=settings.pop("sleep", Sleeps()))


def at_the_edge(provider: VsphereProvider, method: str,
                hook: Callable[[Any, Callable[[], Any]], Any]) -> None:
    """Every session the provider opens from now on (the watch's too) runs
    ``hook(args, send)`` instead of sending the SOAP ``method``; ``send()`` sends it to the
    simulator and returns its answer. For what the simulator cannot do, at the pyvmomi edge."""
    connect = provider.sessions._connect

    def hooked(settings: Any) -> Any:
        si = connect(settings)
        invoke = si._stub.InvokeMethod

        def observed(mo: Any, info: Any, args: Any, *rest: Any) -> Any:
            if info.wsdlName == method:
                return hook(args, lambda: invoke(mo, info, args, *rest))
            return invoke(mo, info, args, *rest)

        si._stub.InvokeMethod = observed
        return si

    provider.sessions._connect = hooked


def log_the_watch_out(provider: VsphereProvider) -> None:
    """Log the vCenter watch's session out behind its back (as an expired session), its
    wait in progress ended rather than left to run its course."""
    watch = provider.vc.watch
    with watch._view_lock:
        assert watch._session is not None
        watch._session.content.propertyCollector.CancelWaitForUpdates()
        watch._session.close()


def fail_after_clone(provider: VsphereProvider) -> None:
    """Make every CloneVM_Task the provider sends reach vCenter (which makes the VM) and
    then fail with InsufficientResourcesFault, as a power-on refused would (at the pyvmomi
    edge)."""
    def clone_then_fail(_args: Any, send: Callable[[], Any]) -> Any:
        send()
        raise vim.fault.InsufficientResourcesFault(msg="no room to power on")

    at_the_edge(provider, "CloneVM_Task", clone_then_fail)


def clone_specs(provider: VsphereProvider) -> list[Any]:
    """Record the CloneSpec of every CloneVM_Task the provider sends (an observer at the
    pyvmomi edge: the call still goes to the simulator)."""
    sent: list[Any] = []

    def observed(args: Any, send: Callable[[], Any]) -> Any:
        sent.append(args[2])
        return send()

    at_the_edge(provider, "CloneVM_Task", observed)
    return sent


# -- inventory ------------------------------------------------------------------------------

def test_listing_a_watched_pool_costs_no_call(sim: vcsim.Simulator) -> None:
    provider = make(sim)
    try:
        for n in range(3):
            provider.create_vm("p1", f"inv{n}")
        si = sim.connect()
        leftover = vcsim.clone_plain_vm(si, "vmpooler/p1", "leftover")
        provider.sessions.calls.clear()
        # The first listing has the vCenter watch watch the folder: a filter, and its state.
        assert sorted(provider.vms_in_pool("p1")) == ["inv0", "inv1", "inv2", "leftover"]
        calls = provider.sessions.calls  # besides the watch's waits and view changes
        assert (calls["RetrievePropertiesEx"], calls["CreateFilter"]) == (0, 1), calls
        provider.sessions.calls.clear()
        assert sorted(provider.vms_in_pool("p1")) == ["inv0", "inv1", "inv2", "leftover"]
        assert "RetrievePropertiesEx" not in provider.sessions.calls  # the watch's members
        # What happens behind the provider's back shows, without a listing of its own.
        vcsim.clone_plain_vm(si, "vmpooler/p1", "another")
        vcsim.wait_task(leftover.PowerOffVM_Task())
        vcsim.wait_task(leftover.Destroy_Task())
        wait_until(lambda: sorted(provider.vms_in_pool("p1")) == [
            "another", "inv0", "inv1", "inv2"], 10, "the watch to see the changes")
        # Its own clones and destroys show at once.
        provider.create_vm("p1", "inv3")
        assert "inv3" in provider.vms_in_pool("p1")
        provider.destroy_vm("p1", "inv0")
        assert "inv0" not in provider.vms_in_pool("p1")
        assert "RetrievePropertiesEx" not in provider.sessions.calls
    finally:
        provider.close()


def test_a_watched_pools_vms_are_read_without_a_call(sim: vcsim.Simulator) -> None:
    provider = make(sim)
    try:
        provider.create_vm("p1", "seen")
        direct = provider.get_vm("p1", "seen")  # not watched yet: one retrieval
        assert direct is not None and direct.hostname == "seen"
        provider.vms_in_pool("p1")  # the folder watched from here on
        provider.sessions.calls.clear()
        assert provider.get_vm("p1", "seen") == direct
        assert direct.ip is not None
        assert provider.get_vm_ip_address("p1", "seen") == direct.ip
        assert "RetrievePropertiesEx" not in provider.sessions.calls
        # A change in the guest shows as vCenter reports it.
        vm = vcsim.find(sim.connect(), "DC0/vm/vmpooler/p1/seen")
        vcsim.wait_task(vm.ReconfigVM_Task(spec=vim.vm.ConfigSpec(extraConfig=[
            vim.option.OptionValue(key="SET.guest.hostName", value="renamed")])))
        wait_until(lambda: (provider.get_vm("p1", "seen") or direct).hostname == "renamed",
                   10, "the new hostname")
        assert "RetrievePropertiesEx" not in provider.sessions.calls
    finally:
        provider.close()


def test_a_watch_that_lost_its_session_watches_the_folder_afresh(sim: vcsim.Simulator) -> None:
    provider = make(sim)
    watch = provider.vc.watch
    watch.max_wait = 1  # the simulator lets a logged-out session's wait run its course
    try:
        provider.create_vm("p1", "one")
        assert provider.vms_in_pool("p1") == ["one"]
        log_the_watch_out(provider)
        wait_until(lambda: watch.members.names("p1") is None, 15, "the watch to notice")
        provider.sessions.calls.clear()
        assert provider.vms_in_pool("p1") == ["one"]  # watched afresh
        assert provider.sessions.calls["CreateFilter"] == 2  # the task view's and the folder's
        provider.sessions.calls.clear()
        assert provider.vms_in_pool("p1") == ["one"]  # watched again
        assert "RetrievePropertiesEx" not in provider.sessions.calls
    finally:
        provider.close()


def test_missing_folder_lists_nothing(sim: vcsim.Simulator) -> None:
    provider = make(sim, {"p9": {**POOL, "folder": "vmpooler/p9"}})
    assert provider.vms_in_pool("p9") == []


def test_get_vm_reports_what_vcenter_knows(sim: vcsim.Simulator) -> None:
    provider = make(sim)
    provider.create_vm("p1", "info1")
    provider.create_snapshot("p1", "info1", "before")
    info = provider.get_vm("p1", "info1")
    vm = vcsim.find(sim.connect(), "DC0/vm/vmpooler/p1/info1")
    assert info is not None
    assert (info.name, info.poolname, info.template) == ("info1", "p1", vcsim.TEMPLATE)
    assert info.hostname == vm.guest.hostName == "info1"
    assert info.ip == vm.guest.ipAddress
    assert info.powerstate == "poweredOn"
    assert info.host == vm.runtime.host.name
    assert info.snapshots == ("before",)
    assert provider.get_vm_ip_address("p1", "info1") == vm.guest.ipAddress


# -- create ---------------------------------------------------------------------------------

def test_clone_is_marked_placed_and_powered_on(sim: vcsim.Simulator) -> None:
    provider = make(sim, {"p1": {**POOL, "create_linked_clone": False,
                                 "snapshot_mainMem_iowait": 0}})
    provider.create_vm("p1", "mark1")
    si = sim.connect()
    vm = vcsim.find(si, "DC0/vm/vmpooler/p1/mark1")
    extra = {o.key: o.value for o in vm.config.extraConfig}
    assert extra["guestinfo.hostname"] == "mark1"
    assert extra["guestinfo.vmpooler.pool"] == "p1"
    assert extra["guestinfo.vmpooler.created_by"] == "user"
    assert extra["mainMem.iowait"] == "0"
    assert vm.runtime.powerState == "poweredOn"
    assert vm.datastore[0].name == vcsim.DATASTORE
    assert vm.resourcePool == vcsim.find(si, f"DC0/host/{vcsim.CLUSTER}").resourcePool


def test_linked_clone_uses_the_template_snapshot(sim: vcsim.Simulator) -> None:
    provider = make(sim, {"linked": dict(POOL), "full": {**POOL, "create_linked_clone": False}})
    sent = clone_specs(provider)
    provider.create_vm("linked", "lc1")
    provider.create_vm("full", "fc1")
    linked, full = sent
    template = vcsim.find(sim.connect(), f"DC0/vm/{vcsim.TEMPLATE}")
    assert linked.location.diskMoveType == "createNewChildDiskBacking"
    assert linked.snapshot._moId == template.snapshot.rootSnapshotList[0].snapshot._moId
    assert full.location.diskMoveType == "moveAllDiskBackingsAndConsolidate"
    assert full.snapshot is None


def test_linked_clone_without_the_snapshot_falls_back_to_the_gems_way(
    tmp_path: Path,
) -> None:
    with vcsim.running(tmp_path / "vcsim") as sim:
        vcsim.prepare(sim.connect(), folders=("vmpooler/p1",))  # no snapshot
        provider = make(sim)
        sent = clone_specs(provider)
        provider.create_vm("p1", "nosnap")
        assert sent[0].location.diskMoveType == "moveChildMostDiskBacking"
        assert sent[0].snapshot is None
        # create_template_delta_disks prepares the snapshot; later clones share its disks
        provider.create_template_delta_disks("p1")
        provider.create_template_delta_disks("p1")  # idempotent
        template = vcsim.find(sim.connect(), f"DC0/vm/{vcsim.TEMPLATE}")
        assert [s.name for s in template.snapshot.rootSnapshotList] == ["vmpooler-linked-clone"]
        provider.create_vm("p1", "withsnap")
        assert sent[1].location.diskMoveType == "createNewChildDiskBacking"


def test_host_selection_places_clones_on_least_used_hosts_in_turn(
    sim: vcsim.Simulator,
) -> None:
    """The simulator ignores a clone's host (it keeps the template's), so what is checked is
    the host each CloneSpec asks for."""
    si = sim.connect()
    cluster = vcsim.find(si, f"DC0/host/{vcsim.CLUSTER}")
    away = cluster.host[0]
    vcsim.wait_task(away.EnterMaintenanceMode_Task(timeout=0))
    provider = make(sim, global_settings={"manage_host_selection": True})
    sent = clone_specs(provider)
    for n in range(4):
        provider.create_vm("p1", f"placed{n}")
    names = {h._moId: h.name for h in cluster.host}
    chosen = [names[spec.location.host._moId] for spec in sent]
    others = sorted(h.name for h in cluster.host if h.name != away.name)
    assert sorted(chosen[:2]) == others  # each fit host once, then again
    assert chosen[2:] == chosen[:2]
    assert away.name not in chosen


def test_an_overridden_template_is_the_one_prepared(tmp_path: Path) -> None:
    with vcsim.running(tmp_path / "vcsim") as sim:
        si = sim.connect()
        vcsim.prepare(si, folders=("vmpooler/p1",))
        other = vcsim.prepare(si, template="Templates/tmpl-new")
        provider = make(sim)
        provider.create_template_delta_disks("p1", template="Templates/tmpl-new")
        assert [s.name for s in other.snapshot.rootSnapshotList] == ["vmpooler-linked-clone"]
        assert vcsim.find(si, f"DC0/vm/{vcsim.TEMPLATE}").snapshot is None


def test_template_by_bare_name_and_resource_pool_target(sim: vcsim.Simulator) -> None:
    pools = {"p1": {**POOL, "template": "tmpl0", "clone_target": "DC0_C0/Resources"}}
    provider = make(sim, pools)
    provider.create_vm("p1", "byname")
    vm = vcsim.find(sim.connect(), "DC0/vm/vmpooler/p1/byname")
    assert vm.resourcePool.name == "Resources"


def test_missing_folder_is_created_with_its_parents(sim: vcsim.Simulator) -> None:
    provider = make(sim, {"deep": {**POOL, "folder": "vmpooler/new/deep"}})
    provider.create_vm("deep", "made1")
    assert vcsim.vm_names(sim.connect(), "vmpooler/new/deep") == {"made1"}


def test_missing_folder_is_an_error_when_folders_may_not_be_created(
    sim: vcsim.Simulator,
) -> None:
    provider = make(sim, {"deep": {**POOL, "folder": "vmpooler/nope"}}, create_folders=False)
    with pytest.raises(FolderNotFoundError, match="vmpooler/nope"):
        provider.create_vm("deep", "nofolder")


def test_network_is_set_on_the_nic(sim: vcsim.Simulator) -> None:
    pools = {"std": {**POOL, "network": "VM Network"}, "dv": {**POOL, "network": "DC0_DVPG0"},
             "bad": {**POOL, "network": "nowhere"}}
    provider = make(sim, pools)
    provider.create_vm("std", "net1")
    provider.create_vm("dv", "net2")
    si = sim.connect()

    def nic(name: str) -> Any:
        vm = vcsim.find(si, f"DC0/vm/vmpooler/p1/{name}")
        return next(d for d in vm.config.hardware.device
                    if isinstance(d, vim.vm.device.VirtualEthernetCard))

    assert nic("net1").backing.deviceName == "VM Network"
    pg = vcsim.find(si, "DC0/network/DC0_DVPG0")
    assert nic("net2").backing.port.portgroupKey == pg.key
    with pytest.raises(NetworkNotFoundError):
        provider.create_vm("bad", "net3")


def test_missing_clone_target_and_datacenter_are_permanent(sim: vcsim.Simulator) -> None:
    provider = make(sim, {"nocluster": {**POOL, "clone_target": "nowhere"},
                          "nodc": {**POOL, "datacenter": "DC9"}})
    with pytest.raises(ClusterNotFoundError, match="resource pool 'nowhere' not found"):
        provider.create_vm("nocluster", "x1")
    with pytest.raises(ClusterNotFoundError):
        provider.create_vm("nodc", "x2")


def test_a_name_taken_by_another_vm_is_transient_and_that_vm_survives(
    sim: vcsim.Simulator,
) -> None:
    """vCenter refuses a clone whose name is taken in the folder (DuplicateName); the
    simulator does not, so that one fault is injected at the pyvmomi edge."""
    vcsim.clone_plain_vm(sim.connect(), "vmpooler/p1", "taken")
    provider = make(sim)

    def refuse_clone(_args: Any, _send: Callable[[], Any]) -> Any:
        raise vim.fault.DuplicateName(name="taken", msg="The name 'taken' already exists.")

    at_the_edge(provider, "CloneVM_Task", refuse_clone)
    with pytest.raises(ProviderError, match="DuplicateName") as caught:
        provider.create_vm("p1", "taken")
    assert not is_permanent(caught.value)
    assert vcsim.vm_names(sim.connect(), "vmpooler/p1") == {"taken"}  # not cleaned up: not ours


def test_a_failed_clone_leaves_no_vm_behind(sim: vcsim.Simulator) -> None:
    """A clone task that fails after vCenter made the VM (power-on refused, say): the
    provider destroys what is left. The fault is injected at the pyvmomi edge."""
    provider = make(sim)
    fail_after_clone(provider)
    with pytest.raises(ProviderError, match="InsufficientResourcesFault"):
        provider.create_vm("p1", "halfmade")
    assert vcsim.vm_names(sim.connect(), "vmpooler/p1") == set()


# -- readiness ------------------------------------------------------------------------------

def test_guest_tools_probe(tmp_path: Path) -> None:
    with vcsim.running(tmp_path / "a") as sim:  # tools run, IPs are given
        vcsim.prepare(sim.connect(), folders=("vmpooler/p1",))
        provider = make(sim)
        provider.create_vm("p1", "tools1")
        assert provider.vm_ready("p1", "tools1") is True
    with vcsim.running(tmp_path / "b", ()) as sim:  # no tools, no IP
        vcsim.prepare(sim.connect(), folders=("vmpooler/p1",))
        sleeps = Sleeps()
        provider = make(sim, sleep=sleeps, ip_wait_timeout=3)
        provider.create_vm("p1", "tools2")
        with pytest.raises(NotReadyError, match="VMware Tools not running"):
            provider.vm_ready("p1", "tools2")
        assert provider.get_vm_ip_address("p1", "tools2") is None
        assert sleeps.calls == [1.0, 1.0, 1.0]  # it waited (in the recorder) as the gem does


def test_ssh_ip_probe_connects_to_the_reported_address(sim: vcsim.Simulator) -> None:
    listener = socket.create_server(("0.0.0.0", 0))
    port = listener.getsockname()[1]
    accepted: list[str] = []

    def accept() -> None:
        conn, peer = listener.accept()
        accepted.append(peer[0])
        conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    provider = make(sim, vm_ready_check="ssh_ip", vm_ready_port=port)
    provider.create_vm("p1", "sship")
    try:
        assert provider.vm_ready("p1", "sship") is True
        thread.join(10)
    finally:
        listener.close()
    ip = vcsim.find(sim.connect(), "DC0/vm/vmpooler/p1/sship").guest.ipAddress
    connected_to = provider.get_vm_ip_address("p1", "sship")
    assert connected_to == ip


def test_ssh_probe_connects_to_the_fqdn_and_says_why_not(sim: vcsim.Simulator) -> None:
    tried: list[tuple[tuple[str, int], float]] = []

    def refuse(address: tuple[str, int], timeout: float) -> Any:
        tried.append((address, timeout))
        raise ConnectionRefusedError(111, "Connection refused")

    context = ProviderContext(
        "vsphere", {"server": "127.0.0.1", "port": sim.port, "username": "user",
                    "password": "pass", "insecure": True, "datacenter": "DC0"},
        {"p1": dict(POOL)}, {}, {"p1": "vm.example.test"})
    provider = VsphereProvider(context, tcp_connect=refuse)
    with pytest.raises(NotReadyError, match=r"ssh1\.vm\.example\.test:22: .*refused"):
        provider.vm_ready("p1", "ssh1")
    assert tried == [(("ssh1.vm.example.test", 22), 5.0)]
    assert provider.sessions.calls == {}  # no vCenter call for vmpooler's probe


# -- tasks on VMs ---------------------------------------------------------------------------

def test_disk_snapshot_revert_and_destroy_show_in_vcenter(sim: vcsim.Simulator) -> None:
    provider = make(sim)
    provider.create_vm("p1", "task1")
    si = sim.connect()
    vm = vcsim.find(si, "DC0/vm/vmpooler/p1/task1")
    disks = [d for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualDisk)]
    assert provider.create_disk("p1", "task1", 3) is True
    assert provider.create_disk("p1", "task1", 0) is False
    added = [d for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualDisk)]
    assert len(added) == len(disks) + 1
    assert added[-1].capacityInKB == 3 * 1024 * 1024
    assert provider.create_snapshot("p1", "task1", "s1") is True
    assert provider.create_snapshot("p1", "task1", "s2") is True
    with pytest.raises(PermanentProviderError, match="already exists"):
        provider.create_snapshot("p1", "task1", "s1")
    assert provider.revert_snapshot("p1", "task1", "s1") is True
    assert vm.snapshot.currentSnapshot._moId == vm.snapshot.rootSnapshotList[0].snapshot._moId
    assert provider.revert_snapshot("p1", "task1", "never") is False
    provider.sessions.calls.clear()
    assert provider.destroy_vm("p1", "task1") is True
    assert vcsim.vm_names(si, "vmpooler/p1") == set()
    # Power-off and destroy, each task added to the task watch's view and awaited once.
    assert provider.sessions.calls == {"PowerOffVM_Task": 1, "Destroy_Task": 1,
                                       "ModifyListView": 2, "WaitForUpdatesEx": 2}
    assert provider.destroy_vm("p1", "task1") is True


def test_destroy_of_a_powered_off_vm(sim: vcsim.Simulator) -> None:
    provider = make(sim)
    provider.create_vm("p1", "off1")
    vcsim.wait_task(vcsim.find(sim.connect(), "DC0/vm/vmpooler/p1/off1").PowerOffVM_Task())
    assert provider.destroy_vm("p1", "off1") is True
    assert vcsim.vm_names(sim.connect(), "vmpooler/p1") == set()


def test_tag_vm_user_sets_a_custom_attribute(sim: vcsim.Simulator) -> None:
    provider = make(sim)
    provider.create_vm("p1", "tag1")
    assert provider.tag_vm_user("p1", "tag1", "alice") is True
    si = sim.connect()
    field = next(f for f in si.content.customFieldsManager.field if f.name == "vmpooler_user")
    vm = vcsim.find(si, "DC0/vm/vmpooler/p1/tag1")
    assert {v.key: v.value for v in vm.customValue}[field.key] == "alice"
    fresh = make(sim)  # a second manager finds the attribute instead of failing on it
    fresh.create_vm("p1", "tag2")
    assert fresh.tag_vm_user("p1", "tag2", None) is True


def test_migration_leaves_a_vm_on_a_least_used_host(sim: vcsim.Simulator) -> None:
    provider = make(sim)
    provider.create_vm("p1", "mig1")
    vm = vcsim.find(sim.connect(), "DC0/vm/vmpooler/p1/mig1")
    result = provider.migrate_vm("p1", "mig1")
    assert result is not None
    assert (result.host, result.moved_from) == (vm.runtime.host.name, None)


def test_migration_moves_a_vm_off_a_host_in_maintenance(sim: vcsim.Simulator) -> None:
    provider = make(sim)
    provider.create_vm("p1", "mig2")
    si = sim.connect()
    vm = vcsim.find(si, "DC0/vm/vmpooler/p1/mig2")
    source = vm.runtime.host
    vcsim.wait_task(source.EnterMaintenanceMode_Task(timeout=0))
    assert provider.migrate_vm("p1", "mig2", may_move=False).moved_from is None  # type: ignore[union-attr]
    assert vm.runtime.host.name == source.name
    result = provider.migrate_vm("p1", "mig2")
    assert result is not None
    assert result.moved_from == source.name
    assert result.host == vm.runtime.host.name != source.name


# -- sessions -------------------------------------------------------------------------------

def test_bad_credentials_are_permanent_and_never_show_the_password(
    sim: vcsim.Simulator, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = make(sim, password="s3cr3t-Pw")
    with pytest.raises(AuthenticationError) as caught:
        provider.vms_in_pool("p1")
    assert is_permanent(caught.value)
    assert "s3cr3t-Pw" not in str(caught.value)
    assert "s3cr3t-Pw" not in caplog.text
    assert "s3cr3t-Pw" not in repr(provider.config)


def test_expired_session_logs_in_again(sim: vcsim.Simulator) -> None:
    provider = make(sim)
    provider.create_vm("p1", "kept")
    session = provider.sessions._idle[0]
    session.content.sessionManager.Logout()  # vCenter forgets the session
    found = provider.get_vm("p1", "kept")
    assert found is not None and found.name == "kept"
    assert provider.sessions.logins == 2


def test_a_replaced_vcenter_gets_a_fresh_session_and_a_fresh_memory(
    sim: vcsim.Simulator,
) -> None:
    provider = make(sim)
    provider.create_vm("p1", "before")
    old_folder = vcsim.find(sim.connect(), "DC0/vm/vmpooler/p1")._moId
    sim.restart()  # same port, empty inventory: every remembered id is meaningless
    si = sim.connect()
    # Worse than meaningless: make the old folder's id name another folder, holding a VM.
    for n in range(60):
        decoy = vcsim.make_folder(si, f"decoys/d{n}")
        if decoy._moId == old_folder:
            break
    assert decoy._moId == old_folder, "the simulator hands out ids in another way now"
    decoy_vm = vcsim.prepare(si, template=f"decoys/d{n}/decoy-vm")
    assert decoy_vm.parent._moId == old_folder
    assert provider.vms_in_pool("p1") == []  # its folder is gone: nothing listed
    with pytest.raises(TemplateNotFoundError):
        provider.create_vm("p1", "early")  # the template is gone too
    vcsim.prepare(si, folders=("vmpooler/p1",))
    assert provider.vms_in_pool("p1") == []
    provider.create_vm("p1", "after")
    assert vcsim.vm_names(si, "vmpooler/p1") == {"after"}
    assert provider.vms_in_pool("p1") == ["after"]


def test_stopped_vcenter_is_a_transient_connection_error(sim: vcsim.Simulator) -> None:
    provider = make(sim)
    provider.vms_in_pool("p1")
    sim.stop()
    with pytest.raises(ProviderError) as caught:
        provider.vms_in_pool("p1")
    assert not is_permanent(caught.value)
    assert "unreachable" in str(caught.value)
    assert provider.connection_pool_health().in_use == 0


def test_sessions_are_bounded_and_shared(sim: vcsim.Simulator) -> None:
    provider = make(sim, connection_pool_size=2)
    names = [f"par{n}" for n in range(6)]
    threads = [threading.Thread(target=provider.create_vm, args=("p1", n)) for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert vcsim.vm_names(sim.connect(), "vmpooler/p1") == set(names)
    assert provider.sessions.logins <= 2
    health = provider.connection_pool_health()
    assert (health.size, health.in_use, health.waiting) == (2, 0, 0)


# -- purge ----------------------------------------------------------------------------------

def test_purge_removes_unconfigured_folders_only(sim: vcsim.Simulator) -> None:
    si = sim.connect()
    vcsim.make_folder(si, "vmpooler/keep-me")
    vcsim.clone_plain_vm(si, "vmpooler/old-pool", "stale1")
    vcsim.clone_plain_vm(si, "vmpooler/old-pool", "stale2")
    vcsim.make_folder(si, "vmpooler/nested/inner")
    vcsim.prepare(si, template="vmpooler/gold/tmpl1")
    provider = make(sim)
    metrics = RecordingMetrics()
    provider.context = dataclasses.replace(provider.context, metrics=metrics)
    provider.create_vm("p1", "mine")
    provider.purge_unconfigured_resources(["keep-me"])
    # each VM of the removed folder timed as vmpooler's destroy.<folder name>
    assert len(metrics.timings("destroy", pool="old-pool")) == 2
    children = {c.name for c in vcsim.find(si, "DC0/vm/vmpooler").childEntity}
    assert children == {"p1", "keep-me", "nested", "gold"}
    assert vcsim.find(si, "DC0/vm/vmpooler/old-pool") is None
    assert vcsim.vm_names(si, "vmpooler/p1") == {"mine"}
    assert vcsim.find(si, f"DC0/vm/{vcsim.TEMPLATE}") is not None


def test_a_call_waits_for_a_session_at_most_connection_pool_timeout(
    sim: vcsim.Simulator,
) -> None:
    provider = make(sim, connection_pool_size=1, connection_pool_timeout=0.01)
    with provider.sessions.session():  # the only session, lent out
        with pytest.raises(ProviderError, match="no vCenter session free within") as caught:
            provider.vms_in_pool("p1")
        assert not is_permanent(caught.value)
        assert provider.connection_pool_health().in_use == 1
    assert provider.vms_in_pool("p1") == []


def test_a_pool_without_datacenter_clones_into_the_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """With two datacenters (``-dc 2``: DC0, DC1) and none configured, the pool uses DC0, as
    the gem's ``find_datacenter(nil)``; the provider logs the choice once, naming both."""
    with vcsim.running(tmp_path / "vcsim", ("-dc", "2", "-guest-tools", "-guest-auto-ip")
                       ) as sim2:
        vcsim.prepare(sim2.connect(), folders=("vmpooler/p1",),
                      snapshot="vmpooler-linked-clone")
        caplog.set_level(logging.INFO, logger="vmpooler.providers.vsphere.provider")
        provider = make(sim2, datacenter=None)
        assert provider.config.pools["p1"].datacenter is None
        provider.create_vm("p1", "firstdc1")
        provider.create_vm("p1", "firstdc2")
        assert vcsim.vm_names(sim2.connect(), "vmpooler/p1") == {"firstdc1", "firstdc2"}
        assert sorted(provider.vms_in_pool("p1")) == ["firstdc1", "firstdc2"]
        messages = [r.getMessage() for r in caplog.records]
        chosen = [m for m in messages if "without a datacenter" in m]
        assert len(chosen) == 1
        assert "'DC0', the first of the 2 datacenters vCenter lists (DC0, DC1)" in chosen[0]
        provider.close()


# -- vCenter's events for a failed VM (log_vm_events_on_failure) --------------------------------

def _event_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "vCenter event" in r.getMessage()
            or "vCenter recorded no event" in r.getMessage()]


@pytest.mark.parametrize("enabled", [True, False])
def test_a_clone_refused_by_vcenter_logs_its_events_when_asked(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, enabled: bool) -> None:
    """The simulator refuses every clone (``-fault CloneVM_Task:1:InsufficientResourcesFault``)
    and records ``VmBeingClonedEvent`` on the source (it records no ``VmCloneFailedEvent``,
    which a real vCenter adds with the reason): with the setting, that event is logged at
    warning level under the pool's name; without it, nothing more than before."""
    flags = ("-guest-tools", "-fault", "CloneVM_Task:1:InsufficientResourcesFault")
    with vcsim.running(tmp_path / "vcsim", flags) as simulator:
        vcsim.make_folder(simulator.connect(), "vmpooler/p1")
        pools = {"p1": {**POOL, "template": "DC0_C0_RP0_VM0"}}
        provider = make(simulator, pools, log_vm_events_on_failure=enabled, max_vm_events=5)
        caplog.set_level(logging.DEBUG, logger="vmpooler.providers.vsphere")
        with pytest.raises(ProviderError, match="InsufficientResourcesFault"):
            provider.create_vm("p1", "refused")
        records = _event_lines(caplog)
        if not enabled:
            assert records == []
            return
        assert records and all(r.levelno == logging.WARNING for r in records)
        lines = [r.getMessage() for r in records]
        assert all(line.startswith("[!] [p1] 'refused' clone failed") for line in lines)
        assert any("VmBeingClonedEvent: Cloning DC0_C0_RP0_VM0" in line and "to refused" in line
                   for line in lines), lines


def test_a_half_made_clone_logs_its_own_events_bounded(
        sim: vcsim.Simulator, caplog: pytest.LogCaptureFixture) -> None:
    """A clone task that fails after vCenter made the VM: the VM's own events are logged
    (before it is destroyed), newest ``max_vm_events`` only, oldest first."""
    provider = make(sim, log_vm_events_on_failure=True, max_vm_events=3)
    fail_after_clone(provider)
    caplog.set_level(logging.WARNING, logger="vmpooler.providers.vsphere")
    with pytest.raises(ProviderError):
        provider.create_vm("p1", "halfmade")
    lines = [r.getMessage() for r in _event_lines(caplog)]
    assert len(lines) == 3, lines
    stamps = [line.split("vCenter event: ", 1)[1].split(" ", 1)[0] for line in lines]
    assert stamps == sorted(stamps)
    assert vcsim.vm_names(sim.connect(), "vmpooler/p1") == set()


def test_a_pending_vm_that_fails_logs_its_events(
        sim: vcsim.Simulator, caplog: pytest.LogCaptureFixture) -> None:
    """``log_failure_events`` (the pool's pending timeout): the VM's events, e.g. its
    power-on; a VM that is gone logs one line saying vCenter recorded nothing."""
    provider = make(sim, log_vm_events_on_failure=True)
    provider.create_vm("p1", "slow")
    caplog.set_level(logging.WARNING, logger="vmpooler.providers.vsphere")
    provider.log_failure_events("p1", "slow")
    lines = [r.getMessage() for r in _event_lines(caplog)]
    assert any("VmPoweredOnEvent" in line for line in lines), lines
    assert all(line.startswith("[!] [p1] 'slow' failed while pending") for line in lines)
    caplog.clear()
    provider.log_failure_events("p1", "never-made")
    assert [r.getMessage() for r in _event_lines(caplog)] == [
        "[!] [p1] 'never-made' failed while pending; vCenter recorded no event for it"]


def test_unreadable_events_are_one_debug_line_and_no_error(
        sim: vcsim.Simulator, caplog: pytest.LogCaptureFixture) -> None:
    provider = make(sim, log_vm_events_on_failure=True)

    def refuse(_args: Any, _send: Callable[[], Any]) -> Any:
        raise vim.fault.NoPermission(msg="no", privilegeId="System.View")

    at_the_edge(provider, "QueryEvents", refuse)
    provider.create_vm("p1", "vm1")
    caplog.set_level(logging.DEBUG, logger="vmpooler.providers.vsphere")
    provider.log_failure_events("p1", "vm1")
    mine = [r for r in caplog.records if "events" in r.getMessage()]
    assert [r.levelno for r in mine] == [logging.DEBUG]
    assert "could not read vCenter's events for 'vm1'" in mine[0].getMessage()


def test_events_are_off_by_default_and_bounded(sim: vcsim.Simulator) -> None:
    assert make(sim).config.log_vm_events is False
    assert make(sim).config.max_vm_events == 20
