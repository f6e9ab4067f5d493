"""The VMs of each watched pool folder, and their properties, kept by the vCenter watch.

A pool folder is watched by a property filter (its ``childEntity`` VMs and their
:data:`VM_PATHS`) on the watch's session. Its members are known ("synced") once a complete
update (the answer to a wait from version "", which vCenter computes from the filter itself)
seeds them; every later change is applied as it comes. The provider's own clones and
destroys are applied at once too, so a listing never lags behind what the provider itself
just did. Reads of a VM's properties (its name, guest hostname and IP, power state...) are
then served from here, without a call.

When the watch loses its session, every folder is forgotten (not synced): the provider reads
vCenter directly again and watches afresh. Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["VM_PATHS", "FolderMembers"]

VM_PATHS = ("name", "guest.hostName", "guest.ipAddress", "guest.toolsStatus",
            "guest.toolsRunningStatus", "runtime.bootTime", "runtime.powerState",
            "runtime.host", "snapshot.rootSnapshotList")
"""The properties of a pool VM the watch keeps (what listings, ``get_vm`` and the guest's
IP read)."""

_Props = dict[str, Any]


class FolderMembers:
    """See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool_of: dict[str, str] = {}  # filter id -> pool
        self._members: dict[str, dict[str, _Props]] = {}  # pool -> {VM id: props}, synced
        self._synced = threading.Condition(self._lock)

    def watched(self, pool: str) -> bool:
        """Whether the pool's folder has a filter on the watch's session."""
        with self._lock:
            return pool in self._pool_of.values()

    def any_watched(self) -> bool:
        with self._lock:
            return bool(self._pool_of)

    def filtering(self, filter_id: str, pool: str) -> None:
        """The watch made filter ``filter_id`` for the pool's folder: not synced until
        :meth:`seed`."""
        with self._lock:
            self._pool_of[filter_id] = pool
            self._members.pop(pool, None)

    def unseeded(self) -> set[str]:
        """The filters whose folder is not synced yet."""
        with self._lock:
            return {f for f, pool in self._pool_of.items() if pool not in self._members}

    def is_filter(self, filter_id: str) -> bool:
        with self._lock:
            return filter_id in self._pool_of

    def seed(self, filter_id: str, complete: Mapping[str, Mapping[str, Any]]) -> bool:
        """The folder holds exactly ``complete`` ({VM id: its properties}, from a complete
        update). False (nothing kept) when the filter is gone."""
        with self._lock:
            pool = self._pool_of.get(filter_id)
            if pool is None:
                return False
            self._members[pool] = {moid: dict(props) for moid, props in complete.items()
                                   if props.get("name") is not None}
            self._synced.notify_all()
            return True

    def wait_synced(self, pool: str, timeout: float) -> dict[str, str] | None:
        """:meth:`names` once the pool's folder is synced, waiting up to ``timeout``
        seconds (None: not in time, or not watched)."""
        with self._lock:
            self._synced.wait_for(lambda: pool in self._members
                                  or pool not in self._pool_of.values(), timeout=timeout)
        return self.names(pool)

    def change(self, filter_id: str, kind: str, moid: str, changes: Mapping[str, Any]) -> None:
        """A change the filter reported: a VM entered (``changes``: its properties), changed
        (the properties that did) or left the folder."""
        with self._lock:
            pool = self._pool_of.get(filter_id)
            members = None if pool is None else self._members.get(pool)
            if members is None:
                return
            if kind == "leave":
                members.pop(moid, None)
            elif moid in members:
                members[moid].update(changes)
            elif changes.get("name") is not None:
                members[moid] = dict(changes)

    def names(self, pool: str) -> dict[str, str] | None:
        """{name: VM id} of the pool's folder, or None when it is not synced."""
        with self._lock:
            members = self._members.get(pool)
            return None if members is None else {
                str(props["name"]): moid for moid, props in members.items()}

    def vm(self, pool: str, name: str) -> tuple[str, _Props] | None:
        """``(VM id, a copy of its properties)`` of the pool's VM ``name``, when the folder
        is synced and vCenter reported the VM (a VM the provider just made and vCenter did
        not report yet has only its name: None then too)."""
        with self._lock:
            for moid, props in (self._members.get(pool) or {}).items():
                if props.get("name") == name and len(props) > 1:
                    return moid, dict(props)
            return None

    def added(self, pool: str, name: str, moid: str) -> None:
        """The provider made VM ``name`` (``moid``) in the pool's folder."""
        with self._lock:
            members = self._members.get(pool)
            if members is not None:
                members.setdefault(moid, {"name": name})

    def removed(self, pool: str, name: str) -> None:
        """The provider destroyed VM ``name`` of the pool's folder."""
        with self._lock:
            members = self._members.get(pool)
            if members is not None:
                for moid in [m for m, p in members.items() if p.get("name") == name]:
                    del members[moid]

    def forget(self) -> None:
        """The watch lost its session (and its filters): nothing is synced any more."""
        with self._lock:
            self._pool_of.clear()
            self._members.clear()
            self._synced.notify_all()
