"""A user's groups read from LDAP when a token is made (``:quotas: ldap_groups``, ours;
docs/fairness.md "Who is asking").

Two ways, as configured (:class:`~vmpooler.actors.fairness.quota_policy.LdapGroups`):

* ``attribute`` (``memberOf``): the values of that attribute of the user's own entry, each
  the DN of a group; with ``base``, only the DNs of entries under ``base`` (compared RDN by
  RDN, attribute types and values without regard to case), so ``cn=release,ou=elsewhere``
  is not group ``release`` when ``base`` is ``ou=groups,…``. Without ``base`` a group is
  known by its name alone, whatever its OU;
* ``search_base``: the entries under it matching ``search_filter``, where ``{dn}`` and
  ``{user}`` are the user's DN and name, escaped for a filter (RFC 4515).

Each group is named by its ``name_attribute`` (``cn``): the value of that attribute in the
group's DN (its first RDN of that type), or, for a search, of the entry itself; a value that
is not a DN is taken as the name. Names holding a comma are left out (the token records the
groups comma-separated). The read runs on the connection bound as the user, so the user
must be allowed to read its groups.

What callers may rely on: :func:`read_groups` raises only ``LDAPException``/``OSError`` of
the connection; the result is sorted and free of duplicates.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import ldap3
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import parse_dn

from vmpooler.actors.fairness.quota_policy import LdapGroups

__all__ = ["group_name", "read_groups", "under"]

log = logging.getLogger(__name__)


def group_name(value: str, name_attribute: str) -> str | None:
    """The group's name in ``value`` (a DN, or a bare name); None when a DN has no RDN of
    type ``name_attribute``."""
    try:
        parts = parse_dn(value)
    except Exception:  # ldap3 raises several types for a value that is not a DN
        return value.strip() or None
    for attribute, name, _ in parts:
        if attribute.lower() == name_attribute.lower():
            return str(name)
    return None


def _rdns(dn: str) -> list[tuple[str, str]] | None:
    """The RDNs of ``dn`` with types and values case-folded; None when it is no DN."""
    try:
        parts = parse_dn(dn, strip=True)
    except Exception:  # ldap3 raises several types for a value that is not a DN
        return None
    return [(str(kind).strip().casefold(), str(value).strip().casefold())
            for kind, value, _ in parts]


def under(dn: str, base: str) -> bool:
    """Whether ``dn`` names an entry strictly under ``base``."""
    entry, parent = _rdns(dn), _rdns(base)
    if not entry or not parent or len(entry) <= len(parent):
        return False
    return entry[-len(parent):] == parent


def _clean(names: Iterable[str | None]) -> tuple[str, ...]:
    kept = set()
    for name in names:
        if not name:
            continue
        if "," in name:
            log.warning("[auth] ldap group %r left out: its name holds a comma", name)
            continue
        kept.add(name)
    return tuple(sorted(kept))


def read_groups(conn: ldap3.Connection, dn: str, user: str, spec: LdapGroups,
                timeout: int) -> tuple[str, ...]:
    """The names of ``dn``'s groups (module docstring), read on ``conn``."""
    if spec.search_base is None:
        conn.search(dn, "(objectClass=*)", search_scope=ldap3.BASE,
                    attributes=[spec.attribute], time_limit=timeout)
        values: list[str] = []
        for entry in conn.response or []:
            if entry.get("type") == "searchResEntry":
                found = (entry.get("attributes") or {}).get(spec.attribute) or []
                values += [found] if isinstance(found, str) else [str(v) for v in found]
        if spec.base is not None:
            values = [value for value in values if under(value, spec.base)]
        return _clean(group_name(value, spec.name_attribute) for value in values)
    search = spec.search_filter.format(dn=escape_filter_chars(dn),
                                       user=escape_filter_chars(user))
    conn.search(spec.search_base, search, search_scope=ldap3.SUBTREE,
                attributes=[spec.name_attribute], time_limit=timeout)
    names: list[str | None] = []
    for entry in conn.response or []:
        if entry.get("type") != "searchResEntry":
            continue
        value = (entry.get("attributes") or {}).get(spec.name_attribute)
        if isinstance(value, list):
            value = value[0] if value else None
        names.append(str(value) if value else group_name(str(entry.get("dn", "")),
                                                         spec.name_attribute))
    return _clean(names)
