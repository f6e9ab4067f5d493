"""The quota rules (docs/fairness.md "Quotas"): which limits apply to a requester, what a
refusal says, and the one verdict of every create within them.

Two limits come from the configuration: the ``:quotas:`` section (per user: ``vms_held``,
``ondemand_in_flight``, ``vms_per_request``, ``lifetime_hours``; :class:`QuotaTicket`) and
``:config: max_ondemand_requests_per_user`` (on-demand requests in flight per counted user,
used when ``:quotas:`` sets no limit at all; :data:`PER_USER_REQUESTS`). The stores that
count them in Redis (:mod:`vmpooler.actors.storage.user_quota`,
:mod:`vmpooler.actors.storage.request_quota`) answer with a :class:`CreateOutcome`.

Rules, as :func:`ticket_for` applies them: without any ``:quotas:`` limit there is no ticket
(nothing is counted against ``:quotas:``); otherwise the requester's limits are
:meth:`QuotaPolicy.limits_for <vmpooler.actors.fairness.quota_policy.QuotaPolicy.limits_for>`,
and ``max_ondemand_requests_per_user`` is the default of ``ondemand_in_flight`` for a
counted, authenticated requester whom no ``:quotas:`` entry (its own, a group's,
``default``) gives that limit.

What callers may rely on: everything here is pure and immutable; the messages are the
sentences of the API's 429 answers, byte for byte.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from enum import Enum

from vmpooler.actors.fairness.quota_policy import LIMIT_NAMES, Limits, QuotaPolicy, Requester

__all__ = ["PER_USER_REQUESTS", "CreateOutcome", "CreateVerdict", "QuotaRefusal",
           "QuotaTicket", "lifetime_cap", "lifetime_refusal", "limits_text", "parse_limits",
           "per_request_refusal", "refusal_message", "ticket_for"]

PER_USER_REQUESTS = "max_ondemand_requests_per_user"
"""The ``quota`` of a refusal by ``:config: max_ondemand_requests_per_user``."""


@dataclass(frozen=True, slots=True)
class QuotaTicket:
    """Who a quota'd write is for and the limits that apply to it (:func:`ticket_for`)."""

    user: str
    limits: Limits

    @property
    def index_text(self) -> str:
        """The limits as the users index records them."""
        return limits_text(self.limits)


@dataclass(frozen=True, slots=True)
class QuotaRefusal:
    """A write refused by a limit: its name (``vms_held``, ``ondemand_in_flight``,
    ``vms_per_request``, ``lifetime_hours`` or :data:`PER_USER_REQUESTS`), the limit, and
    what the user had in use then (held VMs, requests in flight) or asked for (VMs in one
    request, hours of lifetime)."""

    quota: str
    limit: int
    in_use: int


class CreateVerdict(Enum):
    """What a create within the limits did (the values are the create scripts' codes)."""

    CREATED = 1
    ID_TAKEN = 0
    REFUSED = -1


@dataclass(frozen=True, slots=True)
class CreateOutcome:
    """The verdict; ``refusal`` when REFUSED. ``in_flight``: the user's requests in flight
    as counted (with the new one when CREATED; 0 when the id was taken or nothing counts
    them); ``held``: the VMs the user holds with the new request's (``:quotas:`` only)."""

    verdict: CreateVerdict
    refusal: QuotaRefusal | None = None
    held: int = 0
    in_flight: int = 0

    @property
    def created(self) -> bool:
        """Whether the request was written."""
        return self.verdict is CreateVerdict.CREATED


def limits_text(limits: Limits) -> str:
    """``vms_held|ondemand_in_flight|vms_per_request|lifetime_hours`` ('' = no limit)."""
    return "|".join("" if getattr(limits, name) is None else str(getattr(limits, name))
                    for name in LIMIT_NAMES)


def parse_limits(text: str) -> Limits:
    """The inverse of :func:`limits_text`; a part that is not a number is no limit."""
    parts = text.split("|")
    values: dict[str, int | None] = {}
    for name, part in zip((f.name for f in fields(Limits)), parts, strict=False):
        values[name] = int(part) if part.isdigit() else None
    return Limits(**values)


def _sets_in_flight(policy: QuotaPolicy, asker: Requester) -> bool:
    """Whether an entry of ``:quotas:`` that applies to ``asker`` sets
    ``ondemand_in_flight`` (a number or ``unlimited``)."""
    name = "ondemand_in_flight"
    return (name in policy.entry_of(asker.user) or name in policy.default
            or any(name in policy.groups[g].limits for g in asker.groups
                   if g in policy.groups))


def ticket_for(policy: QuotaPolicy, per_user_requests: int | None, asker: Requester, *,
               counted: bool) -> QuotaTicket | None:
    """The quota of ``asker``'s writes; None when ``:quotas:`` sets no limit at all.
    ``per_user_requests``: ``max_ondemand_requests_per_user``, the fallback of
    ``ondemand_in_flight`` when ``counted`` (the requester's user is vouched for: a token
    under ``:auth:``, or a user an embedding service names) and ``asker`` is
    authenticated."""
    if not policy.configured:
        return None
    limits = policy.limits_for(asker)
    if (per_user_requests is not None and counted and asker.authenticated
            and not _sets_in_flight(policy, asker)):
        limits = dataclasses.replace(limits, ondemand_in_flight=per_user_requests)
    return QuotaTicket(asker.user, limits)


def per_request_refusal(ticket: QuotaTicket, asked: int) -> QuotaRefusal | None:
    """The refusal when ``asked`` VMs in one request exceed ``vms_per_request``."""
    limit = ticket.limits.vms_per_request
    return QuotaRefusal("vms_per_request", limit, asked) if (
        limit is not None and asked > limit) else None


def lifetime_refusal(ticket: QuotaTicket | None, hours: int) -> QuotaRefusal | None:
    """The refusal when ``hours`` of lifetime exceed ``lifetime_hours`` (None without a
    ticket)."""
    limit = None if ticket is None else ticket.limits.lifetime_hours
    return QuotaRefusal("lifetime_hours", limit, hours) if (
        limit is not None and hours > limit) else None


def lifetime_cap(ticket: QuotaTicket | None, usual: int | None,
                 vm_lifetime: int) -> int | None:
    """The lifetime (hours) a VM handed under ``ticket`` must be given instead of ``usual``
    (what it would be given without quotas; None: nothing, so ``vm_lifetime`` applies), or
    None when ``usual`` stands: no ticket, no ``lifetime_hours`` limit, or a usual lifetime
    within it. The cap is the limit, at least 1 (a VM's lifetime of 0 never expires); a
    usual lifetime of 0 is longer than any."""
    limit = None if ticket is None else ticket.limits.lifetime_hours
    if limit is None:
        return None
    cap = max(1, limit)
    hours = vm_lifetime if usual is None else usual
    return cap if hours <= 0 or hours > cap else None


_MESSAGES = {
    "vms_held": "user '{user}' holds {in_use} VMs; the limit is {limit}{more}",
    "ondemand_in_flight": "user '{user}' has {in_use} on-demand requests in flight; the "
                          "limit is {limit}",
    "vms_per_request": "user '{user}' asked for {in_use} VMs in one request; the limit is "
                       "{limit}",
    "lifetime_hours": "user '{user}' asked for a lifetime of {in_use} hours; the limit is "
                      "{limit}",
}


def refusal_message(refusal: QuotaRefusal, asker: Requester, asked: int | None = None) -> str:
    """The sentence of ``refusal`` for ``asker`` (``asked``: VMs the refused request asked
    for, named in the message of ``vms_held``). A :data:`PER_USER_REQUESTS` refusal names
    the token's user (``unknown`` when ``asker`` is not authenticated)."""
    if refusal.quota == PER_USER_REQUESTS:
        user = asker.user if asker.authenticated else "unknown"
        return (f"user '{user}' has {refusal.in_use} on-demand requests in flight; the "
                f"maximum is {refusal.limit} (max_ondemand_requests_per_user)")
    more = f" ({asked} more asked for)" if asked is not None else ""
    message = _MESSAGES[refusal.quota].format(user=asker.user, in_use=refusal.in_use,
                                              limit=refusal.limit, more=more)
    return f"{message} (:quotas: {refusal.quota})"
