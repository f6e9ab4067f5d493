"""Per-user quotas on the API (ours, docs/fairness.md "Quotas"): who is limited how, and the
429 a refusal answers.

Only when a site configures a limit (``config.quotas.configured``); otherwise nothing here
runs and no request is ever refused for a quota. The rules (which limits apply to whom, the
lifetime cap, the refusal's sentence) are :mod:`vmpooler.actors.fairness.quota`'s, and an
on-demand request is created through :mod:`vmpooler.actors.fairness.intake`; here they get
the API's answers. ``max_ondemand_requests_per_user`` is the default of
``ondemand_in_flight`` for a user with a token when ``:auth:`` is configured and no
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

A refusal by ``max_ondemand_requests_per_user`` alone (no ``:quotas:`` limit) is its own
429, ``{"ok": false, "message": <sentence>}``, and counts no metric (:func:`refusal_error`).

What callers may rely on: the functions are pure but for :func:`refuse` and
:func:`refusal_error` (one metric); thread-safe.
"""

from __future__ import annotations

from vmpooler.actors.fairness import quota
from vmpooler.actors.fairness.quota import QuotaRefusal, QuotaTicket
from vmpooler.actors.fairness.quota_policy import ANONYMOUS, Requester
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError

__all__ = ["ADDRESS_LABEL", "ANONYMOUS_LABEL", "TOKEN_LABEL", "check_lifetime",
           "check_per_request", "lifetime_cap", "metric_requester", "refusal_error", "refuse",
           "ticket_for"]

TOKEN_LABEL = "token"
"""The ``requester`` tag of ``quota.refused`` for a user named by a valid token."""
ANONYMOUS_LABEL = "anonymous"
"""The ``requester`` tag for the shared ``anonymous`` user (``:quotas: anonymous: true``)."""
ADDRESS_LABEL = "address"
"""The ``requester`` tag for a user known only by its client address."""


def ticket_for(ctx: ApiContext, asker: Requester) -> QuotaTicket | None:
    """The quota of ``asker``'s writes; None when ``:quotas:`` sets no limit at all."""
    return quota.ticket_for(ctx.config.quotas,
                            ctx.config.settings.max_ondemand_requests_per_user, asker,
                            counted=ctx.auth_configured)


def metric_requester(asker: Requester) -> str:
    """The ``requester`` tag of ``quota.refused`` for ``asker``: one of three words, never a
    name (module docstring)."""
    if asker.authenticated:
        return TOKEN_LABEL
    return ANONYMOUS_LABEL if asker.user == ANONYMOUS else ADDRESS_LABEL


def refuse(ctx: ApiContext, asker: Requester, refusal: QuotaRefusal,
           asked: int | None = None) -> ApiError:
    """The 429 of a ``:quotas:`` ``refusal`` (``asked``: VMs the refused request asked for,
    for the message of ``vms_held``), after counting ``quota.refused``."""
    ctx.metrics.increment("quota.refused", tags={
        "quota": refusal.quota, "requester": metric_requester(asker)})
    return ApiError(429, {"ok": False, "reason": "quota", "quota": refusal.quota,
                          "limit": refusal.limit, "in_use": refusal.in_use,
                          "message": quota.refusal_message(refusal, asker, asked)})


def refusal_error(ctx: ApiContext, asker: Requester, refusal: QuotaRefusal,
                  asked: int | None = None) -> ApiError:
    """The 429 of any refusal of an on-demand create: :func:`refuse`'s for a ``:quotas:``
    limit, the bare message for ``max_ondemand_requests_per_user``."""
    if refusal.quota == quota.PER_USER_REQUESTS:
        return ApiError(429, {"ok": False,
                              "message": quota.refusal_message(refusal, asker)})
    return refuse(ctx, asker, refusal, asked)


def check_per_request(ctx: ApiContext, asker: Requester, ticket: QuotaTicket,
                      asked: int) -> None:
    """Raise the 429 when ``asked`` VMs in one request exceed ``vms_per_request``."""
    refusal = quota.per_request_refusal(ticket, asked)
    if refusal is not None:
        raise refuse(ctx, asker, refusal)


def check_lifetime(ctx: ApiContext, asker: Requester, hours: int) -> None:
    """Raise the 429 when ``hours`` exceed ``asker``'s ``lifetime_hours`` (nothing when
    no quota is configured)."""
    refusal = quota.lifetime_refusal(ticket_for(ctx, asker), hours)
    if refusal is not None:
        raise refuse(ctx, asker, refusal)


def lifetime_cap(ctx: ApiContext, ticket: QuotaTicket | None, usual: int | None) -> int | None:
    """:func:`vmpooler.actors.fairness.quota.lifetime_cap` under the configured
    ``vm_lifetime``."""
    return quota.lifetime_cap(ticket, usual, ctx.config.settings.vm_lifetime)
