"""The provider contract: what the core may call on a provider, and what it may rely on.

Threading: the core calls every method from a worker thread of the provider's bounded pool
(at most :attr:`Provider.max_concurrent_calls` at once), each under a timeout. It never runs
two calls for the *same* VM at once, but calls for different VMs run concurrently, so
implementations must be thread-safe. Errors: raise :class:`~vmpooler.providers.errors.ProviderError`
subclasses; :func:`~vmpooler.providers.errors.is_permanent` decides whether the core retries.
Providers never touch Redis, actors or the web layer: they return values and raise.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from vmpooler.providers.errors import PermanentProviderError

__all__ = [
    "Capability",
    "ConnectionPoolHealth",
    "MetricsSink",
    "MigrationResult",
    "NoMetrics",
    "Provider",
    "ProviderContext",
    "VmInfo",
]


class Capability(enum.Enum):
    """An optional operation a provider declares it can do (:attr:`Provider.capabilities`);
    the core asks a provider only for what it declares.

    ``SUSPEND``: :meth:`Provider.suspend_vm` with ``mode=SUSPEND`` (memory kept, resumed in
    seconds), and :meth:`Provider.resume_vm` of a suspended VM. ``POWER_OFF``: the same with
    a powered-off standby VM (``mode=POWER_OFF``; resuming boots it).
    """

    SUSPEND = "suspend"
    POWER_OFF = "power_off"


@dataclass(frozen=True, slots=True)
class VmInfo:
    """A provider's normalised view of one VM; the core never parses provider objects.

    Only ``name`` is required. ``hostname`` is what the guest reports (a mismatch with
    ``name`` evicts a ready VM); ``boottime`` is a string; ``powerstate`` is the provider's
    own word for it (vSphere: ``poweredOn``/``poweredOff``/``suspended``; the dummy, like
    vmpooler's: ``PoweredOn``/``PoweredOff``, and ``Suspended``); ``host`` is the
    hypervisor host running it.
    """

    name: str
    hostname: str | None = None
    template: str | None = None
    poolname: str | None = None
    boottime: str | None = None
    powerstate: str | None = None
    ip: str | None = None
    host: str | None = None
    snapshots: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MigrationResult:
    """What :meth:`Provider.migrate_vm` found and did.

    ``host`` is the host the VM runs on afterwards (None when unknown); ``moved_from`` is the
    host it left, or None when it was not moved; ``seconds`` is how long the move took.
    """

    host: str | None
    moved_from: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class ConnectionPoolHealth:
    """A snapshot of a provider's pool of hypervisor connections (sessions).

    ``size`` is the most it may hold, ``available`` how many more calls could start now
    without waiting (idle sessions plus sessions not yet opened), ``in_use`` how many are
    checked out, ``waiting`` how many callers wait for one.
    """

    size: int
    available: int
    in_use: int
    waiting: int

    @property
    def utilization(self) -> float:
        """Share of the pool in use, in percent (0 for an empty pool)."""
        return 100.0 * self.in_use / self.size if self.size else 0.0


class MetricsSink(Protocol):
    """The metrics a provider may emit (the core's metrics object satisfies it).

    Names follow vmpooler's without the variable suffix, which goes in ``tags``; ``timing``
    takes seconds. Calls never raise and never block for long.
    """

    def increment(
        self, name: str, *, tags: Mapping[str, str] | None = None, value: int = 1
    ) -> None: ...

    def gauge(self, name: str, value: float, *, tags: Mapping[str, str] | None = None) -> None: ...

    def timing(
        self, name: str, seconds: float, *, tags: Mapping[str, str] | None = None
    ) -> None: ...


class NoMetrics:
    """A :class:`MetricsSink` that drops everything (the default of a context)."""

    def increment(
        self, name: str, *, tags: Mapping[str, str] | None = None, value: int = 1
    ) -> None:
        pass

    def gauge(self, name: str, value: float, *, tags: Mapping[str, str] | None = None) -> None:
        pass

    def timing(
        self, name: str, seconds: float, *, tags: Mapping[str, str] | None = None
    ) -> None:
        pass


_NO_METRICS = NoMetrics()


@dataclass(frozen=True)
class ProviderContext:
    """Everything a provider is given at construction, as plain data (read-only by convention).

    ``metrics`` is where the provider's own metrics go (connections opened, waits); it
    defaults to a sink that drops everything.
    """

    name: str  # the provider's configured name, e.g. "dummy" or "vsphere-east"
    settings: Mapping[str, Any]  # its `:providers: :<name>:` section
    pools: Mapping[str, Mapping[str, Any]]  # raw config of the pools it serves, by pool name
    global_settings: Mapping[str, Any]  # the `:config:` section
    dns_domains: Mapping[str, str | None]  # pool name -> DNS domain
    metrics: MetricsSink = _NO_METRICS


_NO_SUPPORT = "provider {name!r} does not support {what}"


class Provider(ABC):
    """Base class of every provider. Subclasses implement the six abstract methods.

    A provider may be discarded and rebuilt when configuration changes; it must keep no
    state it cannot rebuild from the hypervisor (or, for the dummy, its file).
    """

    def __init__(self, context: ProviderContext) -> None:
        self.context = context

    @property
    def name(self) -> str:
        """The provider's configured name (its key under ``:providers:``)."""
        return self.context.name

    @property
    def settings(self) -> Mapping[str, Any]:
        """This provider's own configuration section."""
        return self.context.settings

    @property
    def skip_dns_check_before_creating_vm(self) -> bool:
        """True when the core must not check that a new hostname is absent from DNS."""
        return bool(self.settings.get("skip_dns_check_before_creating_vm", False))

    @property
    def max_concurrent_calls(self) -> int:
        """How many calls the core may run at once against this provider (>= 1).

        From setting ``connection_pool_size``; default 4.
        """
        return max(1, int(self.settings.get("connection_pool_size") or 4))

    @property
    def capabilities(self) -> frozenset[Capability]:
        """The optional operations this provider can do (see :class:`Capability`); the core
        calls :meth:`suspend_vm` / :meth:`resume_vm` only for a mode listed here.

        Default: empty. Must return at once (no network) and not change while the provider
        lives (a configuration change rebuilds the provider).
        """
        return frozenset()

    @property
    def probe_timeout(self) -> float:
        """The longest a readiness probe may take by design, in seconds (its own connect
        timeout, say). The core never times a check out sooner. Default 5.
        """
        return 5.0

    # -- required ------------------------------------------------------------------------

    @abstractmethod
    def vms_in_pool(self, pool: str) -> list[str]:
        """Names of every VM the provider holds for ``pool`` (including ones still cloning).

        Read-only, worker thread. Raising aborts the pool's check; any ProviderError is
        treated as transient unless classified permanent.
        """

    @abstractmethod
    def get_vm(self, pool: str, vm: str) -> VmInfo | None:
        """The VM's current :class:`VmInfo`, or None when it does not exist in ``pool``.

        Worker thread; concurrent for different VMs. Raise only when the provider cannot
        answer (transient), never for a missing VM.
        """

    @abstractmethod
    def create_vm(
        self, pool: str, vm: str, *, template: str | None = None,
        clone_target: str | None = None,
    ) -> VmInfo:
        """Clone VM ``vm`` for ``pool`` and block until it exists; return its info.

        ``template`` and ``clone_target`` are the ones in effect for the pool (an operator's
        override, else the pool's configuration); None means "as configured".

        Worker thread, may take minutes (the core applies the timeout). On failure raise a
        ProviderError and leave no VM behind (best effort); bad template/folder/credentials
        are permanent, the rest transient. Not idempotent: the core picks a fresh name.
        """

    @abstractmethod
    def get_vm_ip_address(self, pool: str, vm: str) -> str | None:
        """The VM's IP address, or None when it has none (yet) or does not exist.

        NOTE the (pool, vm) order, unlike vmpooler's (vm, pool). Worker thread; transient
        errors only. None right after :meth:`create_vm` makes the core fail the clone.
        """

    @abstractmethod
    def vm_ready(self, pool: str, vm: str) -> bool:
        """Readiness probe: True when the VM accepts connections, False otherwise.

        Must return promptly (within :attr:`probe_timeout`). False for an unknown VM or one
        in another pool, unless the probe cannot tell (vSphere's ``ssh`` probe never asks
        vCenter): then the error below. May raise a ProviderError whose message says why it
        is not ready; the core stores that
        message as the VM's ``open_socket_error`` and treats it as "not ready". Worker thread.
        """

    @abstractmethod
    def destroy_vm(self, pool: str, vm: str) -> bool:
        """Power off and delete the VM; True when it is gone afterwards.

        Idempotent: True also when the VM was already gone. Raise a ProviderError when the
        deletion failed (transient unless classified permanent). Worker thread.
        """

    # -- defaulted -----------------------------------------------------------------------

    def create_disk(self, pool: str, vm: str, size_gb: int) -> bool:
        """Attach a new ``size_gb`` GB disk; True on success. Worker thread.

        Default: raises PermanentProviderError ("does not support disks").
        """
        raise PermanentProviderError(_NO_SUPPORT.format(name=self.name, what="disks"))

    def create_snapshot(self, pool: str, vm: str, snapshot_name: str) -> bool:
        """Snapshot the VM as ``snapshot_name``; True on success. Worker thread.

        Default: raises PermanentProviderError ("does not support snapshots").
        """
        raise PermanentProviderError(_NO_SUPPORT.format(name=self.name, what="snapshots"))

    def revert_snapshot(self, pool: str, vm: str, snapshot_name: str) -> bool:
        """Revert the VM to ``snapshot_name``; False when no such snapshot. Worker thread.

        Default: raises PermanentProviderError ("does not support snapshots").
        """
        raise PermanentProviderError(_NO_SUPPORT.format(name=self.name, what="snapshots"))

    def migrate_vm(self, pool: str, vm: str, *, may_move: bool = True) -> MigrationResult | None:
        """Report which host a just-checked-out VM runs on and, when ``may_move``, move it to
        a better one if the provider finds one. Errors are only logged by the core.

        The core passes ``may_move=False`` when migrations are off (``migration_limit`` unset
        or 0) or the limit is reached; it keeps the count of moves in flight itself.
        Default: None (nothing known, nothing moved). Worker thread.
        """
        return None

    def suspend_vm(self, pool: str, vm: str, *, mode: Capability = Capability.SUSPEND) -> bool:
        """Put a running VM on standby: suspend it (``mode=SUSPEND``) or power it off
        (``mode=POWER_OFF``), and block until it is in that state. Worker thread.

        What a caller may rely on: True means the VM is now in the standby state asked for
        (:meth:`get_vm`'s ``powerstate`` then reads vSphere ``suspended``/``poweredOff``, the
        dummy ``Suspended``/``PoweredOff``) and :meth:`vm_ready` answers False until it is
        resumed. Idempotent: a VM already in that state is success, at once. A VM already
        powered off when asked to suspend is success too and stays powered off (it cannot
        be suspended without booting); asked to power off, a suspended VM is powered off.
        False when the VM does not exist in ``pool`` (as :meth:`get_vm`'s None; nothing was
        done). Failures raise a ProviderError, transient unless classified permanent; the VM
        may then be in either state. Only for a mode in :attr:`capabilities`.

        Default: raises PermanentProviderError ("does not support standby VMs").
        """
        raise PermanentProviderError(_NO_SUPPORT.format(name=self.name, what="standby VMs"))

    def resume_vm(self, pool: str, vm: str) -> bool:
        """Bring a standby VM (suspended or powered off) back to running, and block until it
        is powered on (not until its guest answers: :meth:`vm_ready` tells). Worker thread.

        What a caller may rely on: True means the VM is powered on (``powerstate``
        ``poweredOn`` / ``PoweredOn``). Idempotent: a running VM is success, at once. False
        when the VM does not exist in ``pool`` (nothing was done). Failures raise a
        ProviderError, transient unless classified permanent. Only for a provider whose
        :attr:`capabilities` are not empty.

        Default: raises PermanentProviderError ("does not support standby VMs").
        """
        raise PermanentProviderError(_NO_SUPPORT.format(name=self.name, what="standby VMs"))

    def tag_vm_user(self, pool: str, vm: str, user: str | None) -> bool:
        """Record the checking-out user on the VM; True on success. Default: no-op, True.

        Called once per running VM, from a worker thread; must be idempotent.
        """
        return True

    def create_template_delta_disks(  # noqa: B027 (optional hook, no-op by default)
        self, pool: str, *, template: str | None = None
    ) -> None:
        """Prepare the pool's template (``template``: an operator's override, else the
        configured one) for linked clones. Default: no-op.

        Raise a ProviderError on failure (the core logs it; not fatal). Worker thread.
        """

    def log_failure_events(self, pool: str, vm: str) -> None:  # noqa: B027 (optional hook)
        """Log what the provider's platform recorded about a pending VM that failed (not
        ready before the pool's ``timeout``), when the provider is configured to. Default:
        no-op. Never raises. Worker thread.
        """

    def purge_unconfigured_resources(self, allowlist: Collection[str]) -> None:
        """Delete VMs/folders the configuration does not mention, except ``allowlist``.

        Default: raises PermanentProviderError (not supported). Called at startup only.
        """
        raise PermanentProviderError(
            _NO_SUPPORT.format(name=self.name, what="purging unconfigured resources")
        )

    def vm_exists(self, pool: str, vm: str) -> bool:
        """True when :meth:`get_vm` finds the VM. Same thread and error rules as get_vm."""
        return self.get_vm(pool, vm) is not None

    def connection_pool_health(self) -> ConnectionPoolHealth | None:
        """The state of the provider's connection pool, or None when it keeps none (default).

        Called from the provider actor's thread every ``connection_pool_monitor_interval``
        seconds: it must return at once (no network) and be thread-safe.
        """
        return None

    def close(self) -> None:  # noqa: B027 (optional hook, no-op by default)
        """Release connections. Default: no-op. Called once, after the last call returns."""
