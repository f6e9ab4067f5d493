"""On-demand requests: the API, the on-demand manager, request actors and pool actors."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ClaimRequest",
    "CloneForRequest",
    "PublishWaits",
    "RenewRequestLeases",
    "RequestChanged",
    "RequestCloneAnswered",
    "RequestExpired",
    "RequestFinished",
    "RequestPoolBlocked",
    "RequestSlotFreed",
    "RequestVmCloning",
    "RequestVmFailed",
    "RequestVmReady",
    "ResendWants",
    "SweepRequests",
    "VerifyInFlight",
    "WantRequestVms",
    "WithdrawRequest",
    "request_actor_name",
]


def request_actor_name(request_id: str) -> str:
    """The name a request's actor is registered under in the actor directory."""
    return f"request:{request_id}"


@dataclass(frozen=True, slots=True)
class RequestChanged:
    """API (through Commands) → on-demand manager → request actor: the request was created
    or deleted in Redis. The manager starts an actor for a request that has none;
    ``traceparent`` is the W3C trace context of the API request that created it ('' when
    not traced), the parent of the request actor's span."""

    request_id: str
    reason: str = ""
    traceparent: str = ""


@dataclass(frozen=True, slots=True)
class RenewRequestLeases:
    """Scheduler → on-demand manager: renew the leases of the requests it runs."""


@dataclass(frozen=True, slots=True)
class SweepRequests:
    """Scheduler → on-demand manager: look for requests without an actor and hand out any
    clone slot that is free."""


@dataclass(frozen=True, slots=True)
class PublishWaits:
    """Scheduler → on-demand manager: publish the requests' waits that changed since the
    last publication (held back to at most one a second)."""


@dataclass(frozen=True, slots=True)
class WantRequestVms:
    """Request actor → its on-demand manager → the granter: clone one VM for each ``(alias,
    pool)`` in ``wants``, when a slot is free and it is this request's turn. Empty ``wants``
    withdraws everything the request still has queued. ``user``, ``priority`` and ``share``
    say who asked (docs/fairness.md); ``user`` '' counts the request as a user of its own.
    The granter keeps, per request, the ``fence`` with the highest token heard: an older
    one is ignored, a newer one (the request's new holder) replaces what the request had
    queued, and its grants carry it. One heard from another manager (through the relay)
    was passed on by the manager running the request, which set its ``fence``."""

    request_id: str
    wants: tuple[tuple[str, str], ...]
    user: str = ""
    priority: str = "normal"
    share: float = 1.0
    whole: bool = False  # ``wants`` is all the request has queued: replaces what was
    fence: str = ""  # the request's lease value (set by the manager running it; '': none)
    traceparent: str = ""  # the request actor's span ('': not traced)


@dataclass(frozen=True, slots=True)
class WithdrawRequest:
    """On-demand manager running a request → the granter (the on-demand manager granting
    every manager's clone slots): the request no longer runs there (finished, its actor
    crashed or its lease was lost); forget its queued VMs, its clones and its wait. Ignored
    when the granter has heard from a newer holding of the request (a ``fence`` with a
    higher token)."""

    request_id: str
    fence: str = ""


@dataclass(frozen=True, slots=True)
class ResendWants:
    """On-demand manager → its request actors: the granter changed; send everything still
    queued again (a :class:`WantRequestVms` with ``whole`` set)."""

    request_id: str


@dataclass(frozen=True, slots=True)
class CloneForRequest:
    """On-demand manager → pool actor: clone one VM for the request, using an on-demand
    clone slot. Answered to the manager with :class:`RequestCloneAnswered`; the request
    actor hears :class:`RequestVmCloning`, then :class:`RequestVmReady` or
    :class:`RequestVmFailed`. ``grant`` numbers the manager's grants; ``reply_to`` is the
    granting manager's id ('' = the pool actor's own manager), ``fence`` the value of the
    request's lease the grant was made under ('' = none: the clone is not fenced by it). A
    pool actor whose manager does not hold the pool's lease passes it on to the holder's
    once; one that cannot answers it unstarted."""

    request_id: str
    alias: str
    pool: str
    grant: int = 0
    reply_to: str = ""
    fence: str = ""
    traceparent: str = ""  # the request actor's span, parent of the pool's ('': none)


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
class RequestPoolBlocked:
    """Pool actor → request actor: no clone of ``pool`` starts for the request before
    ``until`` (epoch seconds; the provider's circuit breaker is open), ``reason`` saying
    why. The request fails at once if ``until`` is past its deadline, else keeps its place
    in the queue."""

    request_id: str
    pool: str
    until: float
    reason: str


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
