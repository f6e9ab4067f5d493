"""The ``users`` section of ``GET /status`` (ours, docs/fairness.md "Usage"): what each user
holds under ``:quotas:`` and its limits.

Sent only when ``:quotas:`` sets a limit, with the default sections (no ``view``) or when a
``view`` names ``users``. Per user: ``vms_held`` (VMs checked out and still running, plus
the VMs of its on-demand requests: in flight, their requested count; ready, their delivered
VMs still running), ``ondemand_in_flight`` and ``limits`` (each limit's value, null for none,
as in force at the user's last checkout or request). Users are keyed by name, except when
``:auth:`` is configured and the caller presents no valid token: then by a stable opaque
label ``user-<n>`` (the same user keeps its label while it holds something).

Cost: one script (:meth:`~vmpooler.actors.storage.user_quota.UserQuotaStore.usage`) over the
users holding something, plus the token check when names may be hidden.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import falcon

from vmpooler.actors.storage.user_quota import UserQuotaStore
from vmpooler.web.api_context import ApiContext
from vmpooler.web.tokens import has_valid_token

__all__ = ["SECTION", "users_section", "wants_users"]

SECTION = "users"


def wants_users(ctx: ApiContext, view: str | None) -> bool:
    """Whether ``/status?view=...`` gets the section (quotas configured, and no ``view`` or
    one naming ``users``)."""
    if not ctx.config.quotas.configured:
        return False
    return view is None or SECTION in view.split(",")


def users_section(req: falcon.Request, ctx: ApiContext) -> dict[str, Any]:
    """The section for ``req``: ``{name or label: usage}``, by label."""
    names = not ctx.auth_configured or has_valid_token(req, ctx)
    users: dict[str, Any] = {}
    for usage in UserQuotaStore(ctx.redis).usage():
        key = usage.user if names else f"user-{usage.label}"
        users[key] = {"vms_held": usage.vms_held,
                      "ondemand_in_flight": usage.ondemand_in_flight,
                      "limits": asdict(usage.limits)}
    return users
