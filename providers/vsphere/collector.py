"""Reading vCenter's inventory with as few SOAP calls as possible.

Every function here costs a known number of calls, which the provider's call budget (see
``docs/vsphere.md``) is built on: :func:`retrieve`, :func:`children` and :func:`members`
are one ``RetrievePropertiesEx`` each (plus one ``ContinueRetrievePropertiesEx`` per
further page of results); :func:`find_by_path` is one ``FindByInventoryPath``;
:func:`find_in_tree` is three (create, read and destroy a container view).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pyVmomi import vim, vmodl

from vmpooler.providers.vsphere.faults import StaleReferenceError
from vmpooler.providers.vsphere.sessions import Session

__all__ = ["children", "find_by_path", "find_in_tree", "members", "retrieve"]

_PC = vmodl.query.PropertyCollector


def _collect(session: Session, spec: Any) -> list[Any]:
    """Run one filter spec, following result pages; ManagedObjectNotFound → stale."""
    collector = session.content.propertyCollector
    try:
        result = collector.RetrievePropertiesEx(specSet=[spec], options=_PC.RetrieveOptions())
        objects: list[Any] = []
        while result is not None:
            objects.extend(result.objects or ())
            token = result.token
            result = collector.ContinueRetrievePropertiesEx(token=token) if token else None
    except vmodl.fault.ManagedObjectNotFound as exc:
        raise StaleReferenceError(f"object {exc.obj} no longer exists") from exc
    for content in objects:  # a session or privilege problem may come back per property
        for missing in content.missingSet or ():
            if isinstance(missing.fault, vim.fault.NotAuthenticated | vim.fault.NoPermission):
                raise missing.fault
    return objects


def _props(content: Any) -> dict[str, Any]:
    return {prop.name: prop.val for prop in content.propSet or ()}


def retrieve(session: Session, obj: Any, paths: Sequence[str]) -> dict[str, Any] | None:
    """The properties ``paths`` of one object (unset ones are absent), or None when the
    object no longer exists."""
    spec = _PC.FilterSpec(
        objectSet=[_PC.ObjectSpec(obj=obj, skip=False)],
        propSet=[_PC.PropertySpec(type=type(obj), pathSet=list(paths))],
    )
    objects = _collect(session, spec)
    return _props(objects[0]) if objects else None


def members(
    session: Session, parent: Any, path: str, kind: type, paths: Sequence[str] = ("name",)
) -> list[tuple[Any, dict[str, Any]]]:
    """The objects of type ``kind`` that ``parent``'s property ``path`` refers to (for example
    a folder's ``childEntity``, a datacenter's ``datastore``, a cluster's ``host``), each with
    its properties ``paths``. ``parent`` itself is not included."""
    traversal = _PC.TraversalSpec(name="members", type=type(parent), path=path, skip=False)
    spec = _PC.FilterSpec(
        objectSet=[_PC.ObjectSpec(obj=parent, skip=True, selectSet=[traversal])],
        propSet=[_PC.PropertySpec(type=kind, pathSet=list(paths))],
    )
    return [(content.obj, _props(content)) for content in _collect(session, spec)]


def children(
    session: Session, folder: Any, kind: type, paths: Sequence[str] = ("name",)
) -> list[tuple[Any, dict[str, Any]]]:
    """The direct children of type ``kind`` of ``folder``, with properties ``paths``."""
    return members(session, folder, "childEntity", kind, paths)


def find_by_path(session: Session, path: str) -> Any | None:
    """The object at inventory path ``path`` (``DC0/vm/folder/name``), or None."""
    return session.content.searchIndex.FindByInventoryPath(inventoryPath=path)


def find_in_tree(session: Session, root: Any, kinds: Iterable[type], name: str) -> Any | None:
    """The first object of one of ``kinds`` named ``name`` anywhere below ``root``, or None."""
    kinds = list(kinds)
    view = session.content.viewManager.CreateContainerView(
        container=root, type=kinds, recursive=True)
    try:
        traversal = _PC.TraversalSpec(name="view", type=vim.view.ContainerView, path="view",
                                      skip=False)
        spec = _PC.FilterSpec(
            objectSet=[_PC.ObjectSpec(obj=view, skip=True, selectSet=[traversal])],
            propSet=[_PC.PropertySpec(type=kind, pathSet=["name"]) for kind in kinds],
        )
        for content in _collect(session, spec):
            if _props(content).get("name") == name:
                return content.obj
        return None
    finally:
        view.DestroyView()
