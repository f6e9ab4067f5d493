"""The dummy provider: an in-memory (optionally file-backed) fake hypervisor.

It follows vmpooler 3.9.1's ``dummy.rb`` knob for knob, but implements our 3.x contract,
which vmpooler's own dummy does not: it has a fake IP address, a non-blocking readiness
probe and a ``migrate_vm``. It is also the template for writing a new provider.

Settings (all optional, under ``:providers: :<name>:``):

* ``filename`` — YAML inventory in vmpooler's format ``{'pool': {<pool>: [vm dicts]}}``;
  loaded at start if present (wins over ``initial_state``, the same shape, for tests), and
  rewritten atomically (temp file + ``os.replace``) after every mutation. Several processes
  (managers sharing one Redis) may share the file: every operation holds an ``fcntl.flock``
  on ``<filename>.lock`` and re-reads the file first when another process rewrote it, so
  each read-modify-write is whole (ours; vmpooler's dummy keeps one process's copy).
* ``<op>_max_time`` for ``createvm``, ``createdisk``, ``createsnapshot``, ``revertsnapshot``,
  ``migratevm``, ``destroyvm``, ``suspendvm``, ``resumevm`` and
  ``destroyvm_max_shutdown_time`` — simulated duration: an integer ``n >= 1`` sleeps
  ``1 + randint(0, n-1)`` s as vmpooler does; a non-integral float ``x`` sleeps
  ``uniform(0, x)`` s; absent or ``<= 0`` means no delay.
* ``<op>_fail_percent`` for the same operations and ``vmready`` — fail when
  ``randint(1, 100) <= percent``, raising ``TransientProviderError('Dummy Failure for
  <knob>')``. A failed clone removes the VM from inventory; a failed suspend or resume
  leaves the VM as it was.
* ``migratevm_couldmove_percent`` — chance that ``migrate_vm`` moves the VM to another of
  ten simulated hosts (absent: never moves; the migrate delay/failure apply only to moves).
* ``getvm_poweroff_percent`` / ``getvm_rename_percent`` — chance that ``get_vm`` powers the
  VM off / renames its hostname to ``DUMMY<name>`` (which makes the core evict it).
* ``templates`` / ``folders`` / ``datastores`` — lists of the names that "exist"; when one is
  set, a clone for a pool whose ``template`` / ``folder`` / ``datastore`` is not listed
  fails with the permanent ``TemplateNotFoundError`` / ``FolderNotFoundError`` /
  ``DatastoreNotFoundError`` a real hypervisor would raise (ours; vmpooler's has none).
* ``resources_allowlist`` — pools (and VM names) of the inventory that
  ``purge_unconfigured_resources`` keeps although no configured pool is theirs.
* ``is_ready_timeout`` — vmpooler's dummy blocks up to this long for a clone to finish;
  ours never waits: ``vm_ready`` answers False at once while cloning. When set, it caps
  vmpooler's 2 s "booted → accepts connections" pause (slept on the first successful
  probe only); absent or 0 means no pause.

Divergences from vmpooler: ``name`` is the configured provider name (vmpooler: always
``"dummy"``); ``destroy_vm`` of a missing VM returns True; the destroy failure message
names ``destroyvm_fail_percent`` (vmpooler's wrongly says migratevm); creating a VM whose
name already exists raises instead of adding a duplicate; ``suspend_vm`` / ``resume_vm``
(standby VMs, powerstate ``Suspended`` / ``PoweredOff``) are ours.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import random
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import suppress
from copy import deepcopy
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from vmpooler.providers.base import (
    Capability,
    MigrationResult,
    Provider,
    ProviderContext,
    VmInfo,
)
from vmpooler.providers.errors import (
    DatastoreNotFoundError,
    FolderNotFoundError,
    PermanentProviderError,
    TemplateNotFoundError,
    TransientProviderError,
    VmNotFoundError,
)

__all__ = ["DummyProvider"]

# libyaml when PyYAML was built with it: the file is read and written on every call, by
# every manager sharing it, and the pure-Python parser is ten times slower.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

log = logging.getLogger(__name__)

_Vm = dict[str, Any]
_HOSTS = 10  # simulated cluster size for migrations
_STANDBY_STATES = {Capability.SUSPEND: "Suspended", Capability.POWER_OFF: "PoweredOff"}


def _process_gone(cloned_by: object) -> bool:
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


def fake_ip(name: str) -> str:
    """A deterministic private address for ``name``: ``192.168.<0-255>.<1-254>``."""
    digest = hashlib.sha256(name.encode()).digest()
    return f"192.168.{digest[0]}.{1 + digest[1] % 254}"


def _now() -> str:
    return datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %z")


class DummyProvider(Provider):
    """A fake provider for development and tests; see the module docstring for its knobs.

    Thread-safe: one lock guards the inventory and the file; simulated delays run outside
    it, so calls for different VMs overlap as they would on a real hypervisor.
    """

    def __init__(
        self,
        context: ProviderContext,
        *,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``rng`` and ``sleep`` are injectable so tests are deterministic and never wait.

        Raises PermanentProviderError when ``filename`` exists but cannot be parsed.
        """
        super().__init__(context)
        self._rng = rng if rng is not None else random.Random()
        self._rng_lock = threading.Lock()
        self._sleep = sleep
        self._thread_lock = threading.Lock()
        filename = self.settings.get("filename")
        self._path = Path(filename) if filename else None
        self._seen: tuple[int, int, int] | None = None  # the file's (ino, size, mtime) we know
        state: Any = deepcopy(self.settings.get("initial_state"))
        from_file = self._path is not None and self._path.exists()
        if self._path is not None and from_file:
            try:
                state = yaml.load(self._path.read_text(), Loader=_Loader)
            except (OSError, yaml.YAMLError) as exc:
                raise PermanentProviderError(
                    f"configuration error: cannot load dummy file {self._path}: {exc}"
                ) from exc
        if state is not None and not isinstance(state, Mapping):
            raise PermanentProviderError(
                f"configuration error: dummy state is not a mapping: {state!r:.80}"
            )
        pools = (state or {}).get("pool") or {}
        self._pools: dict[str, list[_Vm]] = {
            str(pool): [dict(vm) for vm in vms or []] for pool, vms in pools.items()
        }
        self._names = {vm["name"] for vms in self._pools.values() for vm in vms}
        if from_file:
            self._finish_orphaned_clones()
        self._seen = self._stat()

    @contextlib.contextmanager
    def _lock_ctx(self) -> Iterator[None]:
        """The inventory lock: this process's threads, and with a file every process sharing
        it (``flock`` on ``<filename>.lock``); the file is re-read when another process
        rewrote it since this one last read or wrote it."""
        with self._thread_lock:
            if self._path is None:
                yield
                return
            with open(f"{self._path}.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    if self._stat() != self._seen:
                        self._reload()
                    yield
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)

    @property
    def _lock(self) -> contextlib.AbstractContextManager[None]:
        return self._lock_ctx()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self._path) if self._path is not None else None
        except FileNotFoundError:
            return None
        return None if st is None else (st.st_ino, st.st_size, st.st_mtime_ns)

    def _reload(self) -> None:  # caller holds the lock
        try:
            state = yaml.load(self._path.read_text(), Loader=_Loader) if self._path else None
        except FileNotFoundError:
            state = None
        pools = (state or {}).get("pool") or {} if isinstance(state, Mapping) else {}
        self._pools = {str(p): [dict(vm) for vm in vms or []] for p, vms in pools.items()}
        self._names = {vm["name"] for vms in self._pools.values() for vm in vms}
        self._finish_orphaned_clones()
        self._seen = self._stat()

    def _finish_orphaned_clones(self) -> None:  # caller holds the lock, or is __init__
        """A clone in flight in a process that died (another manager sharing the file,
        killed; or the last process, when ``cloned_by`` is not recorded): like a
        hypervisor's clone task, it finished while nobody was watching."""
        for vms in self._pools.values():
            for vm in vms:
                if vm.get("dummy_state") == "CLONING" and _process_gone(vm.get("cloned_by")):
                    vm["dummy_state"] = "RUNNING"
                    vm.pop("cloned_by", None)

    # -- contract ------------------------------------------------------------------------

    @property
    def capabilities(self) -> frozenset[Capability]:
        """Both standby modes: suspended and powered off."""
        return frozenset(_STANDBY_STATES)

    def vms_in_pool(self, pool: str) -> list[str]:
        """Names of the pool's VMs, including ones still cloning."""
        with self._lock:
            return [vm["name"] for vm in self._pools.get(pool, [])]

    def get_vm(self, pool: str, vm: str) -> VmInfo | None:
        """The VM's info, or None; may power it off or rename it (``getvm_*`` knobs)."""
        with self._lock:
            record = self._find(pool, vm)
            if record is None:
                return None
            if record.get("powerstate") == "PoweredOn" and self._roll("getvm_poweroff_percent"):
                record["powerstate"] = "PoweredOff"
                self._persist()
            if record.get("hostname") == record["name"] and self._roll("getvm_rename_percent"):
                record["hostname"] = "DUMMY" + record["name"]
                self._persist()
            return self._info(record)

    def create_vm(
        self, pool: str, vm: str, *, template: str | None = None,
        clone_target: str | None = None,
    ) -> VmInfo:
        """Add the VM (state CLONING), wait ``createvm_max_time``, then mark it RUNNING.

        Raises PermanentProviderError for a pool this provider does not serve, a transient
        ProviderError when the name exists or on simulated failure (the VM is removed).
        """
        pool_config = self.context.pools.get(pool)
        if pool_config is None:
            raise PermanentProviderError(f"Pool {pool} does not exist for the provider {self.name}")
        self._check_placement(pool, pool_config, template)
        record: _Vm = {
            "name": vm,
            "hostname": vm,
            "domain": "dummy.local",
            "vm_template": template or pool_config.get("template"),
            "template": pool,
            "poolname": pool,
            "ready": False,
            "boottime": _now(),
            "powerstate": "PoweredOn",
            "vm_host": "HOST1",
            "dummy_state": "CLONING",
            "snapshots": [],
            "disks": [],
        }
        if self._path is not None:  # who clones it (until it is done), for processes sharing
            record["cloned_by"] = f"{socket.gethostname()}:{os.getpid()}"
        with self._lock:
            if vm in self._names:
                raise TransientProviderError(f"VM {vm} already exists on provider {self.name}")
            self._pools.setdefault(pool, []).append(record)
            self._names.add(vm)
            self._persist()
        try:
            self._simulate("createvm")
        except BaseException:
            with self._lock:
                self._remove(pool, vm)
                self._persist()
            raise
        with self._lock:
            record = self._find(pool, vm) or record  # re-read: another process may write
            record["dummy_state"] = "RUNNING"
            record.pop("cloned_by", None)
            self._persist()
            return self._info(record)

    def get_vm_ip_address(self, pool: str, vm: str) -> str | None:
        """A deterministic fake IP (:func:`fake_ip`), or None for an unknown VM."""
        with self._lock:
            return None if self._find(pool, vm) is None else fake_ip(vm)

    def vm_ready(self, pool: str, vm: str) -> bool:
        """False if unknown, in another pool or not RUNNING yet (never waits for a clone).

        Raises TransientProviderError on a simulated ``vmready_fail_percent`` failure.
        """
        with self._lock:
            record = self._find(pool, vm)
            if record is None or record.get("poolname") != pool:
                return False
            if record.get("ready"):
                return True
            if record.get("dummy_state") != "RUNNING":
                return False
        settle = float(self.settings.get("is_ready_timeout") or 0)
        if settle > 0:
            self._sleep(min(2.0, settle))
        self._maybe_fail("vmready_fail_percent")
        with self._lock:
            record = self._find(pool, vm)
            if record is None:
                return False
            record["ready"] = True
            self._persist()
        return True

    def destroy_vm(self, pool: str, vm: str) -> bool:
        """Shut down (if on) and remove the VM. True if already gone; False if the record
        found under ``pool`` claims another pool. Raises on simulated failure."""
        with self._lock:
            record = self._find(pool, vm)
            if record is None:
                return True
            if record.get("poolname") != pool:
                return False
            powered_on = record.get("powerstate") == "PoweredOn"
        if powered_on:
            self._delay("destroyvm_max_shutdown_time")
            with self._lock:
                record = self._find(pool, vm)
                if record is not None:
                    record["powerstate"] = "PoweredOff"
                    self._persist()
        self._simulate("destroyvm")
        with self._lock:
            self._remove(pool, vm)
            self._persist()
        return True

    def create_disk(self, pool: str, vm: str, size_gb: int) -> bool:
        """Record a ``size_gb`` disk; VmNotFoundError if unknown, raises on simulated failure."""
        return self._append(pool, vm, "createdisk", "disks", size_gb)

    def create_snapshot(self, pool: str, vm: str, snapshot_name: str) -> bool:
        """Record the snapshot name; VmNotFoundError if unknown, raises on simulated failure."""
        return self._append(pool, vm, "createsnapshot", "snapshots", snapshot_name)

    def revert_snapshot(self, pool: str, vm: str, snapshot_name: str) -> bool:
        """Whether ``snapshot_name`` is known; VmNotFoundError if the VM is unknown."""
        record = self._require(pool, vm)
        self._simulate("revertsnapshot")
        with self._lock:
            return snapshot_name in record["snapshots"]

    def migrate_vm(self, pool: str, vm: str, *, may_move: bool = True) -> MigrationResult:
        """Report the VM's simulated host and, when ``may_move``, maybe move it to another of
        ten (``migratevm_*`` knobs).

        VmNotFoundError if unknown; TransientProviderError on simulated failure (the VM stays).
        """
        current = self._require(pool, vm).get("vm_host")
        if not may_move or not self._roll("migratevm_couldmove_percent"):  # unset: never moves
            return MigrationResult(host=current)
        target = current
        while target == current:
            target = f"HOST{self._randint(1, _HOSTS)}"
        started = time.monotonic()
        self._simulate("migratevm")
        with self._lock:
            record = self._find(pool, vm)
            if record is not None:
                record["vm_host"] = target
                self._persist()
        return MigrationResult(host=target, moved_from=current,
                               seconds=time.monotonic() - started)

    def suspend_vm(self, pool: str, vm: str, *, mode: Capability = Capability.SUSPEND) -> bool:
        """Wait ``suspendvm_max_time``, then set powerstate ``Suspended`` (or ``PoweredOff``)
        and make :meth:`vm_ready` answer False until resumed. A VM already there (or powered
        off, asked to suspend) is True at once, without delay or failure; a missing one False.
        Raises TransientProviderError on a ``suspendvm_fail_percent`` failure (VM unchanged).
        """
        target = _STANDBY_STATES.get(mode)
        if target is None:
            raise PermanentProviderError(f"{mode!r} is not a standby mode")
        with self._lock:
            record = self._find(pool, vm)
            if record is None:
                return False
            now = record.get("powerstate")
            if now == target or now == "PoweredOff":
                return True
        self._simulate("suspendvm")
        return self._set_power(pool, vm, target)

    def resume_vm(self, pool: str, vm: str) -> bool:
        """Wait ``resumevm_max_time``, then set powerstate ``PoweredOn``; the first readiness
        probe afterwards is like a new VM's. A running VM is True at once, without delay or
        failure; a missing one False. Raises TransientProviderError on a
        ``resumevm_fail_percent`` failure (VM unchanged)."""
        with self._lock:
            record = self._find(pool, vm)
            if record is None:
                return False
            if record.get("powerstate") == "PoweredOn" and record.get("dummy_state") != "STANDBY":
                return True
        self._simulate("resumevm")
        return self._set_power(pool, vm, "PoweredOn")

    def _set_power(self, pool: str, vm: str, powerstate: str) -> bool:
        """Record ``powerstate`` (False when the VM vanished meanwhile); standby VMs are not
        ready, and a resumed one is probed afresh."""
        with self._lock:
            record = self._find(pool, vm)
            if record is None:
                return False
            record["powerstate"] = powerstate
            if powerstate == "PoweredOn":
                record["dummy_state"] = "RUNNING"
            else:
                record["dummy_state"] = "STANDBY"
                record["ready"] = False
            self._persist()
        return True

    def purge_unconfigured_resources(self, allowlist: Collection[str]) -> None:
        """Remove every VM filed under a pool this provider does not serve, unless that
        pool's name or the VM's own name is in ``allowlist`` (or ``resources_allowlist``)
        — the dummy's folders are its pools. Called once at start-up; no delays, no
        simulated failures."""
        extra = self.settings.get("resources_allowlist") or ()
        allowed = set(allowlist) | ({extra} if isinstance(extra, str) else set(extra))
        removed: list[str] = []
        with self._lock:
            for pool in [p for p in self._pools if p not in self.context.pools]:
                if pool in allowed:
                    continue
                kept = [vm for vm in self._pools[pool] if vm["name"] in allowed]
                removed.extend(vm["name"] for vm in self._pools[pool] if vm not in kept)
                if kept:
                    self._pools[pool] = kept
                else:
                    del self._pools[pool]
            self._names.difference_update(removed)
            if removed:
                self._persist()
        for name in removed:
            log.info("[-] [%s] purged '%s': it belongs to no configured pool", self.name, name)

    # -- extras --------------------------------------------------------------------------

    def inventory_snapshot(self) -> dict[str, list[str]]:
        """A copy of the inventory: pool name -> VM names, in creation order."""
        with self._lock:
            return {pool: [vm["name"] for vm in vms] for pool, vms in self._pools.items()}

    # -- helpers (the caller holds self._lock where noted) -------------------------------

    def _check_placement(
        self, pool: str, pool_config: Mapping[str, Any], template: str | None
    ) -> None:
        """Raise what a hypervisor would for a template/folder/datastore it does not have."""
        wanted = {
            "templates": (template or pool_config.get("template"), TemplateNotFoundError,
                          "template"),
            "folders": (pool_config.get("folder"), FolderNotFoundError, "folder"),
            "datastores": (pool_config.get("datastore"), DatastoreNotFoundError, "datastore"),
        }
        for knob, (value, error, what) in wanted.items():
            known = self.settings.get(knob)
            if known is not None and value not in known:
                raise error(f"{what} '{value}' not found for pool {pool} on provider {self.name}")

    def _find(self, pool: str, vm: str) -> _Vm | None:  # caller holds the lock
        return next((v for v in self._pools.get(pool, []) if v["name"] == vm), None)

    def _remove(self, pool: str, vm: str) -> None:  # caller holds the lock
        if pool in self._pools:
            before = len(self._pools[pool])
            self._pools[pool] = [v for v in self._pools[pool] if v["name"] != vm]
            if len(self._pools[pool]) < before:
                self._names.discard(vm)

    def _require(self, pool: str, vm: str) -> _Vm:
        with self._lock:
            record = self._find(pool, vm)
        if record is None:
            raise VmNotFoundError(f"VM {vm} does not exist in pool {pool} for {self.name}")
        return record

    def _append(self, pool: str, vm: str, op: str, field: str, value: object) -> bool:
        self._require(pool, vm)
        self._simulate(op)
        with self._lock:
            record = self._find(pool, vm)
            if record is None:
                raise VmNotFoundError(f"VM {vm} does not exist in pool {pool} for {self.name}")
            record[field].append(value)
            self._persist()
        return True

    def _persist(self) -> None:
        """Caller holds the lock: rewrite the file atomically, so writes never interleave."""
        if self._path is None:
            return
        text = yaml.dump({"pool": self._pools}, Dumper=_Dumper, default_flow_style=False,
                         sort_keys=False)
        fd, tmp = tempfile.mkstemp(dir=self._path.parent, prefix=f".{self._path.name}.")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            os.replace(tmp, self._path)
            self._seen = self._stat()
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp)
            raise

    @staticmethod
    def _info(record: Mapping[str, Any]) -> VmInfo:
        boottime = record.get("boottime")
        return VmInfo(
            name=record["name"],
            hostname=record.get("hostname"),
            template=record.get("template"),
            poolname=record.get("poolname"),
            boottime=None if boottime is None else str(boottime),
            powerstate=record.get("powerstate"),
            ip=fake_ip(record["name"]),
            host=record.get("vm_host"),
            snapshots=tuple(record.get("snapshots") or ()),
        )

    def _randint(self, low: int, high: int) -> int:
        with self._rng_lock:
            return self._rng.randint(low, high)

    def _roll(self, knob: str) -> bool:
        """True with probability ``settings[knob]`` percent (False when unset)."""
        percent = self.settings.get(knob)
        return percent is not None and self._randint(1, 100) <= float(percent)

    def _maybe_fail(self, knob: str) -> None:
        if self._roll(knob):
            raise TransientProviderError(f"Dummy Failure for {knob}")

    def _delay(self, knob: str) -> None:
        """Sleep as vmpooler does for ``settings[knob]``; see the module docstring."""
        max_time = float(self.settings.get(knob) or 0)
        if max_time <= 0:
            return
        with self._rng_lock:
            if max_time.is_integer():
                seconds = 1.0 + self._rng.randrange(int(max_time))
            else:
                seconds = self._rng.uniform(0, max_time)
        self._sleep(seconds)

    def _simulate(self, op: str) -> None:
        """Sleep for ``<op>_max_time``, then fail per ``<op>_fail_percent``."""
        self._delay(f"{op}_max_time")
        self._maybe_fail(f"{op}_fail_percent")
