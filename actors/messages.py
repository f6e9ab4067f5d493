"""Messages between actors: frozen, slotted dataclasses.

Commands are imperative (``RunPoolCycle``), events are past tense (``ProviderCallFinished``).
Durations are seconds. Messages carry ids and values, plus, where an answer is expected,
the ``reply_to`` ActorRef the answer goes to — never clients or provider objects.
Actors find each other by name in the actor directory at send time; the names are
``pool:<pool>``, ``provider:<provider>``, ``tasks``, ``ondemand`` and
:func:`request_actor_name`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import pykka

from vmpooler.providers.base import MigrationResult

__all__ = [
    "ActorCrashed",
    "ActorStopped",
    "CallProvider",
    "CheckPending",
    "CheckReady",
    "CheckRunning",
    "ClaimRequest",
    "CloneForRequest",
    "CloneSlotFreed",
    "CloneVm",
    "CreateDisk",
    "CreateSnapshot",
    "DestroyVm",
    "ListVms",
    "LogFailureEvents",
    "MigrateVm",
    "PoolChanged",
    "PoolHandedOver",
    "PoolPurged",
    "PrepareTemplate",
    "ProviderCallFinished",
    "ProviderFailure",
    "ProviderOp",
    "ProviderRequest",
    "ProviderResult",
    "PurgeStaleVms",
    "PurgeUnconfigured",
    "RecordHistory",
    "RefillPool",
    "RenewLease",
    "RequestChanged",
    "RequestCloneAnswered",
    "RequestExpired",
    "RequestFinished",
    "RequestSlotFreed",
    "RequestVmCloning",
    "RequestVmFailed",
    "RequestVmReady",
    "RestartActor",
    "RevertSnapshot",
    "RunHealthCheck",
    "RunPoolCycle",
    "RunPurge",
    "SendHeartbeat",
    "StartDrain",
    "SweepRequests",
    "TasksQueued",
    "WantCloneSlot",
    "WantRequestVms",
    "request_actor_name",
]


def request_actor_name(request_id: str) -> str:
    """The name a request's actor is registered under in the actor directory."""
    return f"request:{request_id}"


class ProviderOp(enum.Enum):
    """The provider calls a :class:`~vmpooler.actors.provider.actor.ProviderActor` runs: the
    ``op`` of each :data:`ProviderRequest` type, which carries the call's arguments by name
    and says what its result is."""

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


ProviderRequest = (ListVms | CloneVm | CheckPending | CheckReady | CheckRunning | DestroyVm
                   | MigrateVm | CreateDisk | CreateSnapshot | RevertSnapshot | PrepareTemplate
                   | LogFailureEvents | PurgeUnconfigured)
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


@dataclass(frozen=True, slots=True)
class RunPoolCycle:
    """Scheduler → pool actor: the periodic safety-net cycle.

    ``generation`` lets the actor drop a timer it has since replaced.
    """

    generation: int = 0


@dataclass(frozen=True, slots=True)
class PoolChanged:
    """Anyone → pool actor: something changed in Redis (a VM checked out or returned, an
    override, a reset). The actor runs a cycle at once (coalescing bursts), and that cycle
    reads the pool's override keys: whoever writes one must send this, or the change waits
    for the periodic read (docs/compatibility.md). A pool actor whose manager does not hold
    the pool's lease passes it on to the holder's (``forwarded``: it went on once already)."""

    pool: str
    reason: str = ""
    forwarded: bool = False


@dataclass(frozen=True, slots=True)
class StartDrain:
    """Anyone → pool actor: move every ready and pending VM to completed now."""

    pool: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class WantCloneSlot:
    """Pool actor → slot broker: no clone slot was free; wake me when one is."""

    pool: str


@dataclass(frozen=True, slots=True)
class CloneSlotFreed:
    """Pool actor → slot broker: ``count`` clone slots were released and not reused."""

    count: int = 1


@dataclass(frozen=True, slots=True)
class RefillPool:
    """Slot broker → pool actor: a clone slot is free; start clones if still short."""

    pool: str


@dataclass(frozen=True, slots=True)
class TasksQueued:
    """Anyone → task actor: disk, snapshot or revert tasks were queued in Redis; the actor
    runs a round at once instead of at its next timer."""


@dataclass(frozen=True, slots=True)
class RunPurge:
    """Scheduler → housekeeper: start a purge of stale queue entries (``purge_interval``)."""


@dataclass(frozen=True, slots=True)
class RunHealthCheck:
    """Scheduler → housekeeper: run the queue health check (``health_check_interval``)."""


@dataclass(frozen=True, slots=True)
class RecordHistory:
    """Scheduler → history recorder: record every pool's point for the current interval."""


@dataclass(frozen=True, slots=True)
class RenewLease:
    """Scheduler → pool actor: refresh the pool's lease (a third of the lease TTL): renew
    it, take it over, or hand it over (actors/cluster/ownership.py)."""


@dataclass(frozen=True, slots=True)
class PoolHandedOver:
    """Pool actor of the manager that just released a pool's lease → the pool actor of the
    manager it now belongs to (through the relay): take the lease now, rather than at its
    next renewal, so the pool is not left unserved for up to a third of the TTL."""

    pool: str


@dataclass(frozen=True, slots=True)
class SendHeartbeat:
    """Scheduler → heartbeat actor: write this manager's beat (``manager_heartbeat_interval``)."""


@dataclass(frozen=True, slots=True)
class PurgeStaleVms:
    """Housekeeper → pool actor: purge the pool's stale pending, ready and completed VMs
    (``max_*_age``; with ``dry_run`` only count and log them), then answer ``reply_to``
    with :class:`PoolPurged` carrying ``round``."""

    round: int
    dry_run: bool
    reply_to: pykka.ActorRef[Any]


@dataclass(frozen=True, slots=True)
class PoolPurged:
    """Pool actor → housekeeper: how many VMs of each queue the purge ``round`` took (or,
    in a dry run, would have taken)."""

    round: int
    pool: str
    pending: int = 0
    ready: int = 0
    completed: int = 0


@dataclass(frozen=True, slots=True)
class ActorCrashed:
    """A supervised actor → supervisor: it failed and has stopped."""

    name: str
    error: str
    error_class: str


@dataclass(frozen=True, slots=True)
class RestartActor:
    """Scheduler → supervisor: the back-off for ``name`` is over, start it again."""

    name: str
    attempt: int = field(default=0)


@dataclass(frozen=True, slots=True)
class ActorStopped:
    """Runtime → watcher (``runtime.pooled.notify_when_stopped``): the pooled actor ``urn``,
    registered as ``name``, has stopped and will handle no more messages. The on-demand
    manager waits for it before it starts that request's next actor."""

    name: str
    urn: str


@dataclass(frozen=True, slots=True)
class StopSupervising:
    """System → supervisor, at shutdown: restart nothing from now on (children are being
    stopped; a crash or a pending restart must not bring one back)."""


# -- on-demand requests ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RequestChanged:
    """API (through Commands) → on-demand manager → request actor: the request was created
    or deleted in Redis. The manager starts an actor for a request that has none."""

    request_id: str
    reason: str = ""
    forwarded: bool = False  # it already went on from another manager: never again


@dataclass(frozen=True, slots=True)
class RenewRequestLeases:
    """Scheduler → on-demand manager: renew the leases of the requests it runs."""


@dataclass(frozen=True, slots=True)
class SweepRequests:
    """Scheduler → on-demand manager: look for requests without an actor and hand out any
    clone slot that is free."""


@dataclass(frozen=True, slots=True)
class WantRequestVms:
    """Request actor → on-demand manager: clone one VM for each ``(alias, pool)`` in
    ``wants``, when a slot is free and it is this request's turn. Empty ``wants``
    withdraws everything the request still has queued."""

    request_id: str
    wants: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class CloneForRequest:
    """On-demand manager → pool actor: clone one VM for the request, using an on-demand
    clone slot. Answered to the manager with :class:`RequestCloneAnswered`; the request
    actor hears :class:`RequestVmCloning`, then :class:`RequestVmReady` or
    :class:`RequestVmFailed`. ``grant`` numbers the manager's grants; ``reply_to`` is the
    granting manager's id ('' = the pool actor's own manager), ``fence`` the value of the
    request's lease the grant was made under ('' = none: the clone is not fenced by it), and
    ``forwarded`` says it already went on from a manager not owning the pool."""

    request_id: str
    alias: str
    pool: str
    grant: int = 0
    reply_to: str = ""
    fence: str = ""
    forwarded: bool = False


@dataclass(frozen=True, slots=True)
class RequestCloneAnswered:
    """Pool actor → on-demand manager: the clone of :class:`CloneForRequest` started
    (``vm`` set) or could not start (``vm`` None: no slot, no provider, no name)."""

    request_id: str
    alias: str
    pool: str
    vm: str | None
    grant: int = 0


@dataclass(frozen=True, slots=True)
class RequestSlotFreed:
    """Pool actor → on-demand manager: an on-demand clone finished; its slot is free."""


@dataclass(frozen=True, slots=True)
class RequestVmCloning:
    """Pool actor → request actor: ``vm`` is being cloned for the request."""

    request_id: str
    alias: str
    pool: str
    vm: str


@dataclass(frozen=True, slots=True)
class RequestVmReady:
    """Pool actor → request actor: ``vm`` (still pending) passed its readiness check."""

    request_id: str
    alias: str
    pool: str
    vm: str


@dataclass(frozen=True, slots=True)
class RequestVmFailed:
    """Pool actor → request actor: ``vm``'s clone failed or it never became ready (it is
    already out of pending). ``permanent`` errors are not worth retrying; ``refused`` means
    nothing was attempted (the provider's circuit breaker is open): not counted as a retry,
    asked again later."""

    request_id: str
    alias: str
    pool: str
    vm: str
    reason: str
    permanent: bool = False
    refused: bool = False


@dataclass(frozen=True, slots=True)
class RequestExpired:
    """Scheduler → request actor: the request's deadline (or its grace window) is over."""

    request_id: str
    grace: bool = False


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """Request actor → itself, on a timer: claim the request again (its start met a Redis
    outage; messages that came meanwhile wait for the claim)."""

    request_id: str


@dataclass(frozen=True, slots=True)
class VerifyInFlight:
    """Request actor → itself, on a timer: are its VMs on their way still pending? One that
    left pending unannounced (the message was lost with a manager) counts as failed."""

    request_id: str


@dataclass(frozen=True, slots=True)
class RequestFinished:
    """Request actor → on-demand manager: the request reached ``status`` (or is gone, ``""``);
    the actor has stopped and its queued clones are cancelled."""

    request_id: str
    status: str
