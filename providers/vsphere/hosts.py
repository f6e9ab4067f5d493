"""Reading a cluster's hosts for placement: clones in turn on the least used hosts
(``manage_host_selection``) and the survey a migration decides on."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from pyVmomi import vim

from vmpooler.providers.errors import TransientProviderError
from vmpooler.providers.vsphere.collector import members, retrieve
from vmpooler.providers.vsphere.placement import (
    HOST_PROPERTIES,
    HostLoad,
    host_load,
    least_used_hosts,
)

__all__ = ["HostRotation", "cluster_loads"]


def cluster_loads(session: Any, cluster: Any) -> list[tuple[str, HostLoad]]:
    """(host id, load) of every host of ``cluster``: one property retrieval."""
    return [(obj._moId, host_load(props)) for obj, props in
            members(session, cluster, "host", vim.HostSystem, HOST_PROPERTIES)]


class HostRotation:
    """The least used hosts of each cluster, handed out in turn, measured again every
    ``max_age`` seconds (the gem's ``manage_host_selection``). Thread-safe."""

    def __init__(self, limit: float, max_age: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._clusters: dict[str, tuple[float, deque[str]]] = {}  # id -> (until, host ids)

    def next(self, session: Any, resource_pool: Any) -> Any | None:
        """The host the next clone into ``resource_pool`` goes to (None: no cluster)."""
        owner = (retrieve(session, resource_pool, ["owner"]) or {}).get("owner")
        if owner is None:
            return None
        with self._lock:
            known = self._clusters.get(owner._moId)
            if known is not None and known[0] > self._clock() and known[1]:
                return session.ref(vim.HostSystem, _take(known[1]))
        loads = cluster_loads(session, owner)
        ids = {load.name: moid for moid, load in loads}
        rotation = deque(ids[name] for name in least_used_hosts(
            (load for _, load in loads), self.limit))
        if not rotation:
            raise TransientProviderError(
                "no host of the clone target is fit for a new VM (all in maintenance, not "
                "green, or over utilization_limit)")
        with self._lock:
            self._clusters[owner._moId] = (self._clock() + self.max_age, rotation)
            return session.ref(vim.HostSystem, _take(rotation))


def _take(rotation: deque[str]) -> str:
    """The host whose turn it is; it goes to the back of the line."""
    host = rotation[0]
    rotation.rotate(-1)
    return host
