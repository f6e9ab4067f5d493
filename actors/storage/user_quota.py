"""Per-user quotas of ``:quotas:`` in Redis (ours, docs/fairness.md): what each user holds,
on-demand requests created within a user's limits, and the usage of every user.

What a user holds is its held set (``schema.quota_held(user)``,
:mod:`vmpooler.actors.storage.schema.user_quota_scripts`): the VMs it checked out and its
on-demand requests. Each check and its write are one script, so concurrent clients (threads,
API processes) can never jointly exceed a limit; a member that holds nothing any more is
dropped by the next script that counts the set, so no release hook is needed anywhere. The
checkout within a quota is :meth:`CheckoutStore.checkout
<vmpooler.actors.storage.checkout_store.CheckoutStore.checkout>` with a :class:`QuotaTicket`.

What callers may rely on: every method is one round trip, thread-safe (one Redis client)
and may raise ``redis.RedisError``; a request created here is written exactly as
:meth:`~vmpooler.actors.storage.request_store.RequestStore.create` writes it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from enum import Enum

import redis

from vmpooler.actors.fairness.policy import LIMIT_NAMES, Limits
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import (
    Entry,
    RequestOrigin,
    format_requested,
    origin_args,
)
from vmpooler.actors.storage.schema import UserQuotaScripts

__all__ = ["CreateVerdict", "QuotaCreate", "QuotaRefusal", "QuotaTicket", "UsageSnapshot",
           "UserQuotaStore", "UserUsage", "limits_text", "parse_limits"]


@dataclass(frozen=True, slots=True)
class QuotaTicket:
    """Who a quota'd write is for and the limits that apply to it (resolved by the
    caller)."""

    user: str
    limits: Limits

    @property
    def index_text(self) -> str:
        """The limits as the users index records them."""
        return limits_text(self.limits)

    def keys(self) -> list[str]:
        """The held set, the users index and the label counter (scripts' trailing KEYS)."""
        return [schema.quota_held(self.user), schema.quota_users(), schema.quota_labels()]


@dataclass(frozen=True, slots=True)
class QuotaRefusal:
    """A write refused by a quota: the limit's name (``vms_held``, ``ondemand_in_flight``),
    the limit and what the user had in use then."""

    quota: str
    limit: int
    in_use: int


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


class CreateVerdict(Enum):
    """What :meth:`UserQuotaStore.create` did."""

    CREATED = 1
    ID_TAKEN = 0
    REFUSED = -1


@dataclass(frozen=True, slots=True)
class QuotaCreate:
    """The verdict; ``refusal`` when REFUSED; ``held`` and ``in_flight`` when CREATED (the
    user's counts including the new request)."""

    verdict: CreateVerdict
    refusal: QuotaRefusal | None = None
    held: int = 0
    in_flight: int = 0


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
               ticket: QuotaTicket, origin: RequestOrigin, token: str | None = None,
               token_user: str | None = None, lifetime_cap: int | None = None
               ) -> QuotaCreate:
        """Record and queue a new request of ``ticket.user`` if the id is free, the user has
        fewer requests in flight than ``ticket.limits.ondemand_in_flight`` and its held VMs plus the
        request's stay within ``ticket.limits.vms_held``. With ``lifetime_cap`` (hours), every
        VM later handed to the request gets at most that lifetime (field ``quota_lifetime``)."""
        asked = sum(entry.count for entry in entries)
        reply = self._create(
            keys=[schema.odrequest(request_id), schema.provisioning_request(),
                  *ticket.keys()],
            args=[request_id, created, format_requested(entries), token or "",
                  token_user or "", *origin_args(origin),
                  _arg(ticket.limits.ondemand_in_flight), _arg(ticket.limits.vms_held), asked,
                  ticket.index_text, schema.odrequest(""), _arg(lifetime_cap)],
        )
        code, first, second = (int(value) for value in reply)
        if code == 1:
            return QuotaCreate(CreateVerdict.CREATED, held=first, in_flight=second)
        if code == 0:
            return QuotaCreate(CreateVerdict.ID_TAKEN)
        name = "ondemand_in_flight" if code == -1 else "vms_held"
        return QuotaCreate(CreateVerdict.REFUSED, QuotaRefusal(name, first, second))

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
