"""The ``:quotas:`` policy: each user's limits, share of clone capacity and priorities.

A request's user is the token's user when it has one, else its client address, or
``anonymous`` when ``:quotas: anonymous: true`` (:class:`Requester`). User names are compared
in their normal form (:func:`~vmpooler.actors.fairness.names.normal_user_name`): the
configuration parser writes the names of ``users``, ``members`` and ``high_priority`` in it,
and every method puts the requester's name through it too. Users belong to groups:
the static ``members`` map, and groups read from LDAP when the token was made
(``ldap_groups``).

Per user and per limit: the user's own entry if it sets that limit, else the most generous
value its groups set (``unlimited`` beats any number), else ``default``'s (unset there: no
limit); a group that only sets a ``share`` changes no limit. A user's share of clone capacity
is the largest ``share`` of its groups (1 without a group); ``high_priority`` names the users
and groups who may ask for ``priority: high``.

What a caller may rely on: every value is immutable and the methods are pure; an empty
policy (no ``:quotas:`` section) limits nobody, gives everybody a share of 1 and lets nobody
use ``high``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from vmpooler.actors.fairness.names import normal_user_name

__all__ = ["ANONYMOUS", "LIMIT_NAMES", "PRIORITIES", "GroupQuota", "LdapGroups", "Limits",
           "QuotaPolicy", "Requester"]

ANONYMOUS = "anonymous"
PRIORITIES = ("high", "normal", "low")
"""The priorities of ``POST /ondemandvm``, most urgent first."""


def _empty() -> Mapping[str, object]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Limits:
    """One quota entry; None is no limit. ``vms_held``: VMs checked out plus VMs of on-demand
    requests (in flight or ready) at once; ``ondemand_in_flight``: on-demand requests not yet
    ready, failed or deleted; ``vms_per_request``: VMs in one checkout or on-demand request;
    ``lifetime_hours``: the longest lifetime a VM may be given."""

    vms_held: int | None = None
    ondemand_in_flight: int | None = None
    vms_per_request: int | None = None
    lifetime_hours: int | None = None



LIMIT_NAMES = tuple(f.name for f in fields(Limits))

QuotaEntry = Mapping[str, int | None]
"""The limits one entry of ``:quotas:`` sets, by name (None: ``unlimited``); a limit it does
not set is absent."""


@dataclass(frozen=True, slots=True)
class GroupQuota:
    """A group's limits and its ``share`` (weight) of clone capacity."""

    limits: QuotaEntry = field(default_factory=_empty)  # type: ignore[arg-type]
    share: float = 1.0


@dataclass(frozen=True, slots=True)
class LdapGroups:
    """How to read a user's groups from LDAP when a token is made: the values of
    ``attribute`` of the user's entry (``memberOf``) or, with ``search_base``, the entries
    under it matching ``search_filter`` (``{dn}`` and ``{user}`` filled in); each group is
    named by the first value of its ``name_attribute`` (``cn``) in its DN. With ``base``,
    an ``attribute`` value counts only when it is the DN of an entry under ``base`` (without
    it, ``cn=release`` in any OU is group ``release``)."""

    attribute: str = "memberOf"
    search_base: str | None = None
    search_filter: str = "(member={dn})"
    name_attribute: str = "cn"
    base: str | None = None


@dataclass(frozen=True, slots=True)
class Requester:
    """Who is asking: ``user`` (the token's user in its normal form, the client address or
    ``anonymous``), its ``groups``, and whether it presented a token (``authenticated``)."""

    user: str
    groups: frozenset[str] = frozenset()
    authenticated: bool = False


@dataclass(frozen=True, slots=True)
class QuotaPolicy:
    """The whole ``:quotas:`` section, validated."""

    default: QuotaEntry = field(default_factory=_empty)  # type: ignore[arg-type]
    users: Mapping[str, QuotaEntry] = field(default_factory=_empty)  # type: ignore[arg-type]
    groups: Mapping[str, GroupQuota] = field(default_factory=_empty)  # type: ignore[arg-type]
    members: Mapping[str, frozenset[str]] = field(default_factory=_empty)  # type: ignore[arg-type]
    high_priority_users: frozenset[str] = frozenset()
    high_priority_groups: frozenset[str] = frozenset()
    anonymous: bool = False
    ldap_groups: LdapGroups | None = None

    @property
    def configured(self) -> bool:
        """True when a site set any limit (without one, nothing is ever refused)."""
        return any(value is not None for entry in (
            self.default, *self.users.values(), *(g.limits for g in self.groups.values()))
            for value in entry.values())

    def groups_of(self, user: str, known: Iterable[str] = ()) -> frozenset[str]:
        """The groups of ``user``: those of the ``members`` map, and ``known`` ones (LDAP)."""
        user = normal_user_name(user)
        listed = {group for group, users in self.members.items() if user in users}
        return frozenset(listed.union(known))

    def entry_of(self, user: str) -> QuotaEntry:
        """The ``users`` entry of ``user`` (any spelling of it); empty when none."""
        return self.users.get(normal_user_name(user), {})

    def limits_for(self, requester: Requester) -> Limits:
        """Per limit: the user's own entry, else the most generous of its groups', else
        ``default``."""
        own = self.entry_of(requester.user)
        groups = [self.groups[g].limits for g in requester.groups if g in self.groups]
        resolved: dict[str, int | None] = {}
        for name in LIMIT_NAMES:
            if name in own:
                resolved[name] = own[name]
                continue
            set_by_groups = [entry[name] for entry in groups if name in entry]
            if set_by_groups:
                resolved[name] = None if None in set_by_groups else max(
                    v for v in set_by_groups if v is not None)
            else:
                resolved[name] = self.default.get(name)
        return Limits(**resolved)

    def share_of(self, requester: Requester) -> float:
        """The user's weight in the fair share of clone capacity: its groups' largest
        ``share``, 1 without a configured group."""
        shares = [self.groups[g].share for g in requester.groups if g in self.groups]
        return max(shares) if shares else 1.0

    def may_use_high(self, requester: Requester) -> bool:
        """Whether the user may ask for ``priority: high``."""
        return normal_user_name(requester.user) in self.high_priority_users or bool(
            requester.groups & self.high_priority_groups)
