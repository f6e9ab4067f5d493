"""Finding the objects a pool needs, and remembering them.

Lookups are by inventory path first (one ``FindByInventoryPath``) and by name below the
datacenter second (a container view), as the gem does. What is found is remembered by its
managed object id, never by a session-bound proxy, so any session can use it. The memory is
dropped whenever a remembered id turns out stale, when a session reaches a vCenter with
another ``about.instanceUuid``, and when a session logged in after a connection broke: the
server may have been rebuilt or restored with the same identity, and ids that still exist
may now name other objects.

Missing objects raise the permanent errors of :mod:`vmpooler.providers.errors`, worded so
that vmpooler's own permanent-error patterns match them too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pyVmomi import vim

from vmpooler.providers.errors import (
    ClusterNotFoundError,
    DatastoreNotFoundError,
    FolderNotFoundError,
    NetworkNotFoundError,
    TemplateNotFoundError,
)
from vmpooler.providers.vsphere.collector import (
    children,
    find_by_path,
    find_in_tree,
    members,
    retrieve,
)
from vmpooler.providers.vsphere.sessions import Session
from vmpooler.providers.vsphere.settings import PoolPlacement

__all__ = ["Inventory"]

_T = TypeVar("_T")
_Key = tuple[str, ...]


class Inventory:
    """Remembered object ids for one vCenter, shared by every worker thread (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._uuid: str | None = None
        self._generation = 0
        self._ids: dict[_Key, tuple[type, str]] = {}
        self._data: dict[_Key, Any] = {}
        self._vms: dict[tuple[str, str], str] = {}  # (pool, vm) -> moid, from listings
        self._looking: dict[_Key, threading.Lock] = {}  # one lookup per key at a time

    # -- memory -------------------------------------------------------------------------------
    def sync(self, session: Session) -> None:
        """Forget everything if ``session`` talks to another vCenter than the last one, or
        logged in after a connection broke (see the module docstring)."""
        with self._lock:
            if session.instance_uuid != self._uuid or session.generation > self._generation:
                self._uuid = session.instance_uuid
                self._generation = max(self._generation, session.generation)
                self._clear()

    def forget(self) -> None:
        """Forget every remembered object (one of them was stale)."""
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        self._ids.clear()
        self._data.clear()
        self._vms.clear()

    def forget_vm(self, pool: str, vm: str) -> None:
        with self._lock:
            self._vms.pop((pool, vm), None)

    def _lookup_lock(self, key: _Key) -> threading.Lock:
        """The lock one lookup of ``key`` holds: threads that need the same object while it
        is being looked up (the first clones of a fill, all at once) wait for its answer
        instead of asking vCenter too."""
        with self._lock:
            return self._looking.setdefault(key, threading.Lock())

    def _object(self, session: Session, key: _Key, find: Callable[[], Any | None]) -> Any | None:
        with self._lock:
            known = self._ids.get(key)
        if known is not None:
            return session.ref(*known)
        with self._lookup_lock(key):
            with self._lock:
                known = self._ids.get(key)
            if known is not None:
                return session.ref(*known)
            found = find()
            if found is not None:
                with self._lock:
                    self._ids[key] = (type(found), found._moId)
            return found

    def memo(self, key: _Key, compute: Callable[[], _T]) -> _T:
        """``compute()``'s value, computed once until the memory is dropped (concurrent
        callers wait for the one computing it). For plain data only (device specs, keys),
        never session-bound objects."""
        with self._lock:
            if key in self._data:
                return self._data[key]  # type: ignore[no-any-return]
        with self._lookup_lock(("memo", *key)):
            with self._lock:
                if key in self._data:
                    return self._data[key]  # type: ignore[no-any-return]
            value = compute()
            with self._lock:
                self._data[key] = value
            return value

    def drop(self, *key: str) -> None:
        """Forget one remembered object or value."""
        with self._lock:
            self._ids.pop(key, None)
            self._data.pop(key, None)

    # -- datacenter-level objects ---------------------------------------------------------------
    def datacenter_names(self, session: Session) -> list[str]:
        """The names of the datacenters directly in vCenter's root folder, in its order (the
        first is the one rbvmomi's ``find_datacenter(nil)`` returns): two calls."""
        root = session.content.rootFolder
        entities = (retrieve(session, root, ["childEntity"]) or {}).get("childEntity") or ()
        order = [e._moId for e in entities if isinstance(e, vim.Datacenter)]
        names = {obj._moId: str(props.get("name"))
                 for obj, props in children(session, root, vim.Datacenter)}
        return [names[moid] for moid in order if moid in names]

    def datacenter(self, session: Session, name: str) -> Any:
        """The datacenter ``name`` (an inventory path for nested ones)."""
        found = self._object(session, ("datacenter", name), lambda: find_by_path(session, name))
        if not isinstance(found, vim.Datacenter):
            raise ClusterNotFoundError(f"datacenter '{name}' not found on vCenter")
        return found

    def _root(self, session: Session, datacenter: str, kind: str) -> Any:
        """The datacenter's ``vm``, ``host``, ``datastore`` or ``network`` folder."""
        path = f"{datacenter}/{kind}"
        found = self._object(session, ("folder", path), lambda: find_by_path(session, path))
        if not isinstance(found, vim.Folder):
            raise ClusterNotFoundError(f"datacenter '{datacenter}' not found on vCenter")
        return found

    def folder(self, session: Session, placement: PoolPlacement, *, create: bool) -> Any | None:
        """The pool's folder; created (with its parents) when missing and ``create``, else
        None when missing. FolderNotFoundError when the path names something else."""
        path = placement.folder_path
        with self._lookup_lock(("making folder", path)):  # made once, not once per clone
            found = self._object(session, ("folder", path), lambda: find_by_path(session, path))
            if found is None and create:
                found = self._create_folder(session, placement)
        if found is not None and not isinstance(found, vim.Folder):
            self.drop("folder", path)
            raise FolderNotFoundError(f"folder '{path}' not found: it is a {type(found).__name__}")
        return found

    def _create_folder(self, session: Session, placement: PoolPlacement) -> Any:
        dc = placement.resolved_datacenter
        parent = self._root(session, dc, "vm")
        path = f"{dc}/vm"
        for part in placement.folder.split("/"):
            path = f"{path}/{part}"
            child = find_by_path(session, path)
            if child is None:
                try:
                    child = parent.CreateFolder(name=part)
                except vim.fault.DuplicateName:  # another worker made it meanwhile
                    child = find_by_path(session, path)
            if not isinstance(child, vim.Folder):
                raise FolderNotFoundError(f"folder '{path}' not found and cannot be created")
            parent = child
        with self._lock:
            self._ids[("folder", path)] = (type(parent), parent._moId)
        return parent

    def template(self, session: Session, placement: PoolPlacement, name: str | None) -> Any:
        """The VM or template to clone: ``name`` (an override) or the pool's ``template``."""
        template = (name or placement.template).strip("/")
        dc = placement.resolved_datacenter

        def find() -> Any | None:
            found = find_by_path(session, f"{dc}/vm/{template}")
            if found is None and "/" not in template:
                found = find_in_tree(session, self._root(session, dc, "vm"),
                                     [vim.VirtualMachine], template)
            return found

        found = self._object(session, ("template", dc, template), find)
        if not isinstance(found, vim.VirtualMachine):
            self.datacenter(session, dc)  # say so when the datacenter is what is missing
            raise TemplateNotFoundError(f"template '{template}' not found in datacenter '{dc}'")
        return found

    def datastore(self, session: Session, placement: PoolPlacement) -> Any:
        """The pool's datastore, by path below the datastore folder or by name."""
        dc, name = placement.resolved_datacenter, placement.datastore
        find = self._finder(session, dc, "datastore", vim.Datastore, name)
        found = self._object(session, ("datastore", dc, name), find)
        if not isinstance(found, vim.Datastore):
            raise DatastoreNotFoundError(f"datastore '{name}' not found in datacenter '{dc}'")
        return found

    def _finder(self, session: Session, dc: str, kind: str, type_: type, name: str
                ) -> Callable[[], Any | None]:
        """Find ``name`` at ``<dc>/<kind>/<name>``, else among the datacenter's ``kind``
        property (its datastores or networks, wherever they sit in folders)."""
        def find() -> Any | None:
            found = find_by_path(session, f"{dc}/{kind}/{name}")
            if found is None:
                found = next((obj for obj, props in members(
                    session, self.datacenter(session, dc), kind, type_)
                    if props.get("name") == name), None)
            return found

        return find

    def resource_pool(self, session: Session, placement: PoolPlacement, target: str | None) -> Any:
        """The resource pool clones go to: ``target`` (an override) or the pool's
        ``clone_target`` — a cluster or standalone host (its root pool), a resource pool
        (``Cluster/Resources/Child``), or a name found anywhere below the host folder."""
        dc, name = placement.resolved_datacenter, (target or placement.clone_target).strip("/")

        def find() -> Any | None:
            found = find_by_path(session, f"{dc}/host/{name}")
            if found is None:
                found = find_in_tree(
                    session, self._root(session, dc, "host"),
                    [vim.ComputeResource, vim.ClusterComputeResource, vim.ResourcePool], name)
            if isinstance(found, vim.HostSystem):
                found = (retrieve(session, found, ["parent"]) or {}).get("parent")
            if isinstance(found, vim.ComputeResource):
                found = (retrieve(session, found, ["resourcePool"]) or {}).get("resourcePool")
            return found

        found = self._object(session, ("pool", dc, name), find)
        if not isinstance(found, vim.ResourcePool):
            raise ClusterNotFoundError(f"resource pool '{name}' not found in datacenter '{dc}'")
        return found

    def network(self, session: Session, placement: PoolPlacement) -> Any:
        """The pool's network (standard or distributed port group), by path or by name."""
        dc, name = placement.resolved_datacenter, str(placement.network)
        find = self._finder(session, dc, "network", vim.Network, name)
        found = self._object(session, ("network", dc, name), find)
        if not isinstance(found, vim.Network):
            raise NetworkNotFoundError(f"network '{name}' not found in datacenter '{dc}'")
        return found

    # -- VMs ------------------------------------------------------------------------------------
    def vm_ids(self, session: Session, placement: PoolPlacement) -> dict[str, str]:
        """{name: id} of the VMs in the pool's folder (none when it does not exist yet): one
        property retrieval once the folder is known. Remembers each VM's id."""
        folder = self.folder(session, placement, create=False)
        if folder is None:
            return {}
        found = {str(props["name"]): obj._moId
                 for obj, props in children(session, folder, vim.VirtualMachine)
                 if props.get("name") is not None}
        self.remember_listing(placement.name, found)
        return found

    def vm_names(self, session: Session, placement: PoolPlacement) -> list[str]:
        """Names of the VMs in the pool's folder (see :meth:`vm_ids`)."""
        return list(self.vm_ids(session, placement))

    def remember_listing(self, pool: str, found: dict[str, str]) -> None:
        """The pool's VMs are exactly ``found`` ({name: id}): remember their ids, forget
        the others'."""
        with self._lock:
            for key in [k for k in self._vms if k[0] == pool and k[1] not in found]:
                del self._vms[key]
            for name, moid in found.items():
                self._vms[(pool, name)] = moid

    def vm(self, session: Session, placement: PoolPlacement, name: str) -> Any | None:
        """The pool's VM ``name``, or None when its folder holds no such VM."""
        with self._lock:
            moid = self._vms.get((placement.name, name))
        if moid is not None:
            return session.ref(vim.VirtualMachine, moid)
        found = find_by_path(session, f"{placement.folder_path}/{name}")
        if not isinstance(found, vim.VirtualMachine):
            return None
        self.remember_vm(placement.name, name, found._moId)
        return found

    def remember_vm(self, pool: str, name: str, moid: str) -> None:
        with self._lock:
            self._vms[(pool, name)] = moid

    def host_name(self, session: Session, host: Any) -> str | None:
        """A host's name (remembered: host names rarely change)."""
        if host is None:
            return None
        key = ("host-name", host._moId)
        return self.memo(key, lambda: (retrieve(session, host, ["name"]) or {}).get("name"))
