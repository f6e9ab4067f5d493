"""``VsphereProvider``: vmpooler's provider contract on a vCenter, through pyvmomi.

Every method runs on one of the core's worker threads and borrows a session from the
:class:`~vmpooler.providers.vsphere.connection.SessionPool` for each exchange with vCenter,
never for a wait: a task is polled (at once, then after 0.5, 1, 2, 4 and every 5 s) with
the session given back in between, so long clones never starve short calls.

An exchange that meets an expired session logs in again and runs once more; one that
meets a stale remembered object forgets the inventory memory and runs once more; a
reused session whose connection broke is replaced and the exchange runs once more.
Everything else is translated by :mod:`~vmpooler.providers.vsphere.faults` and raised.

SOAP calls, once a pool's objects are known: ``vms_in_pool`` 1; ``get_vm`` 1 (+1 the
first time a host is seen); ``create_vm`` 2 (clone, task state); ``get_vm_ip_address`` 1 per
look; ``vm_ready`` 0 (``ssh``) or 1; ``destroy_vm`` 4 (power off and destroy, each with its
task state); disks, snapshots and reverts 3; ``tag_vm_user`` 1.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from pyVmomi import vim

from vmpooler.providers.base import (
    ConnectionPoolHealth,
    MigrationResult,
    Provider,
    ProviderContext,
    VmInfo,
)
from vmpooler.providers.errors import (
    FolderNotFoundError,
    PermanentProviderError,
    ProviderError,
    TransientProviderError,
    VmNotFoundError,
)
from vmpooler.providers.vsphere import clone
from vmpooler.providers.vsphere.collector import members, retrieve
from vmpooler.providers.vsphere.connection import Connector, SessionPool, is_expired
from vmpooler.providers.vsphere.faults import (
    StaleReferenceError,
    fault_name,
    is_connection_error,
    translate,
)
from vmpooler.providers.vsphere.inventory import Inventory
from vmpooler.providers.vsphere.placement import (
    HOST_PROPERTIES,
    choose_target,
    host_load,
    least_used_hosts,
)
from vmpooler.providers.vsphere.purge import unconfigured_folders
from vmpooler.providers.vsphere.readiness import (
    GUEST_PROPERTIES,
    NotReadyError,
    guest_ip,
    probe_guest_tools,
    probe_tcp,
)
from vmpooler.providers.vsphere.settings import PoolPlacement, VsphereSettings

__all__ = ["VsphereProvider"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_POLL_DELAYS = (0.5, 1.0, 2.0, 4.0)
_POLL_EVERY = 5.0
_TASK_TIMEOUT = 3600.0
_VM_PROPERTIES = ("name", "guest.hostName", "runtime.bootTime", "runtime.powerState",
                  "runtime.host", "guest.ipAddress", "guest.toolsStatus",
                  "snapshot.rootSnapshotList")
_USER_FIELD = "vmpooler_user"
_ALREADY_OFF = frozenset({"InvalidPowerState", "InvalidState"})


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
        extra = {} if connect is None else {"connect": connect}
        self.sessions = SessionPool(self.config, context.metrics, sleep=sleep, **extra)
        self.inventory = Inventory()
        self._sleep = sleep
        self._tcp_connect = tcp_connect
        self._hosts_lock = threading.Lock()
        self._hosts: dict[str, tuple[float, deque[str]]] = {}  # cluster -> (until, host ids)

    @property
    def max_concurrent_calls(self) -> int:
        """As many as there are sessions (``connection_pool_size``)."""
        return self.config.session_pool_size

    # -- plumbing -------------------------------------------------------------------------------
    def _placement(self, pool: str) -> PoolPlacement:
        placement = self.config.pools.get(pool)
        if placement is None:
            raise PermanentProviderError(f"Pool {pool} does not exist for the provider {self.name}")
        return placement

    def _run(self, exchange: Callable[[Any], _T], *, may_retry: bool = True) -> _T:
        """``exchange(session)`` on a borrowed session, retried once as the module says."""
        s = self.config
        for attempt in (1, 2):
            with self.sessions.session() as session:
                reused = session.used
                session.used = True
                try:
                    self.inventory.sync(session)
                    return exchange(session)
                except Exception as exc:
                    if attempt == 1 and is_expired(exc):
                        log.info("[%s] vCenter session expired; logging in again", s.name)
                        self.sessions.relogin(session)
                        continue
                    error = translate(exc, server=s.server, username=s.username)
                    if attempt == 1 and isinstance(error, StaleReferenceError):
                        self.inventory.forget()
                        continue
                    if may_retry and attempt == 1 and reused and is_connection_error(exc):
                        raise _RetryError from exc  # this session is broken: try a fresh one
                    raise error from exc
        raise TransientProviderError("vCenter call failed twice")  # pragma: no cover

    def _call(self, exchange: Callable[[Any], _T]) -> _T:
        try:
            return self._run(exchange)
        except _RetryError:
            # The connection of a session that worked before broke: vCenter restarted or
            # the network dropped idle connections. The other idle sessions share its fate.
            self.sessions.discard_idle()
            return self._run(exchange, may_retry=False)

    def _task_info(self, moid: str) -> Any:
        return self._call(lambda s: (retrieve(s, s.ref(vim.Task, moid), ["info"]) or {})
                          .get("info"))

    def _settle(self, moid: str, info: Any, what: str, poll: Callable[[], Any]) -> Any:
        delays = iter(_POLL_DELAYS)
        waited = 0.0
        while True:
            if info is None:
                raise TransientProviderError(f"{what}: vCenter lost task {moid}")
            if info.state == "success":
                result = info.result
                return getattr(result, "_moId", None)
            if info.state == "error":
                raise translate(info.error, server=self.config.server,
                                username=self.config.username)
            if waited >= _TASK_TIMEOUT:
                raise TransientProviderError(f"{what}: task {moid} unfinished after {waited:.0f}s")
            delay = next(delays, _POLL_EVERY)
            self._sleep(delay)
            waited += delay
            info = poll()

    def _task(self, submit: Callable[[Any], Any], what: str) -> Any:
        """Submit a task on a session, look at it once there, then wait without a session."""
        moid, info = self._call(lambda s: _submitted(s, submit(s)))
        return self._settle(moid, info, what, lambda: self._task_info(moid))

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
        """Names of every VM in the pool's folder: one property retrieval."""
        placement = self._placement(pool)
        return self._call(lambda s: self.inventory.vm_names(s, placement))

    def get_vm(self, pool: str, vm: str) -> VmInfo | None:
        """Name, guest hostname, boot time, power state, host, IP and snapshots."""
        placement = self._placement(pool)

        def read(session: Any) -> VmInfo | None:
            ref = self.inventory.vm(session, placement, vm)
            props = None if ref is None else retrieve(session, ref, _VM_PROPERTIES)
            if props is None:
                self.inventory.forget_vm(pool, vm)
                return None
            boot = props.get("runtime.bootTime")
            return VmInfo(
                name=str(props.get("name", vm)), hostname=props.get("guest.hostName"),
                template=placement.template, poolname=pool,
                boottime=None if boot is None else str(boot),
                powerstate=props.get("runtime.powerState"), ip=guest_ip(props),
                host=self.inventory.host_name(session, props.get("runtime.host")),
                snapshots=clone.snapshot_names(props.get("snapshot.rootSnapshotList")),
            )

        return self._call(read)

    def get_vm_ip_address(self, pool: str, vm: str) -> str | None:
        """The IP VMware Tools reports; waits up to ``ip_wait_timeout`` seconds for one
        (looking every second, as the gem does). None if the VM is gone or has none by then."""
        placement = self._placement(pool)
        waited = 0.0
        while True:
            guest = self._call(lambda s: _guest(s, self.inventory.vm(s, placement, vm)))
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
        guest = self._call(lambda s: _guest(s, self.inventory.vm(s, placement, vm)))
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
        ``create_folders`` is false) and power it on. A failed clone leaves no VM of ours."""
        placement = self._placement(pool)
        submit = self._clone_submitter(placement, vm, template, clone_target)
        try:
            moid = self._task(submit, f"clone of {vm}")
        except ProviderError as exc:
            if fault_name(exc) != "DuplicateName":  # that name is someone else's VM: keep it
                self._cleanup_failed_clone(pool, vm)
            raise
        if moid is not None:
            self.inventory.remember_vm(pool, vm, moid)
        return VmInfo(name=vm, hostname=None, template=template or placement.template,
                      poolname=pool, powerstate="poweredOn")

    def _clone_submitter(self, placement: PoolPlacement, vm: str, template: str | None,
                         clone_target: str | None) -> Callable[[Any], Any]:
        inv = self.inventory

        def submit(session: Any) -> Any:
            source = inv.template(session, placement, template)
            folder = inv.folder(session, placement, create=self.config.create_folders)
            if folder is None:
                raise FolderNotFoundError(f"folder '{placement.folder_path}' not found "
                                          f"(create_folders is false)")
            snapshot = None
            if placement.linked_clone:
                snapshot_id = inv.memo(("snapshot", source._moId, placement.linked_clone_snapshot),
                                       lambda: _snapshot_id(session, source,
                                                            placement.linked_clone_snapshot))
                snapshot = None if snapshot_id is None else session.ref(vim.vm.Snapshot,
                                                                        snapshot_id)
            changes = [self._nic_change(session, placement, source)] if placement.network else []
            resource_pool = inv.resource_pool(session, placement, clone_target)
            host = (self._next_host(session, resource_pool)
                    if self.config.manage_host_selection else None)
            spec = clone.clone_spec(
                placement=placement, vm=vm, username=self.config.username,
                template=template or placement.template,
                datastore=inv.datastore(session, placement), resource_pool=resource_pool,
                snapshot=snapshot, device_changes=changes, host=host)
            return source.CloneVM_Task(folder=folder, name=vm, spec=spec)

        return submit

    def _next_host(self, session: Any, resource_pool: Any) -> Any | None:
        """``manage_host_selection``: the next of the cluster's least used hosts, in turn;
        the cluster is measured again every ``host_selection_max_age`` seconds."""
        owner = (retrieve(session, resource_pool, ["owner"]) or {}).get("owner")
        if owner is None:
            return None
        with self._hosts_lock:
            known = self._hosts.get(owner._moId)
            if known is not None and known[0] > time.monotonic():
                rotation = known[1]
                rotation.rotate(-1)
                return session.ref(vim.HostSystem, rotation[-1]) if rotation else None
        measured = members(session, owner, "host", vim.HostSystem, HOST_PROPERTIES)
        ids = {str(props.get("name")): obj._moId for obj, props in measured}
        order = least_used_hosts((host_load(props) for _, props in measured),
                                 self.config.utilization_limit)
        rotation = deque(ids[name] for name in order)
        with self._hosts_lock:
            self._hosts[owner._moId] = (
                time.monotonic() + self.config.host_selection_max_age, rotation)
        if not rotation:
            raise TransientProviderError(
                "no host of the clone target is fit for a new VM (all in maintenance, not "
                "green, or over utilization_limit)")
        return session.ref(vim.HostSystem, rotation[0])

    def _nic_change(self, session: Any, placement: PoolPlacement, source: Any) -> Any:
        network = self.inventory.network(session, placement)
        nic = self.inventory.memo(("nic", source._moId), lambda: clone.first_nic(
            (retrieve(session, source, ["config.hardware.device"]) or {})
            .get("config.hardware.device", ())))
        if nic is None:
            raise PermanentProviderError(f"configuration error: template of pool "
                                         f"{placement.name} has no network card to connect")
        port_group = None
        if isinstance(network, vim.dvs.DistributedVirtualPortgroup):
            port_group = self.inventory.memo(("portgroup", network._moId),
                                             lambda: _port_group(session, network))
        return clone.nic_edit_spec(nic, network, str(placement.network), port_group)

    def _cleanup_failed_clone(self, pool: str, vm: str) -> None:
        try:
            self.destroy_vm(pool, vm)
        except ProviderError as exc:
            log.warning("[!] [%s] '%s' may be left behind by its failed clone: %s", pool, vm, exc)

    def destroy_vm(self, pool: str, vm: str) -> bool:
        """Power off (when on) and destroy; True also when the VM was already gone."""
        try:
            self._task(lambda s: self._require_vm(s, pool, vm).PowerOffVM_Task(),
                       f"power-off of {vm}")
        except VmNotFoundError:
            self.inventory.forget_vm(pool, vm)
            return True
        except ProviderError as exc:
            if fault_name(exc) not in _ALREADY_OFF:
                raise
        with contextlib.suppress(VmNotFoundError, StaleReferenceError):
            self._task(lambda s: self._require_vm(s, pool, vm).Destroy_Task(), f"destroy of {vm}")
        self.inventory.forget_vm(pool, vm)
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

        self._task(submit, f"disk for {vm}")
        return True

    def create_snapshot(self, pool: str, vm: str, snapshot_name: str) -> bool:
        """Snapshot the VM (memory and quiesced, as the gem); a taken name is an error."""
        def submit(session: Any) -> Any:
            ref = self._require_vm(session, pool, vm)
            if _snapshot_id(session, ref, snapshot_name) is not None:
                raise PermanentProviderError(
                    f"Snapshot {snapshot_name} for VM {vm} in pool {pool} already exists")
            return ref.CreateSnapshot_Task(name=snapshot_name, description="vmpooler",
                                           memory=True, quiesce=True)

        self._task(submit, f"snapshot of {vm}")
        return True

    def revert_snapshot(self, pool: str, vm: str, snapshot_name: str) -> bool:
        """Revert to the named snapshot; False when the VM has no such snapshot."""
        def submit(session: Any) -> Any:
            snapshot_id = _snapshot_id(session, self._require_vm(session, pool, vm),
                                       snapshot_name)
            if snapshot_id is None:
                return None
            return session.ref(vim.vm.Snapshot, snapshot_id).RevertToSnapshot_Task()

        moid, info = self._call(lambda s: _submitted(s, submit(s)))
        if moid is None:
            return False
        self._settle(moid, info, f"revert of {vm}", lambda: self._task_info(moid))
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
            loads = [(obj, host_load(props)) for obj, props in
                     members(session, cluster, "host", vim.HostSystem, HOST_PROPERTIES)]
            target = choose_target([load for _, load in loads], str(current),
                                   self.config.utilization_limit)
            target_id = next((obj._moId for obj, load in loads if load.name == target), None)
            return current, target, target_id

        current, target, target_id = self._call(survey)
        if target is None or target_id is None:
            return MigrationResult(host=current)
        started = time.monotonic()
        self._task(lambda s: self._require_vm(s, pool, vm).RelocateVM_Task(
            spec=vim.vm.RelocateSpec(host=s.ref(vim.HostSystem, target_id))),
            f"migration of {vm}")
        return MigrationResult(host=target, moved_from=current,
                               seconds=time.monotonic() - started)

    def tag_vm_user(self, pool: str, vm: str, user: str | None) -> bool:
        """Set the VM's custom attribute ``vmpooler_user`` (created when missing)."""
        def tag(session: Any) -> bool:
            ref = self._require_vm(session, pool, vm)
            key = self.inventory.memo(("field", _USER_FIELD), lambda: _user_field(session))
            session.content.customFieldsManager.SetField(
                entity=ref, key=key, value=user or "unauthenticated")
            return True

        return self._call(tag)

    def create_template_delta_disks(self, pool: str) -> None:
        """Take the template's ``linked_clone_snapshot`` (disks only) unless it exists."""
        placement = self._placement(pool)

        def submit(session: Any) -> Any:
            source = self.inventory.template(session, placement, None)
            if _snapshot_id(session, source, placement.linked_clone_snapshot) is not None:
                return None
            self.inventory.drop("snapshot", source._moId, placement.linked_clone_snapshot)
            return source.CreateSnapshot_Task(
                name=placement.linked_clone_snapshot, memory=False, quiesce=False,
                description="vmpooler: the disks linked clones of this template share")

        moid, info = self._call(lambda s: _submitted(s, submit(s)))
        if moid is not None:
            self._settle(moid, info, f"snapshot of template {placement.template}",
                         lambda: self._task_info(moid))

    def purge_unconfigured_resources(self, allowlist: Collection[str]) -> None:
        """Destroy the folders (and their VMs) beside the pools' folders that no pool uses
        and ``allowlist`` (and ``resources_allowlist``) does not name, as the gem does. A
        folder holding a template is never touched."""
        allowed = set(allowlist) | set(self.config.allowlist)
        doomed = self._call(lambda s: unconfigured_folders(
            s, self.inventory, list(self.config.pools.values()), allowed))
        for path, vms, folder_id in doomed:
            for vm_id in vms:
                self._destroy_by_id(vm_id, path)
            log.info("[-] [%s] removing unconfigured folder %s", self.name, path)
            self._task(lambda s, f=folder_id: s.ref(vim.Folder, f).Destroy_Task(),
                       f"removal of folder {path}")

    def _destroy_by_id(self, moid: str, where: str) -> None:
        try:
            self._task(lambda s: s.ref(vim.VirtualMachine, moid).PowerOffVM_Task(), "power-off")
        except ProviderError as exc:
            if fault_name(exc) not in _ALREADY_OFF:
                raise
        self._task(lambda s: s.ref(vim.VirtualMachine, moid).Destroy_Task(), "destroy")
        log.info("[-] [%s] destroyed %s in unconfigured folder %s", self.name, moid, where)

    # -- state --------------------------------------------------------------------------------
    def connection_pool_health(self) -> ConnectionPoolHealth:
        return self.sessions.health()

    def close(self) -> None:
        self.sessions.close()


class _RetryError(Exception):
    """Internal: the exchange met a broken reused session; run it once more."""


def _submitted(session: Any, task: Any) -> tuple[str | None, Any]:
    if task is None:
        return None, None
    return task._moId, (retrieve(session, task, ["info"]) or {}).get("info")


def _guest(session: Any, ref: Any | None) -> dict[str, Any] | None:
    return None if ref is None else retrieve(session, ref, GUEST_PROPERTIES)


def _snapshot_id(session: Any, ref: Any, name: str) -> str | None:
    tree = (retrieve(session, ref, ["snapshot.rootSnapshotList"]) or {}).get(
        "snapshot.rootSnapshotList")
    found = clone.find_snapshot(tree, name)
    return None if found is None else found._moId


def _port_group(session: Any, network: Any) -> tuple[str, str]:
    props = retrieve(session, network, ["key", "config.distributedVirtualSwitch"]) or {}
    switch = retrieve(session, props["config.distributedVirtualSwitch"], ["uuid"]) or {}
    return str(switch["uuid"]), str(props["key"])


def _user_field(session: Any) -> int:
    manager = session.content.customFieldsManager
    for _ in range(2):
        fields = (retrieve(session, manager, ["field"]) or {}).get("field") or ()
        for definition in fields:
            if definition.name == _USER_FIELD and definition.managedObjectType in (
                    None, vim.VirtualMachine):
                return int(definition.key)
        try:
            return int(manager.AddCustomFieldDef(name=_USER_FIELD,
                                                 moType=vim.VirtualMachine).key)
        except vim.fault.DuplicateName:
            continue
    raise TransientProviderError(f"custom attribute {_USER_FIELD} could not be created")
