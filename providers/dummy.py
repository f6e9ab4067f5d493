"""The dummy provider: an in-memory (optionally file-backed) fake hypervisor.

It follows vmpooler 3.9.1's ``dummy.rb`` knob for knob, but implements our 3.x contract,
which vmpooler's own dummy does not: it has a fake IP address, a non-blocking readiness
probe and a ``migrate_vm``. It is also the template for writing a new provider.

Settings (all optional, under ``:providers: :<name>:``):

* ``filename`` — where the inventory is kept so that it outlives the process and several
  processes (managers sharing one Redis) share it: one small file per VM in the directory
  ``<filename>.d/`` (see :mod:`vmpooler.providers.dummy_store`), each change an atomic
  rename under an ``fcntl.flock`` on ``<filename>.lock`` held for that one VM's write, so a
  call costs the same whatever the inventory's size and no process loses another's update
  (ours; vmpooler's dummy rewrites one YAML file and keeps one process's copy). A YAML file
  at ``filename`` in vmpooler's format ``{'pool': {<pool>: [vm dicts]}}`` is merged into the
  directory at start (its VMs win) and renamed ``<filename>.migrated``; without either, a new
  inventory starts from ``initial_state`` (the same shape, for tests). Without
  ``filename`` the inventory lives in this process's memory.
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

import hashlib
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Collection, Mapping
from copy import deepcopy
from datetime import datetime
from pathlib import Path
from typing import Any

from vmpooler.providers.base import (
    Capability,
    MigrationResult,
    Provider,
    ProviderContext,
    VmInfo,
)
from vmpooler.providers.dummy_store import (
    DirectoryInventory,
    Inventory,
    MemoryInventory,
    parse_document,
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

log = logging.getLogger(__name__)

_Vm = dict[str, Any]
_HOSTS = 10  # simulated cluster size for migrations
_STANDBY_STATES = {Capability.SUSPEND: "Suspended", Capability.POWER_OFF: "PoweredOff"}


def fake_ip(name: str) -> str:
    """A deterministic private address for ``name``: ``192.168.<0-255>.<1-254>``."""
    digest = hashlib.sha256(name.encode()).digest()
    return f"192.168.{digest[0]}.{1 + digest[1] % 254}"


def _now() -> str:
    return datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %z")


def _set(**fields: Any) -> Callable[[_Vm], bool]:
    """An inventory edit that sets ``fields``."""
    def edit(record: _Vm) -> bool:
        record.update(fields)
        return True
    return edit


class DummyProvider(Provider):
    """A fake provider for development and tests; see the module docstring for its knobs.

    Thread-safe: each change of a VM is one atomic step of the inventory
    (:mod:`vmpooler.providers.dummy_store`); simulated delays run outside it, so calls for
    different VMs overlap as they would on a real hypervisor.
    """

    def __init__(
        self,
        context: ProviderContext,
        *,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``rng`` and ``sleep`` are injectable so tests are deterministic and never wait.

        Raises PermanentProviderError when ``initial_state`` or a file at ``filename`` has
        the wrong shape or cannot be parsed, or the inventory's directory cannot be made.
        """
        super().__init__(context)
        self._rng = rng if rng is not None else random.Random()
        self._rng_lock = threading.Lock()
        self._sleep = sleep
        seed = parse_document(deepcopy(self.settings.get("initial_state")), "initial_state")
        filename = self.settings.get("filename")
        self._inventory: Inventory = (
            DirectoryInventory(Path(filename), seed) if filename else MemoryInventory(seed))

    # -- contract ------------------------------------------------------------------------

    @property
    def capabilities(self) -> frozenset[Capability]:
        """Both standby modes: suspended and powered off."""
        return frozenset(_STANDBY_STATES)

    def vms_in_pool(self, pool: str) -> list[str]:
        """Names of the pool's VMs, including ones still cloning (in creation order in
        memory, by name with ``filename``)."""
        return self._inventory.names(pool)

    def get_vm(self, pool: str, vm: str) -> VmInfo | None:
        """The VM's info, or None; may power it off or rename it (``getvm_*`` knobs)."""
        poweroff = "getvm_poweroff_percent" in self.settings
        rename = "getvm_rename_percent" in self.settings
        if not (poweroff or rename):
            record = self._inventory.get(pool, vm)
            return None if record is None else self._info(record)

        def roll(record: _Vm) -> bool:
            changed = False
            if record.get("powerstate") == "PoweredOn" and self._roll("getvm_poweroff_percent"):
                record["powerstate"] = "PoweredOff"
                changed = True
            if record.get("hostname") == record["name"] and self._roll("getvm_rename_percent"):
                record["hostname"] = "DUMMY" + record["name"]
                changed = True
            return changed

        found = self._inventory.change(pool, vm, roll)
        return None if found is None else self._info(found)

    def create_vm(
        self, pool: str, vm: str, *, template: str | None = None,
        clone_target: str | None = None,
    ) -> VmInfo:
        """Add the VM (state CLONING), wait ``createvm_max_time``, then mark it RUNNING.

        Raises PermanentProviderError for a pool this provider does not serve, a transient
        ProviderError when the name exists (in any pool) or on simulated failure (the VM is
        removed).
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
        if "filename" in self.settings:  # who clones it (until it is done), for processes
            record["cloned_by"] = f"{socket.gethostname()}:{os.getpid()}"
        if not self._inventory.add(pool, record):
            raise TransientProviderError(f"VM {vm} already exists on provider {self.name}")
        try:
            self._simulate("createvm")
        except BaseException:
            self._inventory.remove(pool, vm)
            raise

        def running(found: _Vm) -> bool:
            found["dummy_state"] = "RUNNING"
            found.pop("cloned_by", None)
            return True

        return self._info(self._inventory.change(pool, vm, running) or record)

    def get_vm_ip_address(self, pool: str, vm: str) -> str | None:
        """A deterministic fake IP (:func:`fake_ip`), or None for an unknown VM."""
        return None if self._inventory.get(pool, vm) is None else fake_ip(vm)

    def vm_ready(self, pool: str, vm: str) -> bool:
        """False if unknown, in another pool or not RUNNING yet (never waits for a clone).

        Raises TransientProviderError on a simulated ``vmready_fail_percent`` failure.
        """
        record = self._inventory.get(pool, vm)
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
        return self._inventory.change(pool, vm, _set(ready=True)) is not None

    def destroy_vm(self, pool: str, vm: str) -> bool:
        """Shut down (if on) and remove the VM. True if already gone; False if the record
        found under ``pool`` claims another pool. Raises on simulated failure."""
        record = self._inventory.get(pool, vm)
        if record is None:
            return True
        if record.get("poolname") != pool:
            return False
        if record.get("powerstate") == "PoweredOn":
            self._delay("destroyvm_max_shutdown_time")
            self._inventory.change(pool, vm, _set(powerstate="PoweredOff"))
        self._simulate("destroyvm")
        self._inventory.remove(pool, vm)
        return True

    def create_disk(self, pool: str, vm: str, size_gb: int) -> bool:
        """Record a ``size_gb`` disk; VmNotFoundError if unknown, raises on simulated failure."""
        return self._append(pool, vm, "createdisk", "disks", size_gb)

    def create_snapshot(self, pool: str, vm: str, snapshot_name: str) -> bool:
        """Record the snapshot name; VmNotFoundError if unknown, raises on simulated failure."""
        return self._append(pool, vm, "createsnapshot", "snapshots", snapshot_name)

    def revert_snapshot(self, pool: str, vm: str, snapshot_name: str) -> bool:
        """Whether ``snapshot_name`` is known; VmNotFoundError if the VM is unknown."""
        self._require(pool, vm)
        self._simulate("revertsnapshot")
        record = self._inventory.get(pool, vm)
        return record is not None and snapshot_name in record["snapshots"]

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
        self._inventory.change(pool, vm, _set(vm_host=target))
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
        record = self._inventory.get(pool, vm)
        if record is None:
            return False
        if record.get("powerstate") in (target, "PoweredOff"):
            return True
        self._simulate("suspendvm")
        return self._set_power(pool, vm, target)

    def resume_vm(self, pool: str, vm: str) -> bool:
        """Wait ``resumevm_max_time``, then set powerstate ``PoweredOn``; the first readiness
        probe afterwards is like a new VM's. A running VM is True at once, without delay or
        failure; a missing one False. Raises TransientProviderError on a
        ``resumevm_fail_percent`` failure (VM unchanged)."""
        record = self._inventory.get(pool, vm)
        if record is None:
            return False
        if record.get("powerstate") == "PoweredOn" and record.get("dummy_state") != "STANDBY":
            return True
        self._simulate("resumevm")
        return self._set_power(pool, vm, "PoweredOn")

    def _set_power(self, pool: str, vm: str, powerstate: str) -> bool:
        """Record ``powerstate`` (False when the VM vanished meanwhile); standby VMs are not
        ready, and a resumed one is probed afresh."""
        if powerstate == "PoweredOn":
            edit = _set(powerstate=powerstate, dummy_state="RUNNING")
        else:
            edit = _set(powerstate=powerstate, dummy_state="STANDBY", ready=False)
        return self._inventory.change(pool, vm, edit) is not None

    def purge_unconfigured_resources(self, allowlist: Collection[str]) -> None:
        """Remove every VM filed under a pool this provider does not serve, unless that
        pool's name or the VM's own name is in ``allowlist`` (or ``resources_allowlist``)
        — the dummy's folders are its pools. Called once at start-up; no delays, no
        simulated failures."""
        extra = self.settings.get("resources_allowlist") or ()
        allowed = set(allowlist) | ({extra} if isinstance(extra, str) else set(extra))
        removed: list[str] = []
        for pool in self._inventory.pools():
            if pool in self.context.pools or pool in allowed:
                continue
            for name in self._inventory.names(pool):
                if name not in allowed and self._inventory.remove(pool, name):
                    removed.append(name)
            self._inventory.drop_pool(pool)
        for name in removed:
            log.info("[-] [%s] purged '%s': it belongs to no configured pool", self.name, name)

    # -- extras --------------------------------------------------------------------------

    def inventory_snapshot(self) -> dict[str, list[str]]:
        """The inventory: pool name -> VM names (in the order of :meth:`vms_in_pool`)."""
        return {pool: self._inventory.names(pool) for pool in self._inventory.pools()}

    # -- helpers -------------------------------------------------------------------------

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

    def _require(self, pool: str, vm: str) -> _Vm:
        record = self._inventory.get(pool, vm)
        if record is None:
            raise VmNotFoundError(f"VM {vm} does not exist in pool {pool} for {self.name}")
        return record

    def _append(self, pool: str, vm: str, op: str, field: str, value: object) -> bool:
        self._require(pool, vm)
        self._simulate(op)

        def append(record: _Vm) -> bool:
            record.setdefault(field, []).append(value)
            return True

        if self._inventory.change(pool, vm, append) is None:
            raise VmNotFoundError(f"VM {vm} does not exist in pool {pool} for {self.name}")
        return True

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
