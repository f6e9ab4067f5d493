"""Per-user quotas of ``:quotas:`` in Redis (ours, docs/fairness.md): what each user holds,
on-demand requests created within a user's limits, and the usage of every user.

What a user holds is its held set (``schema.quota_held(user)``,
:mod:`vmpooler.actors.storage.schema.user_quota_scripts`): the VMs it checked out and its
on-demand requests. Each check and its write are one script, so concurrent clients (threads,
API processes) can never jointly exceed a limit; a member that holds nothing any more is
dropped by the next script that counts the set, so no release hook is needed anywhere. The
checkout within a quota is :meth:`CheckoutStore.checkout
<vmpooler.actors.storage.checkout_store.CheckoutStore.checkout>` with a
:class:`~vmpooler.actors.fairness.quota.QuotaTicket`. The rules (who gets which limits) and
the verdict (:class:`~vmpooler.actors.fairness.quota.CreateOutcome`) are
:mod:`vmpooler.actors.fairness.quota`'s.

What callers may rely on: every method is one round trip, thread-safe (one Redis client)
and may raise ``redis.RedisError``; a request created here is written exactly as
:meth:`~vmpooler.actors.storage.request_store.RequestStore.create` writes it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from vmpooler.actors.fairness.quota import (
    CreateOutcome,
    CreateVerdict,
    QuotaRefusal,
    QuotaTicket,
    parse_limits,
)
from vmpooler.actors.fairness.quota_policy import Limits
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import (
    Entry,
    RequestOrigin,
    format_requested,
    origin_args,
)
from vmpooler.actors.storage.schema import UserQuotaScripts

__all__ = ["UsageSnapshot", "UserQuotaStore", "UserUsage", "ticket_keys"]



def ticket_keys(ticket: QuotaTicket) -> list[str]:
    """The keys a quota'd write of ``ticket``'s user touches, as the scripts' trailing KEYS:
    the user's held set, the users index and the label counter."""
    return [schema.quota_held(ticket.user), schema.quota_users(), schema.quota_labels()]

@dataclass(frozen=True, slots=True)
class UserUsage:
    """One user of the usage view: its opaque ``label`` (a number, stable while the user
    holds something), what it holds and the limits in force at its last write."""

    user: str
    label: int
    vms_held: int
    ondemand_in_flight: int
    limits: Limits


@dataclass(frozen=True, slots=True)
class UsageSnapshot:
    """The usage view as last counted (:meth:`UserQuotaStore.usage_snapshot`): when (``at``,
    the counting caller's clock), how many users held something then and their totals, and
    ``top``, the users holding the most VMs (at most the number asked for), most first.
    ``counted`` is True when the call that returned it did the counting."""

    at: float
    users: int
    vms_held: int
    ondemand_in_flight: int
    top: tuple[UserUsage, ...]
    counted: bool = False


class UserQuotaStore:
    """Creates on-demand requests within a user's quota and reads every user's usage."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._create = client.register_script(UserQuotaScripts.CREATE_WITHIN_QUOTA)
        self._usage = client.register_script(UserQuotaScripts.USAGE)
        self._snapshot = client.register_script(UserQuotaScripts.USAGE_SNAPSHOT)

    def create(self, request_id: str, entries: Sequence[Entry], *, created: int,
               ticket: QuotaTicket, origin: RequestOrigin | None, token: str | None = None,
               token_user: str | None = None, lifetime_cap: int | None = None
               ) -> CreateOutcome:
        """Record and queue a new request of ``ticket.user`` if the id is free, the user has
        fewer requests in flight than ``ticket.limits.ondemand_in_flight`` and its held VMs plus the
        request's stay within ``ticket.limits.vms_held``. With ``lifetime_cap`` (hours), every
        VM later handed to the request gets at most that lifetime (field ``quota_lifetime``)."""
        asked = sum(entry.count for entry in entries)
        reply = self._create(
            keys=[schema.odrequest(request_id), schema.provisioning_request(),
                  *ticket_keys(ticket)],
            args=[request_id, created, format_requested(entries), token or "",
                  token_user or "", *origin_args(origin),
                  _arg(ticket.limits.ondemand_in_flight), _arg(ticket.limits.vms_held), asked,
                  ticket.index_text, schema.odrequest(""), _arg(lifetime_cap)],
        )
        code, first, second = (int(value) for value in reply)
        if code == 1:
            return CreateOutcome(CreateVerdict.CREATED, held=first, in_flight=second)
        if code == 0:
            return CreateOutcome(CreateVerdict.ID_TAKEN)
        name = "ondemand_in_flight" if code == -1 else "vms_held"
        return CreateOutcome(CreateVerdict.REFUSED, QuotaRefusal(name, first, second))

    def usage(self) -> list[UserUsage]:
        """Every user holding something, by label; users holding nothing any more are
        dropped from the index on the way (one script)."""
        reply = self._usage(keys=[schema.quota_users()],
                            args=[schema.quota_held(""), schema.odrequest("")])
        users: list[UserUsage] = []
        for i in range(0, len(reply), 4):
            label, _, limits = str(reply[i + 1]).partition("|")
            users.append(UserUsage(str(reply[i]), int(label) if label.isdigit() else 0,
                                   int(reply[i + 2]), int(reply[i + 3]), parse_limits(limits)))
        return sorted(users, key=lambda usage: usage.label)

    def usage_snapshot(self, now: float, *, max_age: float, top: int,
                       ttl: int = 300) -> UsageSnapshot:
        """The usage view shared by every caller: the stored one while it was counted less
        than ``max_age`` seconds before ``now`` (one O(1) script call), else counted over
        every user now (dropping those holding nothing, as :meth:`usage`), stored for
        ``ttl`` seconds and returned. Concurrent callers finding it stale count it once: the
        others find the first one's count fresh."""
        reply = self._snapshot(keys=[schema.quota_users(), schema.quota_usage_snapshot()],
                               args=[schema.quota_held(""), schema.odrequest(""), repr(now),
                                     repr(max_age), top, ttl])
        rows = json.loads(reply[4])
        users = tuple(_usage_row(row) for row in (rows if isinstance(rows, list) else ()))
        return UsageSnapshot(float(reply[0]), int(reply[1]), int(reply[2]), int(reply[3]),
                             users, int(reply[5]) == 1)


def _usage_row(row: Sequence[object]) -> UserUsage:
    """One ``[user, index entry, held, in flight]`` row of a snapshot."""
    label, _, limits = str(row[1]).partition("|")
    return UserUsage(str(row[0]), int(label) if label.isdigit() else 0, _count(row[2]),
                     _count(row[3]), parse_limits(limits))


def _count(value: object) -> int:
    return int(value) if isinstance(value, int | float | str) else 0


def _arg(limit: int | None) -> str | int:
    return "" if limit is None else int(limit)
