"""Every message between actors (frozen, slotted dataclasses) and the actors' names.

Commands are imperative (``RunPoolCycle``), events are past tense (``ProviderCallFinished``).
Durations are seconds. Messages carry ids and values, plus, where an answer is expected,
the ``reply_to`` ActorRef the answer goes to — never clients or provider objects.
Actors find each other by name in the actor directory at send time; the names are
``pool:<pool>``, ``provider:<provider>``, ``tasks``, ``ondemand`` and
:func:`request_actor_name`.

The modules group them by who talks: :mod:`.provider_calls`, :mod:`.pool_commands`,
:mod:`.request_flow`, :mod:`.supervision`, :mod:`.timers`. Import from this package: every
message is re-exported here.
"""

from __future__ import annotations

from vmpooler.actors.messages.pool_commands import (
    CloneSlotFreed,
    PoolChanged,
    PoolHandedOver,
    PoolPurged,
    PurgeStaleVms,
    RefillPool,
    RenewLease,
    RunPoolCycle,
    StartDrain,
    TasksQueued,
    WantCloneSlot,
)
from vmpooler.actors.messages.provider_calls import (
    CallProvider,
    CloneResult,
    ProviderCallFinished,
    ProviderFailure,
    ProviderOp,
    ReadyCheckResult,
    RunningCheckResult,
)
from vmpooler.actors.messages.request_flow import (
    ClaimRequest,
    CloneForRequest,
    RenewRequestLeases,
    RequestChanged,
    RequestCloneAnswered,
    RequestExpired,
    RequestFinished,
    RequestSlotFreed,
    RequestVmCloning,
    RequestVmFailed,
    RequestVmReady,
    SweepRequests,
    VerifyInFlight,
    WantRequestVms,
    request_actor_name,
)
from vmpooler.actors.messages.supervision import (
    ActorCrashed,
    ActorStopped,
    RestartActor,
    StopSupervising,
)
from vmpooler.actors.messages.timers import (
    RecordHistory,
    RunHealthCheck,
    RunPurge,
    SendHeartbeat,
)

__all__ = [
    "ActorCrashed",
    "ActorStopped",
    "CallProvider",
    "ClaimRequest",
    "CloneForRequest",
    "CloneResult",
    "CloneSlotFreed",
    "PoolChanged",
    "PoolHandedOver",
    "PoolPurged",
    "ProviderCallFinished",
    "ProviderFailure",
    "ProviderOp",
    "PurgeStaleVms",
    "ReadyCheckResult",
    "RecordHistory",
    "RefillPool",
    "RenewLease",
    "RenewRequestLeases",
    "RequestChanged",
    "RequestCloneAnswered",
    "RequestExpired",
    "RequestFinished",
    "RequestSlotFreed",
    "RequestVmCloning",
    "RequestVmFailed",
    "RequestVmReady",
    "RestartActor",
    "RunHealthCheck",
    "RunPoolCycle",
    "RunPurge",
    "RunningCheckResult",
    "SendHeartbeat",
    "StartDrain",
    "StopSupervising",
    "SweepRequests",
    "TasksQueued",
    "VerifyInFlight",
    "WantCloneSlot",
    "WantRequestVms",
    "request_actor_name",
]
