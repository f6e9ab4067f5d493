"""Pool, task and housekeeping actors ↔ provider actor: one provider call and its answer.

A call carries one request type per operation (:data:`ProviderRequest`), its arguments by
name; each request names the result types it answers (``answers``), which the provider
actor checks on the worker thread, and the caller reads the answer's result with
:meth:`ProviderCallFinished.result_of`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import pykka

from vmpooler.providers.base import Capability, MigrationResult

__all__ = [
    "CallProvider",
    "CheckPending",
    "CheckReady",
    "CheckRunning",
    "CloneResult",
    "CloneVm",
    "CreateDisk",
    "CreateSnapshot",
    "DestroyVm",
    "ListVms",
    "LogFailureEvents",
    "MigrateVm",
    "PrepareTemplate",
    "ProviderCallFinished",
    "ProviderFailure",
    "ProviderOp",
    "ProviderRequest",
    "ProviderResult",
    "PurgeUnconfigured",
    "ReadyCheckResult",
    "ResumeVm",
    "RevertSnapshot",
    "RunningCheckResult",
    "SuspendVm",
]


class ProviderOp(enum.Enum):
    """The provider calls a :class:`~vmpooler.actors.provider.provider_actor.ProviderActor`
    runs: the ``op`` of each :data:`ProviderRequest` type, which carries the call's arguments
    by name and says what its result is."""

    LIST_VMS = "list_vms"  # ListVms
    CLONE = "clone"  # CloneVm
    CHECK_PENDING = "check_pending"  # CheckPending
    CHECK_READY = "check_ready"  # CheckReady
    CHECK_RUNNING = "check_running"  # CheckRunning
    DESTROY = "destroy"  # DestroyVm
    MIGRATE = "migrate"  # MigrateVm
    CREATE_DISK = "create_disk"  # CreateDisk
    CREATE_SNAPSHOT = "create_snapshot"  # CreateSnapshot
    REVERT_SNAPSHOT = "revert_snapshot"  # RevertSnapshot
    PREPARE_TEMPLATE = "prepare_template"  # PrepareTemplate (``vm`` is "template:<name>")
    LOG_FAILURE_EVENTS = "log_failure_events"  # LogFailureEvents
    PURGE_UNCONFIGURED = "purge_unconfigured"  # PurgeUnconfigured (``pool`` "", ``vm`` the
    # provider's name)
    SUSPEND = "suspend"  # SuspendVm (suspend or power off: a standby VM)
    RESUME = "resume"  # ResumeVm


@dataclass(frozen=True, slots=True)
class ProviderFailure:
    """Why a provider call failed.

    ``permanent`` errors are not worth retrying (bad template, bad credentials...).
    ``timed_out`` means the call exceeded its deadline (it may still finish in its worker).
    ``busy`` means another call for the same VM was still running: nothing was attempted.
    ``circuit_open`` means the provider's circuit breaker refused the call; it lets calls
    through again in ``retry_after`` seconds.
    """

    message: str
    error_class: str
    permanent: bool = False
    timed_out: bool = False
    busy: bool = False
    circuit_open: bool = False
    retry_after: float = 0.0


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


ProviderResult = (tuple[str, ...] | CloneResult | bool | ReadyCheckResult | RunningCheckResult
                  | float | MigrationResult | None)
"""What a provider call answers: the result type its :data:`ProviderRequest` names."""


# -- one request type per provider operation ------------------------------------------------
@dataclass(frozen=True, slots=True)
class ListVms:
    """The pool's inventory. Result: ``tuple[str, ...]`` of VM names."""

    op: ClassVar[ProviderOp] = ProviderOp.LIST_VMS
    answers: ClassVar[tuple[type, ...]] = (tuple,)


@dataclass(frozen=True, slots=True)
class CloneVm:
    """Clone the VM from ``template`` into ``target`` (None: the pool's own).
    Result: :class:`CloneResult`."""

    op: ClassVar[ProviderOp] = ProviderOp.CLONE
    answers: ClassVar[tuple[type, ...]] = (CloneResult,)
    template: str | None = None
    target: str | None = None


@dataclass(frozen=True, slots=True)
class CheckPending:
    """Is the pending VM ready? Result: ``bool``."""

    op: ClassVar[ProviderOp] = ProviderOp.CHECK_PENDING
    answers: ClassVar[tuple[type, ...]] = (bool,)


@dataclass(frozen=True, slots=True)
class CheckReady:
    """Re-check a ready VM, its hostname too when ``check_hostname``.
    Result: :class:`ReadyCheckResult`."""

    op: ClassVar[ProviderOp] = ProviderOp.CHECK_READY
    answers: ClassVar[tuple[type, ...]] = (ReadyCheckResult,)
    check_hostname: bool = True


@dataclass(frozen=True, slots=True)
class CheckRunning:
    """Tag ``user`` on a running VM when ``tag_user``; does it still exist?
    Result: :class:`RunningCheckResult`."""

    op: ClassVar[ProviderOp] = ProviderOp.CHECK_RUNNING
    answers: ClassVar[tuple[type, ...]] = (RunningCheckResult,)
    tag_user: bool = False
    user: str | None = None


@dataclass(frozen=True, slots=True)
class DestroyVm:
    """Destroy the VM and delete the DNS record of ``fqdn``. Result: seconds (``float``)."""

    op: ClassVar[ProviderOp] = ProviderOp.DESTROY
    answers: ClassVar[tuple[type, ...]] = (float, int)
    fqdn: str | None = None


@dataclass(frozen=True, slots=True)
class MigrateVm:
    """Report where a checked-out VM runs, moving it when ``may_move``.
    Result: :class:`~vmpooler.providers.base.MigrationResult` or None."""

    op: ClassVar[ProviderOp] = ProviderOp.MIGRATE
    answers: ClassVar[tuple[type, ...]] = (MigrationResult, type(None))
    may_move: bool = False


@dataclass(frozen=True, slots=True)
class CreateDisk:
    """Add a disk of ``size_gb``. Result: ``bool``."""

    op: ClassVar[ProviderOp] = ProviderOp.CREATE_DISK
    answers: ClassVar[tuple[type, ...]] = (bool,)
    size_gb: int


@dataclass(frozen=True, slots=True)
class CreateSnapshot:
    """Snapshot the VM as ``name``. Result: ``bool``."""

    op: ClassVar[ProviderOp] = ProviderOp.CREATE_SNAPSHOT
    answers: ClassVar[tuple[type, ...]] = (bool,)
    name: str


@dataclass(frozen=True, slots=True)
class RevertSnapshot:
    """Revert the VM to snapshot ``name``. Result: ``bool``."""

    op: ClassVar[ProviderOp] = ProviderOp.REVERT_SNAPSHOT
    answers: ClassVar[tuple[type, ...]] = (bool,)
    name: str


@dataclass(frozen=True, slots=True)
class PrepareTemplate:
    """Create the delta disks of ``template`` (None: the pool's). Result: None."""

    op: ClassVar[ProviderOp] = ProviderOp.PREPARE_TEMPLATE
    answers: ClassVar[tuple[type, ...]] = ()
    template: str | None = None


@dataclass(frozen=True, slots=True)
class LogFailureEvents:
    """Log what the platform recorded about a pending VM that failed. Result: None."""

    op: ClassVar[ProviderOp] = ProviderOp.LOG_FAILURE_EVENTS
    answers: ClassVar[tuple[type, ...]] = ()


@dataclass(frozen=True, slots=True)
class PurgeUnconfigured:
    """Remove the provider's resources no configured pool uses, except ``allowlist``.
    Result: None."""

    op: ClassVar[ProviderOp] = ProviderOp.PURGE_UNCONFIGURED
    answers: ClassVar[tuple[type, ...]] = ()
    allowlist: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SuspendVm:
    """Put the VM on standby: suspended, or powered off with ``mode`` POWER_OFF (ask only for
    a mode in the provider's ``capabilities``). Result: ``bool`` (False: no such VM)."""

    op: ClassVar[ProviderOp] = ProviderOp.SUSPEND
    answers: ClassVar[tuple[type, ...]] = (bool,)
    mode: Capability = Capability.SUSPEND


@dataclass(frozen=True, slots=True)
class ResumeVm:
    """Power a standby VM on again. Result: ``bool`` (False: no such VM)."""

    op: ClassVar[ProviderOp] = ProviderOp.RESUME
    answers: ClassVar[tuple[type, ...]] = (bool,)


ProviderRequest = (ListVms | CloneVm | CheckPending | CheckReady | CheckRunning | DestroyVm
                   | MigrateVm | CreateDisk | CreateSnapshot | RevertSnapshot | PrepareTemplate
                   | LogFailureEvents | PurgeUnconfigured | SuspendVm | ResumeVm)
"""What a :class:`CallProvider` asks for: one frozen type per :class:`ProviderOp`, with its
arguments by name. ``answers`` lists the types its result may have; empty: the result is
dropped and the answer's is None."""


@dataclass(frozen=True, slots=True)
class CallProvider:
    """Pool actor → provider actor: run one provider call on the worker pool.

    The answer is one :class:`ProviderCallFinished` told to ``reply_to``. Calls for the same
    ``(pool, vm)`` never overlap: a second one while the first runs is answered at once with a
    ``busy`` failure.
    """

    request: ProviderRequest
    pool: str
    vm: str | None
    reply_to: pykka.ActorRef[Any]
    call_id: int = 0
    traceparent: str = ""  # the caller's span: the call's span hangs under it ('': none)

    @property
    def op(self) -> ProviderOp:
        """The operation asked for (the request's)."""
        return self.request.op


_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class ProviderCallFinished:
    """Provider actor → the caller: the outcome of one :class:`CallProvider`.

    Exactly one of ``result`` (meaningful when ``failure`` is None) and ``failure`` applies;
    the result is of the type the request names (:meth:`result_of` checks it).
    """

    op: ProviderOp
    pool: str
    vm: str | None
    call_id: int
    seconds: float
    result: ProviderResult = None
    failure: ProviderFailure | None = None

    def result_of(self, kind: type[_R]) -> _R:
        """The result as a ``kind``; ``TypeError`` (naming the operation) if it is not one."""
        if not isinstance(self.result, kind):
            raise TypeError(f"{self.op.value} answered {type(self.result).__name__}, "
                            f"not {kind.__name__}")
        return self.result
