"""The one way an on-demand request is created (docs/fairness.md): the gate every create
goes through, whether it comes from the API (``POST /ondemandvm``, ``POST
/ondemandvm/<a+b>``) or from a service embedding the pooler
(:meth:`PoolerSystem.request_ondemand <vmpooler.actors.system.PoolerSystem.request_ondemand>`).

Who asks is an :class:`Applicant`: the :class:`~vmpooler.actors.fairness.quota_policy.Requester`
whose limits apply, the origin written with the request (its user, priority and share, which
the on-demand manager's fair-share queue reads), the token and token user written with it,
and the name ``max_ondemand_requests_per_user`` counts it under. :meth:`Intake.create`
checks, in this order, and writes in the same script as the last check:

1. with ``:quotas:`` limits (:func:`~vmpooler.actors.fairness.quota.ticket_for`):
   ``vms_per_request`` (no Redis), then ``ondemand_in_flight`` and ``vms_held`` (one
   script, :class:`~vmpooler.actors.storage.user_quota.UserQuotaStore`); the request's VMs
   get at most the user's ``lifetime_hours``;
2. else, with ``max_ondemand_requests_per_user`` and a counted applicant: the user's
   requests in flight (one script, :class:`~vmpooler.actors.storage.request_quota.RequestQuota`);
3. else nothing is counted (:meth:`RequestStore.create
   <vmpooler.actors.storage.request_store.RequestStore.create>`).

A priority is admitted by :func:`admit_priority` (``high`` only for the users and groups of
``:quotas: high_priority``) and becomes, with the user's share, the origin
(:func:`origin_for`); the API admits it before checking the order's pools, so that its
answers keep their order.

What callers may rely on: a refused request writes nothing; the id taken writes nothing;
every method is thread-safe and may raise ``redis.RedisError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import redis

from vmpooler.actors.config import Config
from vmpooler.actors.fairness.names import normal_user_name
from vmpooler.actors.fairness.quota import (
    CreateOutcome,
    CreateVerdict,
    QuotaRefusal,
    lifetime_cap,
    per_request_refusal,
    refusal_message,
    ticket_for,
)
from vmpooler.actors.fairness.quota_policy import PRIORITIES, QuotaPolicy, Requester
from vmpooler.actors.storage.request_quota import RequestQuota
from vmpooler.actors.storage.request_store import Entry, RequestOrigin, RequestStore
from vmpooler.actors.storage.user_quota import UserQuotaStore

__all__ = ["Applicant", "Intake", "PriorityRefused", "Refused", "UnknownPriorityError",
           "admit_priority", "embedded_applicant", "origin_for"]


class Refused(Exception):  # noqa: N818 - the name callers catch reads as what happened
    """The gate refused a request and wrote nothing: ``message`` says why, in the words of
    the API's answer; ``refusal`` is the limit that refused it (None for a priority)."""

    def __init__(self, message: str, refusal: QuotaRefusal | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.refusal = refusal


class PriorityRefused(Refused):
    """``priority: high`` asked by a user ``:quotas: high_priority`` does not name."""


class UnknownPriorityError(ValueError):
    """A priority that is none of ``high``, ``normal``, ``low``."""


def admit_priority(policy: QuotaPolicy, asker: Requester, value: object) -> str:
    """``value`` as the request's priority: :class:`UnknownPriorityError` for a value that is
    not one, :class:`PriorityRefused` for ``high`` from a user ``policy`` does not let use
    it."""
    if value not in PRIORITIES:
        raise UnknownPriorityError(
            f"priority must be one of {', '.join(PRIORITIES)}, got {json.dumps(value)}")
    if value == "high" and not policy.may_use_high(asker):
        raise PriorityRefused(
            f"user '{asker.user}' may not ask for priority high (:quotas: high_priority)")
    return str(value)


def origin_for(policy: QuotaPolicy, asker: Requester, priority: str) -> RequestOrigin:
    """What is written with ``asker``'s request: its user, ``priority`` and its share."""
    return RequestOrigin(asker.user, priority, policy.share_of(asker))


@dataclass(frozen=True, slots=True)
class Applicant:
    """Who asks for a request. ``requester``: whose limits apply; ``origin``: the user,
    priority and share written with the request (None: none written, the request counts as
    its token's user or as a user of its own); ``token`` and ``token_user``: written as
    ``token:token`` and ``token:user`` (both only with a token); ``counted_as``: the name
    ``max_ondemand_requests_per_user`` counts the request under (None: that limit does not
    apply to it, nor is it the default of ``ondemand_in_flight``)."""

    requester: Requester
    origin: RequestOrigin | None = None
    token: str | None = None
    token_user: str | None = None
    counted_as: str | None = None


def embedded_applicant(policy: QuotaPolicy, request_id: str, *, user: str | None = None,
                       origin: RequestOrigin | None = None, priority: str | None = None,
                       groups: Iterable[str] = (), token: str | None = None) -> Applicant:
    """The applicant of a service embedding the pooler, which vouches for the user it
    names. The user is ``origin.user``, else ``user`` (in its normal form); its groups are
    ``groups`` and those of ``:quotas: members``; it is counted by
    ``max_ondemand_requests_per_user`` (as the API counts a token's user). ``origin`` is
    written as given (its priority and share are the caller's, not checked); without it the
    priority (``normal`` when None) is admitted by :func:`admit_priority` and the share is
    the policy's. With no user named the request is a user of its own (its id): the
    ``default`` limits apply to it alone, and nothing is counted per user unless ``token``
    is given. With ``token``, ``user`` is written as ``token:user``. ``ValueError`` for
    ``priority`` or ``groups`` given with ``origin``, or an unknown priority."""
    if origin is not None and (priority is not None or groups):
        raise ValueError("priority and groups are given in origin, or without it")
    name = normal_user_name(origin.user if origin is not None else user or "")
    if name:
        asker = Requester(name, policy.groups_of(name, groups), authenticated=True)
    else:
        asker = Requester(request_id, policy.groups_of(request_id, groups))
    if origin is None and (name or priority is not None):
        origin = origin_for(policy, asker, admit_priority(policy, asker, priority or "normal"))
    return Applicant(asker, origin, token=token, token_user=user,
                     counted_as=(name or token) or None)


class Intake:
    """Creates on-demand requests through the gate (module docstring). Thread-safe (one
    Redis client)."""

    def __init__(self, client: redis.Redis, requests: RequestStore | None = None) -> None:
        self.requests = requests if requests is not None else RequestStore(client)
        self._quotas = UserQuotaStore(client)
        self._per_user = RequestQuota(client)

    def create(self, config: Config, request_id: str, entries: Sequence[Entry],
               applicant: Applicant, *, created: int) -> CreateOutcome:
        """Record and queue the request if the id is free and every limit that applies to
        ``applicant`` under ``config`` lets it (module docstring: which, in what order)."""
        settings = config.settings
        asker = applicant.requester
        per_user = settings.max_ondemand_requests_per_user
        ticket = ticket_for(config.quotas, per_user, asker,
                            counted=applicant.counted_as is not None)
        if ticket is not None:
            refusal = per_request_refusal(ticket, sum(entry.count for entry in entries))
            if refusal is not None:
                return CreateOutcome(CreateVerdict.REFUSED, refusal)
            usual = settings.vm_lifetime_auth if applicant.token else None
            return self._quotas.create(
                request_id, entries, created=created, ticket=ticket, origin=applicant.origin,
                token=applicant.token, token_user=applicant.token_user,
                lifetime_cap=lifetime_cap(ticket, usual, settings.vm_lifetime))
        if per_user is None or applicant.counted_as is None:
            written = self.requests.create(request_id, entries, created=created,
                                           token=applicant.token, user=applicant.token_user,
                                           origin=applicant.origin)
            return CreateOutcome(CreateVerdict.CREATED if written else CreateVerdict.ID_TAKEN)
        return self._per_user.create(
            request_id, entries, created=created, user=applicant.counted_as, limit=per_user,
            ttl=config.redis.data_ttl * 3600, token=applicant.token, origin=applicant.origin)

    def request(self, config: Config, request_id: str, entries: Sequence[Entry],
                applicant: Applicant, *, created: int) -> bool:
        """:meth:`create`, with a refusal raised as :class:`Refused` (its message the API's
        sentence for it); False when the id is taken."""
        outcome = self.create(config, request_id, entries, applicant, created=created)
        if outcome.refusal is not None:
            asked = sum(entry.count for entry in entries)
            raise Refused(refusal_message(outcome.refusal, applicant.requester, asked),
                          outcome.refusal)
        return outcome.created
