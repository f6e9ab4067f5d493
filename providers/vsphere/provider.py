"""``VsphereProvider``: vmpooler's provider contract on a vCenter, through pyvmomi.

Every method runs on one of the core's worker threads; its exchanges with vCenter go
through :class:`~vmpooler.providers.vsphere.exchange.Vcenter` (a session borrowed per
exchange, retries, task waits without a session).

SOAP calls, once a pool's objects are known: ``vms_in_pool`` 1; ``get_vm`` 1 (+1 the
first time a host is seen); ``create_vm`` 2 (the clone, and its task added to the task
watch's view); ``get_vm_ip_address`` 1 per look; ``vm_ready`` 0 (``ssh``) or 1;
``destroy_vm`` 4 (power off and destroy, each with its task added to the view); disks,
snapshots and reverts 3; ``tag_vm_user`` 1; ``suspend_vm``/``resume_vm`` 1 when the VM is
already there, else 3 (:mod:`~vmpooler.providers.vsphere.standby`). The task watch's waits
are shared by every task in flight (see :mod:`~vmpooler.providers.vsphere.tasks`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from pyVmomi import vim

from vmpooler.providers.base import (
    Capability,
    ConnectionPoolHealth,
    MigrationResult,
    Provider,
    ProviderContext,
    VmInfo,
)
from vmpooler.providers.errors import (
    ClusterNotFoundError,
    FolderNotFoundError,
    PermanentProviderError,
    ProviderError,
    VmNotFoundError,
)
from vmpooler.providers.vsphere import clone, events, standby
from vmpooler.providers.vsphere.collector import find_by_path, retrieve
from vmpooler.providers.vsphere.exchange import (
    USER_FIELD,
    Vcenter,
    guest_of,
    port_group,
    snapshot_id,
    user_field,
)
from vmpooler.providers.vsphere.faults import (
    StaleReferenceError,
    clone_refusal,
    fault_name,
)
from vmpooler.providers.vsphere.hosts import HostRotation, cluster_loads
from vmpooler.providers.vsphere.inventory import Inventory
from vmpooler.providers.vsphere.placement import (
    choose_target,
)
from vmpooler.providers.vsphere.purge import unconfigured_folders
from vmpooler.providers.vsphere.sessions import Connector, SessionPool
from vmpooler.providers.vsphere.settings import PoolPlacement, VsphereSettings
from vmpooler.providers.vsphere.vm_ready_checks import (
    NotReadyError,
    guest_ip,
    probe_guest_tools,
    probe_tcp,
)

__all__ = ["VsphereProvider"]

log = logging.getLogger(__name__)

_VM_PROPERTIES = ("name", "guest.hostName", "runtime.bootTime", "runtime.powerState",
                  "runtime.host", "guest.ipAddress", "guest.toolsStatus",
                  "snapshot.rootSnapshotList")
_USER_FIELD = "vmpooler_user"
_ALREADY_OFF = frozenset({"InvalidPowerState", "InvalidState"})
_FOLDER_SYNC_WAIT = 5.0  # seconds a first listing waits for the watch's complete state


class VsphereProvider(Provider):
    """The ``vsphere`` provider. Thread-safe; see the module docstring for its behaviour."""

    def __init__(
        self,
        context: ProviderContext,
        *,
        connect: Connector | None = None,
        sleep: Callable[[float], None] = time.sleep,
        tcp_connect: Callable[[tuple[str, int], float], Any] = socket.create_connection,
    ) -> None:
        """Builds no connection yet (the first call logs in). ``connect``, ``sleep`` and
        ``tcp_connect`` are injectable for tests. Raises PermanentProviderError for an
        unusable configuration, naming each key."""
        super().__init__(context)
        try:
            self.config = VsphereSettings.from_context(
                context.name, context.settings, context.pools, context.global_settings,
                context.dns_domains)
        except ValueError as exc:
            raise PermanentProviderError(str(exc)) from exc
        self.sessions = (SessionPool(self.config, context.metrics, sleep=sleep)
                         if connect is None else
                         SessionPool(self.config, context.metrics, connect=connect, sleep=sleep))
        self.inventory = Inventory()
        self._sleep = sleep
        self._tcp_connect = tcp_connect
        self.vc = Vcenter(self.config, self.sessions, self.inventory)
        self._hosts = HostRotation(self.config.utilization_limit,
                                   self.config.host_selection_max_age)
        self._first_datacenter: str | None = None
        self._datacenter_lock = threading.Lock()

    @property
    def probe_timeout(self) -> float:
        """``vm_ready_timeout`` plus a vCenter look at the guest."""
        return self.config.ready_timeout + 1.0

    @property
    def max_concurrent_calls(self) -> int:
        """As many as there are sessions (``connection_pool_size``)."""
        return self.config.session_pool_size

    @property
    def capabilities(self) -> frozenset[Capability]:
        """Both standby modes: vCenter suspends and powers off."""
        return frozenset({Capability.SUSPEND, Capability.POWER_OFF})

    # -- plumbing -------------------------------------------------------------------------------
    def _placement(self, pool: str) -> PoolPlacement:
        """The pool's placement, its datacenter resolved (see :meth:`_default_datacenter`)."""
        placement = self.config.pools.get(pool)
        if placement is None:
            raise PermanentProviderError(f"Pool {pool} does not exist for the provider {self.name}")
        if placement.datacenter is None:
            placement = placement.with_datacenter(self._default_datacenter())
        return placement

    def _default_datacenter(self) -> str:
        """The datacenter of pools that name none: vCenter's first, as the gem's
        ``find_datacenter(nil)``. Looked up once (the first time a pool needs it, which is
        when the provider starts working) and logged, naming the others when there are
        several. ClusterNotFoundError when vCenter has no datacenter."""
        with self._datacenter_lock:
            if self._first_datacenter is None:
                names = self.vc.call(self.inventory.datacenter_names)
                if not names:
                    raise ClusterNotFoundError("no datacenter found on vCenter (pools without "
                                               "a datacenter use the first one)")
                self._first_datacenter = names[0]
                if len(names) > 1:
                    log.info("[*] [%s] pools without a datacenter use '%s', the first of the "
                             "%d datacenters vCenter lists (%s)", self.name, names[0],
                             len(names), ", ".join(names))
                else:
                    log.info("[*] [%s] pools without a datacenter use '%s', vCenter's only "
                             "datacenter", self.name, names[0])
            return self._first_datacenter

    def _vm(self, session: Any, pool: str, vm: str) -> Any | None:
        return self.inventory.vm(session, self._placement(pool), vm)

    def _require_vm(self, session: Any, pool: str, vm: str) -> Any:
        found = self._vm(session, pool, vm)
        if found is None:
            raise VmNotFoundError(f"VM {vm} in pool {pool} does not exist for the provider "
                                  f"{self.name}")
        return found

    # -- inventory and state ----------------------------------------------------------------------
    def vms_in_pool(self, pool: str) -> list[str]:
        """Names of every VM in the pool's folder: none once the folder is watched (the
        vCenter watch keeps its members); the first time, the folder is watched (one filter
        and a cancelled wait) and its complete state awaited, else (the watch cannot) one
        property retrieval."""
        placement = self._placement(pool)
        members = self.vc.watch.members
        known = members.names(pool)
        if known is None and not members.watched(pool):
            folder = self.vc.call(lambda s: self.inventory.folder(s, placement, create=False))
            if folder is None:
                return []
            try:
                self.vc.watch.watch_folder(pool, folder._moId)
                known = members.wait_synced(pool, _FOLDER_SYNC_WAIT)
            except Exception as exc:  # listed directly meanwhile
                log.debug("[%s] folder of pool %s not watched: %s", self.name, pool, exc)
        if known is None:
            return list(self.vc.call(lambda s: self.inventory.vm_ids(s, placement)))
        self.inventory.remember_listing(pool, known)
        return list(known)

    def get_vm(self, pool: str, vm: str) -> VmInfo | None:
        """Name, guest hostname, boot time, power state, host, IP and snapshots: from the
        vCenter watch when it keeps the pool's folder (no call but, once per host, its
        name), else one property retrieval."""
        placement = self._placement(pool)
        watched = self.vc.watch.members.vm(pool, vm)
        if watched is not None:
            props = watched[1]
            return self._vm_info(placement, pool, vm, props, self.vc.call(
                lambda s: self.inventory.host_name(s, props.get("runtime.host"))))

        def read(session: Any) -> VmInfo | None:
            ref = self.inventory.vm(session, placement, vm)
            props = None if ref is None else retrieve(session, ref, _VM_PROPERTIES)
            if props is None:
                self.inventory.forget_vm(pool, vm)
                return None
            return self._vm_info(placement, pool, vm, props,
                                 self.inventory.host_name(session, props.get("runtime.host")))

        return self.vc.call(read)

    @staticmethod
    def _vm_info(placement: PoolPlacement, pool: str, vm: str, props: dict[str, Any],
                 host: str | None) -> VmInfo:
        boot = props.get("runtime.bootTime")
        return VmInfo(
            name=str(props.get("name", vm)), hostname=props.get("guest.hostName"),
            template=placement.template, poolname=pool,
            boottime=None if boot is None else str(boot),
            powerstate=props.get("runtime.powerState"), ip=guest_ip(props), host=host,
            snapshots=clone.snapshot_names(props.get("snapshot.rootSnapshotList")),
        )

    def get_vm_ip_address(self, pool: str, vm: str) -> str | None:
        """The IP VMware Tools reports; waits up to ``ip_wait_timeout`` seconds for one
        (looking every second, as the gem does). None if the VM is gone or has none by then.
        An IP the vCenter watch already knows costs no call."""
        placement = self._placement(pool)
        watched = self.vc.watch.members.vm(pool, vm)
        if watched is not None and guest_ip(watched[1]) is not None:
            return guest_ip(watched[1])
        waited = 0.0
        while True:
            guest = self.vc.call(lambda s: guest_of(s, self.inventory.vm(s, placement, vm)))
            if guest is None:
                return None
            ip = guest_ip(guest)
            if ip is not None or waited >= self.config.ip_wait_timeout:
                return ip
            self._sleep(1.0)
            waited += 1.0

    def vm_ready(self, pool: str, vm: str) -> bool:
        """The pool's ``vm_ready_check`` probe; NotReadyError says why a VM is not ready."""
        placement = self._placement(pool)
        if placement.ready_check == "ssh":
            host = f"{vm}.{placement.domain}" if placement.domain else vm
            return probe_tcp(host, self.config.ready_port, self.config.ready_timeout,
                             self._tcp_connect)
        guest = self.vc.call(lambda s: guest_of(s, self.inventory.vm(s, placement, vm)))
        if guest is None:
            return False
        if placement.ready_check == "guest_tools":
            return probe_guest_tools(guest)
        ip = guest_ip(guest)
        if ip is None:
            raise NotReadyError("VMware Tools reports no usable IP address yet")
        return probe_tcp(ip, self.config.ready_port, self.config.ready_timeout,
                         self._tcp_connect)

    # -- create and destroy -----------------------------------------------------------------------
    def create_vm(self, pool: str, vm: str, *, template: str | None = None,
                  clone_target: str | None = None) -> VmInfo:
        """Clone the template into the pool's folder (created when missing unless
        ``create_folders`` is false) and power it on. A failed clone leaves no VM of ours.
        The clone is sent at most once per call, even when the session expires meanwhile
        (see ``Vcenter.start``)."""
        placement = self._placement(pool)
        sent: list[bool] = []  # set once the clone request is on its way to vCenter
        submit = self._clone_submitter(placement, vm, template, clone_target, sent)

        def adopt(session: Any) -> str | None:
            # The clone may have reached vCenter but its task cannot be followed (a retry;
            # a task lost with a restarted vCenter): a complete VM of that name in the
            # folder (its configuration carries our annotation naming it) is that clone's,
            # so clone no more. Anything less is cleaned up and the clone made again.
            if not sent:
                return None
            found = find_by_path(session, f"{placement.folder_path}/{vm}")
            if not isinstance(found, vim.VirtualMachine):
                return None
            return found._moId if _is_clone_of(session, found, vm) else None

        try:
            moid = self.vc.task(submit, f"clone of {vm}", adopt=adopt)
        except ProviderError as exc:
            if sent:
                self._log_events(pool, vm, f"clone failed ({exc})", template=template)
            # Nothing to clean up when vCenter never saw the clone (a missing template, say)
            # or refused it for a name another VM holds.
            if sent and fault_name(exc) != "DuplicateName":
                self._cleanup_failed_clone(pool, vm)
            refusal = clone_refusal(exc)
            if refusal is not exc:
                raise refusal from exc
            raise
        if moid is not None:
            self.inventory.remember_vm(pool, vm, moid)
            self.vc.watch.members.added(pool, vm, moid)
        return VmInfo(name=vm, hostname=None, template=template or placement.template,
                      poolname=pool, powerstate="poweredOn")

    def _clone_submitter(self, placement: PoolPlacement, vm: str, template: str | None,
                         clone_target: str | None, sent: list[bool]) -> Callable[[Any], Any]:
        inv = self.inventory

        def submit(session: Any) -> Any:
            source = inv.template(session, placement, template)
            folder = inv.folder(session, placement, create=self.config.create_folders)
            if folder is None:
                raise FolderNotFoundError(f"folder '{placement.folder_path}' not found "
                                          f"(create_folders is false)")
            snapshot = None
            if placement.linked_clone:
                shared = inv.memo(("snapshot", source._moId, placement.linked_clone_snapshot),
                                  lambda: snapshot_id(session, source,
                                                      placement.linked_clone_snapshot))
                snapshot = None if shared is None else session.ref(vim.vm.Snapshot, shared)
            changes = [self._nic_change(session, placement, source)] if placement.network else []
            resource_pool = inv.resource_pool(session, placement, clone_target)
            host = (self._hosts.next(session, resource_pool)
                    if self.config.manage_host_selection else None)
            spec = clone.clone_spec(
                placement=placement, vm=vm, username=self.config.username,
                template=template or placement.template,
                datastore=inv.datastore(session, placement), resource_pool=resource_pool,
                snapshot=snapshot, device_changes=changes, host=host)
            sent.append(True)
            return source.CloneVM_Task(folder=folder, name=vm, spec=spec)

        return submit

    def _nic_change(self, session: Any, placement: PoolPlacement, source: Any) -> Any:
        network = self.inventory.network(session, placement)
        nic = self.inventory.memo(("nic", source._moId), lambda: clone.first_nic(
            (retrieve(session, source, ["config.hardware.device"]) or {})
            .get("config.hardware.device", ())))
        if nic is None:
            raise PermanentProviderError(f"configuration error: template of pool "
                                         f"{placement.name} has no network card to connect")
        distributed = None
        if isinstance(network, vim.dvs.DistributedVirtualPortgroup):
            distributed = self.inventory.memo(("portgroup", network._moId),
                                              lambda: port_group(session, network))
        return clone.nic_edit_spec(nic, network, str(placement.network), distributed)

    def log_failure_events(self, pool: str, vm: str) -> None:
        """With ``log_vm_events_on_failure``, log the VM's newest vCenter events (at most
        ``max_vm_events``) at warning level. Never raises."""
        self._log_events(pool, vm, "failed while pending", template=None, source=False)

    def _log_events(self, pool: str, vm: str, why: str, *, template: str | None,
                    source: bool = True) -> None:
        """Log the events of ``vm`` and, with ``source``, those its template recorded about
        cloning it; one debug line when they cannot be read."""
        if not self.config.log_vm_events:
            return
        try:
            placement = self._placement(pool)

            def read(session: Any) -> list[Any]:
                ref = self.inventory.vm(session, placement, vm)
                src = self.inventory.template(session, placement, template) if source else None
                return events.failure_events(session, ref, src, vm, self.config.max_vm_events)

            found = self.vc.call(read)
        except Exception as exc:  # the events only explain a failure: never add one
            log.debug("[%s] could not read vCenter's events for '%s': %s", pool, vm, exc)
            return
        events.log_events(pool, vm, why, found)

    def _cleanup_failed_clone(self, pool: str, vm: str) -> None:
        try:
            self.destroy_vm(pool, vm)
        except ProviderError as exc:
            log.warning("[!] [%s] '%s' may be left behind by its failed clone: %s", pool, vm, exc)

    def destroy_vm(self, pool: str, vm: str) -> bool:
        """Power off (when on) and destroy; True also when the VM was already gone."""
        with contextlib.suppress(VmNotFoundError, StaleReferenceError):
            self._power_off_and_destroy(lambda s: self._require_vm(s, pool, vm), vm)
        self.inventory.forget_vm(pool, vm)
        self.vc.watch.members.removed(pool, vm)
        return True

    def _power_off_and_destroy(self, find: Callable[[Any], Any], what: str) -> None:
        """Power ``find(session)`` off (a VM already off is fine), then destroy it."""
        try:
            self.vc.task(lambda s: find(s).PowerOffVM_Task(), f"power-off of {what}")
        except ProviderError as exc:
            if isinstance(exc, VmNotFoundError) or fault_name(exc) not in _ALREADY_OFF:
                raise
        self.vc.task(lambda s: find(s).Destroy_Task(), f"destroy of {what}")

    # -- standby VMs -------------------------------------------------------------------------------
    def suspend_vm(self, pool: str, vm: str, *, mode: Capability = Capability.SUSPEND) -> bool:
        """``SuspendVM_Task`` (or ``PowerOffVM_Task``) unless already there; False when the VM
        does not exist. See :mod:`~vmpooler.providers.vsphere.standby`."""
        try:
            standby.enter_standby(self.vc, lambda s: self._require_vm(s, pool, vm), vm, mode)
        except (VmNotFoundError, StaleReferenceError):
            return False
        return True

    def resume_vm(self, pool: str, vm: str) -> bool:
        """``PowerOnVM_Task`` unless running already; False when the VM does not exist."""
        try:
            standby.resume(self.vc, lambda s: self._require_vm(s, pool, vm), vm)
        except (VmNotFoundError, StaleReferenceError):
            return False
        return True

    # -- disks, snapshots, migration, tags --------------------------------------------------------
    def create_disk(self, pool: str, vm: str, size_gb: int) -> bool:
        """Add a thin ``size_gb`` GB disk on the pool's datastore; False for a size <= 0."""
        if size_gb <= 0:
            return False
        placement = self._placement(pool)

        def submit(session: Any) -> Any:
            ref = self._require_vm(session, pool, vm)
            devices = (retrieve(session, ref, ["config.hardware.device"]) or {}).get(
                "config.hardware.device", ())
            spec = clone.disk_add_spec(devices, size_gb, placement.datastore)
            if spec is None:
                raise PermanentProviderError(f"VM {vm} has no SCSI controller with a free unit")
            return ref.ReconfigVM_Task(spec=spec)

        self.vc.task(submit, f"disk for {vm}")
        return True

    def create_snapshot(self, pool: str, vm: str, snapshot_name: str) -> bool:
        """Snapshot the VM (memory and quiesced, as the gem); a taken name is an error."""
        def submit(session: Any) -> Any:
            ref = self._require_vm(session, pool, vm)
            if snapshot_id(session, ref, snapshot_name) is not None:
                raise PermanentProviderError(
                    f"Snapshot {snapshot_name} for VM {vm} in pool {pool} already exists")
            return ref.CreateSnapshot_Task(name=snapshot_name, description="vmpooler",
                                           memory=True, quiesce=True)

        self.vc.task(submit, f"snapshot of {vm}")
        return True

    def revert_snapshot(self, pool: str, vm: str, snapshot_name: str) -> bool:
        """Revert to the named snapshot; False when the VM has no such snapshot."""
        def submit(session: Any) -> Any:
            found = snapshot_id(session, self._require_vm(session, pool, vm), snapshot_name)
            if found is None:
                return None
            return session.ref(vim.vm.Snapshot, found).RevertToSnapshot_Task()

        started = self.vc.start(submit, f"revert of {vm}")
        if started.task is None:
            return False
        self.vc.settle(started.task, started.info, f"revert of {vm}")
        return True

    def migrate_vm(self, pool: str, vm: str, *, may_move: bool = True) -> MigrationResult | None:
        """Report the VM's host; when ``may_move``, relocate it to the least used compatible
        host of its cluster if its own is not among the least used (``placement``)."""
        def survey(session: Any) -> tuple[str | None, str | None, Any]:
            ref = self._require_vm(session, pool, vm)
            host = (retrieve(session, ref, ["runtime.host"]) or {}).get("runtime.host")
            current = self.inventory.host_name(session, host)
            if not may_move or host is None:
                return current, None, None
            cluster = (retrieve(session, host, ["parent"]) or {}).get("parent")
            loads = cluster_loads(session, cluster)
            target = choose_target([load for _, load in loads], str(current),
                                   self.config.utilization_limit)
            target_id = next((moid for moid, load in loads if load.name == target), None)
            return current, target, target_id

        current, target, target_id = self.vc.call(survey)
        if target is None or target_id is None:
            return MigrationResult(host=current)
        started = time.monotonic()
        self.vc.task(lambda s: self._require_vm(s, pool, vm).RelocateVM_Task(
            spec=vim.vm.RelocateSpec(host=s.ref(vim.HostSystem, target_id))),
            f"migration of {vm}")
        return MigrationResult(host=target, moved_from=current,
                               seconds=time.monotonic() - started)

    def tag_vm_user(self, pool: str, vm: str, user: str | None) -> bool:
        """Set the VM's custom attribute ``vmpooler_user`` (created when missing)."""
        def tag(session: Any) -> bool:
            ref = self._require_vm(session, pool, vm)
            key = self.inventory.memo(("field", USER_FIELD), lambda: user_field(session))
            session.content.customFieldsManager.SetField(
                entity=ref, key=key, value=user or "unauthenticated")
            return True

        return self.vc.call(tag)

    def create_template_delta_disks(self, pool: str, *, template: str | None = None) -> None:
        """Take the template's ``linked_clone_snapshot`` (disks only) unless it exists."""
        placement = self._placement(pool)

        def submit(session: Any) -> Any:
            source = self.inventory.template(session, placement, template)
            if snapshot_id(session, source, placement.linked_clone_snapshot) is not None:
                return None
            self.inventory.drop("snapshot", source._moId, placement.linked_clone_snapshot)
            return source.CreateSnapshot_Task(
                name=placement.linked_clone_snapshot, memory=False, quiesce=False,
                description="vmpooler: the disks linked clones of this template share")

        self.vc.task(submit, f"snapshot of template {template or placement.template}")

    def purge_unconfigured_resources(self, allowlist: Collection[str]) -> None:
        """Destroy the folders (and their VMs) beside the pools' folders that no pool uses
        and ``allowlist`` (and ``resources_allowlist``) does not name, as the gem does. A
        folder holding a template is never touched."""
        allowed = set(allowlist) | set(self.config.allowlist)
        placements = [self._placement(pool) for pool in self.config.pools]
        doomed = self.vc.call(lambda s: unconfigured_folders(
            s, self.inventory, placements, allowed))
        for path, vms, folder_id in doomed:
            for vm_id in vms:
                self._destroy_by_id(vm_id, path)
            log.info("[-] [%s] removing unconfigured folder %s", self.name, path)
            self.vc.task(functools.partial(_destroy_folder, folder_id),
                         f"removal of folder {path}")

    def _destroy_by_id(self, moid: str, where: str) -> None:
        started = time.monotonic()
        self._power_off_and_destroy(lambda s: s.ref(vim.VirtualMachine, moid), moid)
        seconds = time.monotonic() - started
        log.info("[-] [%s] destroyed %s in unconfigured folder %s in %.2f s", self.name, moid,
                 where, seconds)
        # vmpooler's provider times these as destroy.<folder name>
        self.context.metrics.timing("destroy", seconds, tags={"pool": where.rsplit("/", 1)[-1]})

    # -- state --------------------------------------------------------------------------------
    def connection_pool_health(self) -> ConnectionPoolHealth:
        return self.sessions.health()

    def close(self) -> None:
        self.vc.watch.close()
        self.sessions.close()


def _is_clone_of(session: Any, ref: Any, vm: str) -> bool:
    """Whether ``ref`` is a complete clone named ``vm``: its configuration is there and
    holds the annotation :func:`~vmpooler.providers.vsphere.clone.clone_spec` writes."""
    note = (retrieve(session, ref, ["config.annotation"]) or {}).get("config.annotation")
    try:
        data = json.loads(note or "")
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("name") == vm


def _destroy_folder(folder_id: str, session: Any) -> Any:
    """Submit the removal of the folder ``folder_id`` (and what it holds); its task."""
    return session.ref(vim.Folder, folder_id).Destroy_Task()
