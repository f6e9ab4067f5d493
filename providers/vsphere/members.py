"""The VMs of each watched pool folder, kept by the vCenter watch's updates.

A pool folder is watched by a property filter (its ``childEntity`` VMs and their names) on
the watch's session. Its members are known ("synced") once a complete update (the answer to
a wait from version "", which vCenter computes from the filter itself) seeds them; every
later change is applied as it comes. The provider's own clones and destroys are applied at
once too, so a listing never lags behind what the provider itself just did.

When the watch loses its session, every folder is forgotten (not synced): the provider lists
directly again and watches afresh. Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

__all__ = ["FolderMembers"]

_Change = tuple[str, str, str | None]  # (kind enter|modify|leave, VM id, name or None)


class FolderMembers:
    """See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool_of: dict[str, str] = {}  # filter id -> pool
        self._members: dict[str, dict[str, str]] = {}  # pool -> {VM id: name}, synced only
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

    def seed(self, filter_id: str, complete: Mapping[str, str]) -> bool:
        """The folder holds exactly ``complete`` ({VM id: name}, from a complete update).
        False (nothing kept) when the filter is gone."""
        with self._lock:
            pool = self._pool_of.get(filter_id)
            if pool is None:
                return False
            self._members[pool] = dict(complete)
            self._synced.notify_all()
            return True

    def wait_synced(self, pool: str, timeout: float) -> dict[str, str] | None:
        """:meth:`names` once the pool's folder is synced, waiting up to ``timeout``
        seconds (None: not in time, or not watched)."""
        with self._lock:
            self._synced.wait_for(lambda: pool in self._members
                                  or pool not in self._pool_of.values(), timeout=timeout)
        return self.names(pool)

    def change(self, filter_id: str, kind: str, moid: str, name: str | None) -> None:
        """A change the filter reported: a VM entered, changed or left the folder."""
        with self._lock:
            pool = self._pool_of.get(filter_id)
            if pool is not None and pool in self._members:
                _apply(self._members[pool], (kind, moid, name))

    def names(self, pool: str) -> dict[str, str] | None:
        """{name: VM id} of the pool's folder, or None when it is not synced."""
        with self._lock:
            members = self._members.get(pool)
            return None if members is None else {name: moid for moid, name in members.items()}

    def added(self, pool: str, name: str, moid: str) -> None:
        """The provider made VM ``name`` (``moid``) in the pool's folder."""
        with self._lock:
            if pool in self._members:
                self._members[pool][moid] = name

    def removed(self, pool: str, name: str) -> None:
        """The provider destroyed VM ``name`` of the pool's folder."""
        with self._lock:
            members = self._members.get(pool)
            if members is not None:
                for moid in [m for m, n in members.items() if n == name]:
                    del members[moid]

    def forget(self) -> None:
        """The watch lost its session (and its filters): nothing is synced any more."""
        with self._lock:
            self._pool_of.clear()
            self._members.clear()
            self._synced.notify_all()


def _apply(members: dict[str, str], change: _Change) -> None:
    kind, moid, name = change
    if kind == "leave":
        members.pop(moid, None)
    elif name is not None:
        members[moid] = name
