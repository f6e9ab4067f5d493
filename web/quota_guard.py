"""Per-user quotas on the API (ours, docs/fairness.md "Quotas"): who is limited how, and the
429 a refusal answers.

Only when a site configures a limit (``config.quotas.configured``); otherwise nothing here
runs and no request is ever refused for a quota. The limits of a request's user are
``config.quotas.limits_for(requester)``; ``max_ondemand_requests_per_user`` is the default
of ``ondemand_in_flight`` for a user with a token when ``:auth:`` is configured and no
``:quotas:`` entry of the user (its own, a group's, ``default``) sets that limit.

A refusal is 429 ``{"ok": false, "reason": "quota", "quota": <limit name>, "limit": N,
"in_use": M, "message": <sentence>}``; ``in_use`` is what the user holds (``vms_held``,
``ondemand_in_flight``) or what the request asked for (``vms_per_request``: VMs,
``lifetime_hours``: hours). Each refusal counts ``quota.refused`` tagged with the limit and
the kind of requester, ``token``, ``anonymous`` or ``address``: neither user names nor client
addresses ever become label values (the metric is read by anyone who can read ``/prometheus``).

A VM handed to a user with a ``lifetime_hours`` limit (checked out, or delivered to its
on-demand request) gets at most that lifetime (:func:`lifetime_cap`); a limit of 0 gives the
shortest lifetime there is, one hour (a VM's lifetime of 0 means it never expires).

What callers may rely on: the functions are pure but for :func:`refuse` (one metric) and
:func:`record_request` (one script); thread-safe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from vmpooler.actors.fairness.policy import ANONYMOUS, QuotaPolicy, Requester
from vmpooler.actors.storage.request_store import Entry, RequestOrigin
from vmpooler.actors.storage.user_quota import (
    CreateVerdict,
    QuotaRefusal,
    QuotaTicket,
    UserQuotaStore,
)
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError

__all__ = ["ADDRESS_LABEL", "ANONYMOUS_LABEL", "TOKEN_LABEL", "check_lifetime",
           "check_per_request", "lifetime_cap", "metric_requester", "record_request", "refuse",
           "ticket_for"]

TOKEN_LABEL = "token"
"""The ``requester`` tag of ``quota.refused`` for a user named by a valid token."""
ANONYMOUS_LABEL = "anonymous"
"""The ``requester`` tag for the shared ``anonymous`` user (``:quotas: anonymous: true``)."""
ADDRESS_LABEL = "address"
"""The ``requester`` tag for a user known only by its client address."""


def _sets_in_flight(policy: QuotaPolicy, asker: Requester) -> bool:
    """Whether an entry of ``:quotas:`` that applies to ``asker`` sets
    ``ondemand_in_flight`` (a number or ``unlimited``)."""
    name = "ondemand_in_flight"
    return (name in policy.entry_of(asker.user) or name in policy.default
            or any(name in policy.groups[g].limits for g in asker.groups
                   if g in policy.groups))


def ticket_for(ctx: ApiContext, asker: Requester) -> QuotaTicket | None:
    """The quota of ``asker``'s writes; None when ``:quotas:`` sets no limit at all."""
    policy = ctx.config.quotas
    if not policy.configured:
        return None
    limits = policy.limits_for(asker)
    fallback = ctx.config.settings.max_ondemand_requests_per_user
    if (fallback is not None and ctx.auth_configured and asker.authenticated
            and not _sets_in_flight(policy, asker)):
        limits = dataclasses.replace(limits, ondemand_in_flight=fallback)
    return QuotaTicket(asker.user, limits)


def metric_requester(asker: Requester) -> str:
    """The ``requester`` tag of ``quota.refused`` for ``asker``: one of three words, never a
    name (module docstring)."""
    if asker.authenticated:
        return TOKEN_LABEL
    return ANONYMOUS_LABEL if asker.user == ANONYMOUS else ADDRESS_LABEL


_MESSAGES = {
    "vms_held": "user '{user}' holds {in_use} VMs; the limit is {limit}{more}",
    "ondemand_in_flight": "user '{user}' has {in_use} on-demand requests in flight; the "
                          "limit is {limit}",
    "vms_per_request": "user '{user}' asked for {in_use} VMs in one request; the limit is "
                       "{limit}",
    "lifetime_hours": "user '{user}' asked for a lifetime of {in_use} hours; the limit is "
                      "{limit}",
}


def refuse(ctx: ApiContext, asker: Requester, refusal: QuotaRefusal,
           asked: int | None = None) -> ApiError:
    """The 429 of ``refusal`` (``asked``: VMs the refused request asked for, for the
    message of ``vms_held``), after counting ``quota.refused``."""
    ctx.metrics.increment("quota.refused", tags={
        "quota": refusal.quota, "requester": metric_requester(asker)})
    more = f" ({asked} more asked for)" if asked is not None else ""
    message = _MESSAGES[refusal.quota].format(user=asker.user, in_use=refusal.in_use,
                                              limit=refusal.limit, more=more)
    return ApiError(429, {"ok": False, "reason": "quota", "quota": refusal.quota,
                          "limit": refusal.limit, "in_use": refusal.in_use,
                          "message": f"{message} (:quotas: {refusal.quota})"})


def check_per_request(ctx: ApiContext, asker: Requester, ticket: QuotaTicket,
                      asked: int) -> None:
    """Raise the 429 when ``asked`` VMs in one request exceed ``vms_per_request``."""
    limit = ticket.limits.vms_per_request
    if limit is not None and asked > limit:
        raise refuse(ctx, asker, QuotaRefusal("vms_per_request", limit, asked))


def check_lifetime(ctx: ApiContext, asker: Requester, hours: int) -> None:
    """Raise the 429 when ``hours`` exceed ``asker``'s ``lifetime_hours`` (nothing when
    no quota is configured)."""
    ticket = ticket_for(ctx, asker)
    limit = None if ticket is None else ticket.limits.lifetime_hours
    if limit is not None and hours > limit:
        raise refuse(ctx, asker, QuotaRefusal("lifetime_hours", limit, hours))


def lifetime_cap(ctx: ApiContext, ticket: QuotaTicket | None, usual: int | None) -> int | None:
    """The lifetime (hours) a VM handed under ``ticket`` must be given instead of ``usual``
    (what it would be given without quotas; None: nothing, so ``vm_lifetime`` applies), or
    None when ``usual`` stands: no ticket, no ``lifetime_hours`` limit, or a usual lifetime
    within it. The cap is the limit, at least 1; a usual lifetime of 0 (never expires) is
    longer than any."""
    limit = None if ticket is None else ticket.limits.lifetime_hours
    if limit is None:
        return None
    cap = max(1, limit)
    hours = ctx.config.settings.vm_lifetime if usual is None else usual
    return cap if hours <= 0 or hours > cap else None


def record_request(ctx: ApiContext, asker: Requester, ticket: QuotaTicket, request_id: str,
                   entries: Sequence[Entry], *, token: str | None, token_user: str | None,
                   origin: RequestOrigin) -> bool:
    """Create an on-demand request within ``ticket`` (one script): False when the id is
    taken; the 429 raised when a limit refuses it (``vms_per_request`` is checked first,
    without Redis). The VMs later handed to it get at most the user's ``lifetime_hours``
    (:func:`lifetime_cap`, recorded with the request)."""
    asked = sum(entry.count for entry in entries)
    check_per_request(ctx, asker, ticket, asked)
    usual = ctx.config.settings.vm_lifetime_auth if token else None  # as the request's actor
    outcome = UserQuotaStore(ctx.redis).create(
        request_id, entries, created=int(ctx.clock.now()), ticket=ticket, origin=origin,
        token=token, token_user=token_user, lifetime_cap=lifetime_cap(ctx, ticket, usual))
    if outcome.refusal is not None:
        raise refuse(ctx, asker, outcome.refusal, asked)
    return outcome.verdict is CreateVerdict.CREATED
