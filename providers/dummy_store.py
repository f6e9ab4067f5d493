"""Where the dummy provider keeps its VMs: in memory, or one small file per VM that several
processes share.

Both inventories hold VM records (plain dicts in vmpooler's dummy format) filed under a
pool, and offer the same methods; every method is thread-safe, and every change of a record
is one atomic read-modify-write (:meth:`change`), so concurrent callers lose no update.
Records handed out are copies.

:class:`DirectoryInventory` keeps the inventory named by the provider's ``filename`` in the
directory ``<filename>.d/``: ``<pool>/<vm>`` holds one VM as JSON (a subset of YAML), written
to a temporary file and renamed over the old one. Every change holds an ``fcntl.flock`` on
``<filename>.lock`` (shared by every process using the inventory) for the few hundred
microseconds it takes, and touches that VM's file only, so a call costs the same whatever the
inventory's size; reads need no lock (a rename is atomic). A file at ``<filename>`` itself
(vmpooler's one-YAML format, or this provider's before it kept a directory) is merged into
the directory at start and renamed ``<filename>.migrated``. :func:`read_inventory` reads
either shape back as vmpooler's document.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import suppress
from copy import deepcopy
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, unquote

import yaml

from vmpooler.providers.errors import PermanentProviderError

__all__ = ["DirectoryInventory", "Inventory", "MemoryInventory", "process_gone",
           "read_inventory"]

# libyaml when PyYAML was built with it: a legacy file is parsed once, at start.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Record = dict[str, Any]
_TMP = ".tmp-"  # prefix of a file being written; never a VM (names are quoted, see _file)


class Inventory(Protocol):
    """The VMs of one dummy provider, by pool. Thread-safe; records returned are copies."""

    def pools(self) -> list[str]:
        """Every pool that has (or had) VMs."""
        ...

    def names(self, pool: str) -> list[str]:
        """The names of the pool's VMs (none for an unknown pool)."""
        ...

    def get(self, pool: str, vm: str) -> Record | None:
        """A copy of the VM's record filed under ``pool``, or None."""
        ...

    def add(self, pool: str, record: Record) -> bool:
        """File ``record`` under ``pool``; False (nothing written) when a VM of that name
        exists in any pool."""
        ...

    def change(self, pool: str, vm: str, edit: Callable[[Record], bool]) -> Record | None:
        """Atomically apply ``edit`` to the VM's record (it returns whether it changed it);
        the record afterwards, or None when the VM does not exist (``edit`` not called)."""
        ...

    def remove(self, pool: str, vm: str) -> bool:
        """Remove the VM; whether it was there."""
        ...

    def drop_pool(self, pool: str) -> None:
        """Forget ``pool`` when it holds no VM."""
        ...


def process_gone(cloned_by: object) -> bool:
    """True unless ``cloned_by`` (``host:pid``) names a live process, or one of another host
    (whose liveness cannot be known here)."""
    if not isinstance(cloned_by, str) or ":" not in cloned_by:
        return True
    host, _, pid = cloned_by.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _orphaned(record: Mapping[str, Any]) -> bool:
    """A clone in flight in a process that died: like a hypervisor's clone task, it
    finished while nobody was watching."""
    return record.get("dummy_state") == "CLONING" and process_gone(record.get("cloned_by"))


def _finish(record: Record) -> bool:
    if not _orphaned(record):
        return False
    record["dummy_state"] = "RUNNING"
    record.pop("cloned_by", None)
    return True


def parse_document(state: Any, where: str) -> dict[str, list[Record]]:
    """``{'pool': {<pool>: [vm dicts]}}`` as pool -> records; PermanentProviderError
    (a configuration error naming ``where``) when it has another shape."""
    if state is None:
        return {}
    if not isinstance(state, Mapping) or not isinstance(state.get("pool") or {}, Mapping):
        raise PermanentProviderError(
            f"configuration error: dummy state {where} is not a mapping of pools: "
            f"{state!r:.80}")
    pools: dict[str, list[Record]] = {}
    for pool, vms in (state.get("pool") or {}).items():
        if not isinstance(vms, list | None) or not all(
                isinstance(vm, Mapping) and "name" in vm for vm in vms or []):
            raise PermanentProviderError(
                f"configuration error: dummy state {where}: pool {pool!r} is not a list "
                "of VMs with a name")
        pools[str(pool)] = [dict(vm, name=str(vm["name"])) for vm in vms or []]
    return pools


class MemoryInventory:
    """This process's VMs only, in creation order; lost when it stops."""

    def __init__(self, seed: Mapping[str, list[Record]]) -> None:
        self._lock = threading.Lock()
        self._pools = {pool: {vm["name"]: deepcopy(vm) for vm in vms}
                       for pool, vms in seed.items()}

    def pools(self) -> list[str]:
        with self._lock:
            return list(self._pools)

    def names(self, pool: str) -> list[str]:
        with self._lock:
            return list(self._pools.get(pool, ()))

    def get(self, pool: str, vm: str) -> Record | None:
        with self._lock:
            record = self._pools.get(pool, {}).get(vm)
            return None if record is None else deepcopy(record)

    def add(self, pool: str, record: Record) -> bool:
        with self._lock:
            if any(record["name"] in vms for vms in self._pools.values()):
                return False
            self._pools.setdefault(pool, {})[record["name"]] = deepcopy(record)
            return True

    def change(self, pool: str, vm: str, edit: Callable[[Record], bool]) -> Record | None:
        with self._lock:
            record = self._pools.get(pool, {}).get(vm)
            if record is None:
                return None
            edit(record)
            return deepcopy(record)

    def remove(self, pool: str, vm: str) -> bool:
        with self._lock:
            return self._pools.get(pool, {}).pop(vm, None) is not None

    def drop_pool(self, pool: str) -> None:
        with self._lock:
            if not self._pools.get(pool, True):
                del self._pools[pool]


def _file(name: str) -> str:
    """A pool's or VM's name as a file name: quoted, and never starting with a dot."""
    quoted = quote(name, safe="")
    return "%2E" + quoted[1:] if quoted.startswith(".") else quoted


def _name(file: str) -> str:
    return unquote(file) if "%" in file else file


def _list_pools(root: Path) -> list[str]:
    with os.scandir(root) as entries:
        return sorted(_name(e.name) for e in entries if e.is_dir())


def _list_names(root: Path, pool: str) -> list[str]:
    try:
        found = os.listdir(root / _file(pool))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(_name(name) for name in found if not name.startswith(_TMP))


def _read_record(root: Path, pool: str, vm: str) -> Record | None:
    try:
        with open(root / _file(pool) / _file(vm), "rb") as handle:
            raw = handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        record = json.loads(raw)
    except ValueError as exc:
        raise PermanentProviderError(
            f"dummy inventory: {root / _file(pool) / _file(vm)} is not JSON: {exc}") from exc
    return record if isinstance(record, dict) else None


class DirectoryInventory:
    """One file per VM under ``<filename>.d/<pool>/``, shared by every process given the
    same ``filename``; see the module docstring."""

    def __init__(self, filename: Path, seed: Mapping[str, list[Record]]) -> None:
        """Open (creating it if need be) the inventory of ``filename``, merging a file found
        at ``filename`` itself; ``seed`` fills a new, empty inventory. Raises
        PermanentProviderError (a configuration error) when that file cannot be parsed or
        the directory cannot be made."""
        self.path = filename
        self.root = Path(f"{filename}.d")
        self._lock_path = Path(f"{filename}.lock")
        self._thread_lock = threading.Lock()
        new = not self.root.exists()  # two processes may both seed it: the same records
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PermanentProviderError(
                f"configuration error: cannot make the dummy inventory {self.root}: "
                f"{exc}") from exc
        with self._locked():
            if self.path.is_file():
                self._migrate()
            elif new:
                for pool, records in seed.items():
                    self._dir(pool).mkdir(exist_ok=True)
                    for record in records:
                        self._write(pool, record)

    # -- locking and files ---------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """This process's threads, then every process sharing the inventory."""
        with self._thread_lock:
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock

    def _dir(self, pool: str) -> Path:
        return self.root / _file(pool)

    def _read(self, pool: str, vm: str) -> Record | None:
        return _read_record(self.root, pool, vm)

    def _write(self, pool: str, record: Record) -> None:  # caller holds the lock
        folder = self._dir(pool)
        tmp = folder / f"{_TMP}{os.getpid()}-{threading.get_ident()}"
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(record, default=str))
            os.replace(tmp, folder / _file(record["name"]))
        except BaseException:
            with suppress(OSError):
                tmp.unlink()
            raise

    def _migrate(self) -> None:  # caller holds the lock
        """Merge the one-file inventory at ``self.path`` (its records win) and rename it."""
        try:
            state = yaml.load(self.path.read_text(), Loader=_Loader)
        except (OSError, yaml.YAMLError) as exc:
            raise PermanentProviderError(
                f"configuration error: cannot load dummy file {self.path}: {exc}") from exc
        pools = parse_document(state, f"in {self.path}")
        for pool, records in pools.items():
            self._dir(pool).mkdir(exist_ok=True)
            for record in records:
                for other in self.pools():
                    if other != pool:
                        (self._dir(other) / _file(record["name"])).unlink(missing_ok=True)
                _finish(record)
                self._write(pool, record)
        os.replace(self.path, f"{self.path}.migrated")

    # -- the inventory -------------------------------------------------------------------

    def pools(self) -> list[str]:
        return _list_pools(self.root)

    def names(self, pool: str) -> list[str]:
        return _list_names(self.root, pool)

    def get(self, pool: str, vm: str) -> Record | None:
        """As :meth:`Inventory.get`; a clone left in flight by a dead process is finished
        (and written) on the way."""
        record = self._read(pool, vm)
        if record is not None and _orphaned(record):
            return self.change(pool, vm, _finish)
        return record

    def add(self, pool: str, record: Record) -> bool:
        with self._locked():
            if any((self._dir(p) / _file(record["name"])).exists() for p in self.pools()):
                return False
            self._dir(pool).mkdir(exist_ok=True)
            self._write(pool, record)
            return True

    def change(self, pool: str, vm: str, edit: Callable[[Record], bool]) -> Record | None:
        with self._locked():
            record = self._read(pool, vm)
            if record is None:
                return None
            changed = _finish(record)
            if edit(record) or changed:
                self._write(pool, record)
            return record

    def remove(self, pool: str, vm: str) -> bool:
        with self._locked():
            try:
                (self._dir(pool) / _file(vm)).unlink()
            except (FileNotFoundError, NotADirectoryError):
                return False
            return True

    def drop_pool(self, pool: str) -> None:
        with self._locked(), suppress(OSError):  # not empty (or already gone): kept
            self._dir(pool).rmdir()


def read_inventory(filename: str | Path) -> dict[str, Any]:
    """The dummy inventory kept for ``filename`` as vmpooler's document
    ``{'pool': {<pool>: [vm dicts]}}`` (VMs by name), read without locking: from
    ``<filename>.d/`` when present, else from a one-YAML file at ``filename``; an empty
    document when neither exists. For tools and tests; the provider never calls it."""
    root = Path(f"{filename}.d")
    if not root.is_dir():
        path = Path(filename)
        state = yaml.load(path.read_text(), Loader=_Loader) if path.is_file() else None
        return {"pool": parse_document(state, f"in {path}")}
    document: dict[str, list[Record]] = {}
    for pool in _list_pools(root):
        records = (_read_record(root, pool, vm) for vm in _list_names(root, pool))
        document[pool] = [r for r in records if r is not None]
    return {"pool": document}
