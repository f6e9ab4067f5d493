"""Validation of the ``:quotas:`` section (ours; docs/fairness.md) into a
:class:`~vmpooler.actors.fairness.quota_policy.QuotaPolicy`.

::

    :quotas:
      anonymous: false          # true: requests without a token are all user "anonymous"
      default: {vms_held: 20, ondemand_in_flight: 5, vms_per_request: 10, lifetime_hours: 48}
      users:
        alice: {vms_held: 100}
      groups:
        release: {vms_held: 200, share: 3}
      members:                  # groups for sites without LDAP (added to LDAP's)
        release: [alice, bob]
      high_priority: {users: [alice], groups: [release]}
      ldap_groups: {attribute: memberOf}   # or {search_base: ..., search_filter: ...}

Every problem names its key (``quotas.users.alice.vms_held``); a limit is a whole number of
at least 0 (0 refuses everything) or ``unlimited``; a limit left out (or null) is not set by
that entry; ``share`` is a number above 0.

User names (the keys of ``users``, the lists of ``members`` and ``high_priority: users``) are
kept in their normal form (:func:`~vmpooler.actors.fairness.names.normal_user_name`: NFKC,
case-folded, trimmed), as every user is compared; two keys of ``users`` that are the same user
in that form (``Bob`` and ``bob``) are a problem naming the second one.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from vmpooler.actors.config._check import Checker
from vmpooler.actors.config._values import show
from vmpooler.actors.fairness.names import normal_user_name
from vmpooler.actors.fairness.quota_policy import (
    LIMIT_NAMES,
    GroupQuota,
    LdapGroups,
    QuotaEntry,
    QuotaPolicy,
)

__all__ = ["quota_policy"]

Path = tuple[str | int, ...]
_SECTION_KEYS = ("anonymous", "default", "users", "groups", "members", "high_priority",
                 "ldap_groups")
_LDAP_KEYS = ("attribute", "search_base", "search_filter", "name_attribute", "base")


def quota_policy(section: Mapping[str, Any], chk: Checker) -> QuotaPolicy:
    """The policy of ``section`` (the ``:quotas:`` mapping); problems are recorded in
    ``chk`` and the offending parts left out."""
    path: Path = ("quotas",)
    _unknown(section, _SECTION_KEYS, path, chk)
    users = _users(chk.mapping(section.get("users"), (*path, "users")), (*path, "users"), chk)
    groups = {str(name): _group(entry, (*path, "groups", str(name)), chk)
              for name, entry in chk.mapping(section.get("groups"), (*path, "groups")).items()}
    members = {str(group): frozenset(_user_names(listed, (*path, "members", str(group)), chk))
               for group, listed in chk.mapping(section.get("members"),
                                                (*path, "members")).items()}
    high = chk.mapping(section.get("high_priority"), (*path, "high_priority"))
    _unknown(high, ("users", "groups"), (*path, "high_priority"), chk)
    return QuotaPolicy(
        default=_limits(section.get("default"), (*path, "default"), chk),
        users=MappingProxyType(users), groups=MappingProxyType(groups),
        members=MappingProxyType(members),
        high_priority_users=frozenset(_user_names(high.get("users"),
                                             (*path, "high_priority", "users"), chk)),
        high_priority_groups=frozenset(_names(high.get("groups"),
                                              (*path, "high_priority", "groups"), chk)),
        anonymous=bool(chk.get(section, "anonymous", path, "bool", False)),
        ldap_groups=_ldap(section.get("ldap_groups"), (*path, "ldap_groups"), chk),
    )


def _unknown(section: Mapping[str, Any], known: tuple[str, ...], path: Path,
             chk: Checker) -> None:
    for key in section:
        if key not in known:
            chk.fail((*path, str(key)), f"unknown key {key!r}: expected one of "
                                        f"{', '.join(known)}")


def _limits(value: Any, path: Path, chk: Checker, *,
            extra: tuple[str, ...] = ()) -> QuotaEntry:
    entry = chk.mapping(value, path)
    _unknown(entry, LIMIT_NAMES + extra, path, chk)
    limits: dict[str, int | None] = {}
    for name in LIMIT_NAMES:
        written = entry.get(name)
        if written is None:
            continue
        if isinstance(written, str) and written.strip().lower() == "unlimited":
            limits[name] = None
            continue
        number = chk.get(entry, name, path, "int", -1, minimum=0)
        if number >= 0:
            limits[name] = number
    return MappingProxyType(limits)


def _users(section: Mapping[str, Any], path: Path, chk: Checker) -> dict[str, QuotaEntry]:
    """The ``users`` entries keyed by the normal form of their names."""
    users: dict[str, QuotaEntry] = {}
    written: dict[str, str] = {}
    for name, entry in section.items():
        key = (*path, str(name))
        normal = normal_user_name(str(name))
        if not normal:
            chk.fail(key, f"user name {str(name)!r} is empty once trimmed")
            continue
        if normal in written:
            chk.fail(key, f"user {str(name)!r} is the same user as {written[normal]!r} (user "
                          f"names are compared NFKC, case-folded and trimmed: {normal!r})")
            continue
        written[normal] = str(name)
        users[normal] = _limits(entry, key, chk)
    return users


def _group(value: Any, path: Path, chk: Checker) -> GroupQuota:
    entry = chk.mapping(value, path)
    share = chk.get(entry, "share", path, "number", 1.0)
    if share <= 0:
        chk.fail((*path, "share"), f"share must be above 0, got {show(entry.get('share'))}")
        share = 1.0
    return GroupQuota(_limits(entry, path, chk, extra=("share",)), float(share))


def _names(value: Any, path: Path, chk: Checker) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(
            isinstance(item, str | int) and not isinstance(item, bool) for item in value):
        chk.fail(path, f"expected a list of names, got {show(value)}")
        return []
    return [str(item) for item in value]


def _user_names(value: Any, path: Path, chk: Checker) -> list[str]:
    """A list of user names, each in its normal form."""
    return [normal_user_name(name) for name in _names(value, path, chk)]


def _ldap(value: Any, path: Path, chk: Checker) -> LdapGroups | None:
    if value is None:
        return None
    entry = chk.mapping(value, path)
    _unknown(entry, _LDAP_KEYS, path, chk)
    defaults = LdapGroups()
    spec = LdapGroups(
        attribute=chk.get(entry, "attribute", path, "str", defaults.attribute),
        search_base=chk.get(entry, "search_base", path, "str", None),
        search_filter=chk.get(entry, "search_filter", path, "str", defaults.search_filter),
        name_attribute=chk.get(entry, "name_attribute", path, "str", defaults.name_attribute),
        base=chk.get(entry, "base", path, "str", None),
    )
    if spec.search_base is None and spec.base is None:
        chk.note(f"quotas.ldap_groups: without 'base', a group is known by its "
                 f"{spec.name_attribute} alone: {spec.name_attribute}=release in any OU "
                 f"counts as group release (set base to the DN the groups live under)")
    return spec
