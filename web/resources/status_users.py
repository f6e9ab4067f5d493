"""The ``users`` and ``users_summary`` sections of ``GET /status`` (ours, docs/fairness.md
"Usage"): what the users holding the most VMs under ``:quotas:`` hold, and the totals.

Sent only when ``:quotas:`` sets a limit, with the default sections (no ``view``) or when a
``view`` names ``users``. ``users``, per user (at most :data:`LISTED`, those holding the most
VMs, most first): ``vms_held`` (VMs checked out and still running, plus the VMs of its
on-demand requests: in flight, their requested count; ready, their delivered VMs still
running), ``ondemand_in_flight`` and ``limits`` (each limit's value, null for none, as in
force at the user's last checkout or request). Users are keyed by name, except when
``:auth:`` is configured and the caller presents no valid token: then by a stable opaque
label ``user-<n>`` (the same user keeps its label while it holds something).
``users_summary``: ``users`` (how many hold something), their ``vms_held`` and
``ondemand_in_flight`` in total, ``listed`` (the entries of ``users``) and ``as_of`` (when
it was counted, RFC 3339).

Cost, whatever the number of users or of callers: both sections are a snapshot at most
:data:`MAX_AGE` seconds old (:meth:`UserQuotaStore.usage_snapshot
<vmpooler.actors.storage.user_quota.UserQuotaStore.usage_snapshot>`), shared by every API
process through Redis. A process serves its own copy while it is fresh
(no Redis work); once it is stale, one O(1) script call reads the shared one, and only the
first caller to find that stale counts every user (one script, once per :data:`MAX_AGE`
across all processes). Plus the token check when names may be hidden.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import falcon

from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.user_quota import UsageSnapshot, UserQuotaStore
from vmpooler.web.api_context import ApiContext
from vmpooler.web.tokens import has_valid_token

__all__ = ["LISTED", "MAX_AGE", "SECTION", "SUMMARY", "UsersView", "wants_users"]

SECTION = "users"
SUMMARY = "users_summary"
MAX_AGE = 5.0
"""Largest age, in seconds, of the counts the sections show."""
LISTED = 100
"""Most users the ``users`` section lists."""


def wants_users(ctx: ApiContext, view: str | None) -> bool:
    """Whether ``/status?view=...`` gets the sections (quotas configured, and no ``view`` or
    one naming ``users``)."""
    if not ctx.config.quotas.configured:
        return False
    return view is None or SECTION in view.split(",")


class _Rendered:
    """One snapshot's sections, built once: by name, by label, and the summary."""

    __slots__ = ("by_label", "by_name", "snapshot", "summary")

    def __init__(self, snapshot: UsageSnapshot) -> None:
        self.snapshot = snapshot
        self.by_name: dict[str, Any] = {}
        self.by_label: dict[str, Any] = {}
        for usage in snapshot.top:
            entry = {"vms_held": usage.vms_held, "ondemand_in_flight": usage.ondemand_in_flight,
                     "limits": asdict(usage.limits)}
            self.by_name[usage.user] = entry
            self.by_label[f"user-{usage.label}"] = entry
        self.summary = {"users": snapshot.users, "vms_held": snapshot.vms_held,
                        "ondemand_in_flight": snapshot.ondemand_in_flight,
                        "listed": len(snapshot.top),
                        "as_of": timefmt.rfc3339(datetime.fromtimestamp(snapshot.at, UTC))}


class UsersView:
    """The sections of one API process; thread-safe (a stale copy may be replaced by
    several threads at once, each with one cheap script call)."""

    def __init__(self, ctx: ApiContext) -> None:
        self._ctx = ctx
        self._store = UserQuotaStore(ctx.redis)
        self._last: _Rendered | None = None

    def sections(self, req: falcon.Request) -> dict[str, Any]:
        """``{"users_summary": ..., "users": ...}`` for ``req``, in body order. Callers must
        not change them: they are shared by the requests of one snapshot."""
        rendered = self._current()
        names = not self._ctx.auth_configured or has_valid_token(req, self._ctx)
        return {SUMMARY: rendered.summary,
                SECTION: rendered.by_name if names else rendered.by_label}

    def _current(self) -> _Rendered:
        now = self._ctx.clock.now()
        last = self._last
        if last is not None and 0 <= now - last.snapshot.at < MAX_AGE:
            return last
        snapshot = self._store.usage_snapshot(now, max_age=MAX_AGE, top=LISTED)
        if last is None or last.snapshot != snapshot:
            last = self._last = _Rendered(snapshot)
        return last
