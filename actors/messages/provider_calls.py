"""Pool, task and housekeeping actors ↔ provider actor: one provider call and its answer."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import pykka

__all__ = [
    "CallProvider",
    "CloneResult",
    "ProviderCallFinished",
    "ProviderFailure",
    "ProviderOp",
    "ReadyCheckResult",
    "RunningCheckResult",
]


class ProviderOp(enum.Enum):
    """The provider calls a :class:`~vmpooler.actors.provider.actor.ProviderActor` runs."""

    LIST_VMS = "list_vms"
    """Inventory of a pool. Result: ``tuple[str, ...]`` of VM names."""
    CLONE = "clone"
    """Check the name in DNS, create the VM, read its IP, create its DNS record.
    Result: ``CloneResult``."""
    CHECK_PENDING = "check_pending"
    """Is a pending VM ready? Result: ``bool``. A provider error's message says why not."""
    CHECK_READY = "check_ready"
    """Re-check a ready VM: args ``(check_hostname: bool,)``.
    Result: ``ReadyCheckResult``."""
    CHECK_RUNNING = "check_running"
    """Tag the user (once) and see whether a running VM still exists: args
    ``(tag_user: bool, user: str | None)``. Result: ``RunningCheckResult``."""
    DESTROY = "destroy"
    """Destroy the VM and delete its DNS record: args ``(fqdn: str | None,)``.
    Result: seconds taken (``float``)."""
    MIGRATE = "migrate"
    """Report where a checked-out VM runs, moving it when args ``(may_move: bool,)`` allow.
    Result: ``MigrationResult`` or None."""
    CREATE_DISK = "create_disk"
    """Args ``(size_gb: int,)``. Result: ``bool``."""
    CREATE_SNAPSHOT = "create_snapshot"
    """Args ``(name: str,)``. Result: ``bool``."""
    REVERT_SNAPSHOT = "revert_snapshot"
    """Args ``(name: str,)``. Result: ``bool``."""
    PREPARE_TEMPLATE = "prepare_template"
    """Create the template's delta disks. Result: ``None``."""
    LOG_FAILURE_EVENTS = "log_failure_events"
    """Log what the provider's platform recorded about a pending VM that failed (the
    provider's ``log_failure_events``; a no-op unless it is configured to). Result: ``None``."""
    PURGE_UNCONFIGURED = "purge_unconfigured"
    """Remove the provider's resources no configured pool uses, except args
    ``(allowlist: tuple[str, ...],)``; ``pool`` is "" and ``vm`` the provider's name.
    Result: ``None``."""


@dataclass(frozen=True, slots=True)
class ProviderFailure:
    """Why a provider call failed.

    ``permanent`` errors are not worth retrying (bad template, bad credentials...).
    ``timed_out`` means the call exceeded its deadline (it may still finish in its worker).
    ``busy`` means another call for the same VM was still running: nothing was attempted.
    ``circuit_open`` means the provider's circuit breaker refused the call.
    """

    message: str
    error_class: str
    permanent: bool = False
    timed_out: bool = False
    busy: bool = False
    circuit_open: bool = False


@dataclass(frozen=True, slots=True)
class CallProvider:
    """Pool actor → provider actor: run one provider call on the worker pool.

    The answer is one :class:`ProviderCallFinished` told to ``reply_to``. Calls for the same
    ``(pool, vm)`` never overlap: a second one while the first runs is answered at once with a
    ``busy`` failure.
    """

    op: ProviderOp
    pool: str
    vm: str | None
    reply_to: pykka.ActorRef[Any]
    args: tuple[Any, ...] = ()
    call_id: int = 0


@dataclass(frozen=True, slots=True)
class ProviderCallFinished:
    """Provider actor → the caller: the outcome of one :class:`CallProvider`.

    Exactly one of ``result`` (meaningful when ``failure`` is None) and ``failure`` applies.
    """

    op: ProviderOp
    pool: str
    vm: str | None
    call_id: int
    seconds: float
    result: Any = None
    failure: ProviderFailure | None = None


@dataclass(frozen=True, slots=True)
class CloneResult:
    """Result of :attr:`ProviderOp.CLONE`."""

    ip: str
    seconds: float


@dataclass(frozen=True, slots=True)
class ReadyCheckResult:
    """Result of :attr:`ProviderOp.CHECK_READY`: the hostname the VM reports, and readiness."""

    hostname: str | None
    ready: bool
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class RunningCheckResult:
    """Result of :attr:`ProviderOp.CHECK_RUNNING`."""

    exists: bool
    tagged: bool
