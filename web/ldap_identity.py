"""The user an LDAP bind proves (docs/security.md "One user per account").

A directory compares names loosely: OpenLDAP binds ``uid=BOB``, ``uid=\\ bob`` and the
full-width ``uid=ｂｏｂ`` as bob's entry. The user of a login is therefore not the name as
typed but the entry's own identifier, read on the connection bound as the user:

* the value of the entry's RDN when it is of the ``user_object`` type the bind used
  (``uid=bob,ou=people,…`` gives ``bob``);
* else the smallest value of the entry's ``user_object`` attribute, each in its normal form
  (one answer whichever of several values was typed);

put through :func:`~vmpooler.actors.fairness.names.normal_user_name`. When the entry cannot
be read (the user may not read its own entry), the typed name in its normal form is the user
and the caller logs it.

What callers may rely on: :func:`read_entry` raises only ``LDAPException``/``OSError`` of the
connection; :func:`entry_user` is pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import ldap3
from ldap3.utils.dn import parse_dn

from vmpooler.actors.fairness.names import normal_user_name

__all__ = ["LdapEntry", "entry_user", "read_entry"]


@dataclass(frozen=True, slots=True)
class LdapEntry:
    """The bound user's entry: its ``dn`` as the directory stores it and the values of its
    ``user_object`` attribute (empty when the entry could not be read)."""

    dn: str
    names: tuple[str, ...] = ()


def read_entry(conn: ldap3.Connection, dn: str, user_object: str, timeout: int) -> LdapEntry:
    """The entry at ``dn`` (the DN the bind used, in any spelling) read on ``conn``; an
    entry the server does not return gives ``LdapEntry(dn)``."""
    conn.search(dn, "(objectClass=*)", search_scope=ldap3.BASE, attributes=[user_object],
                time_limit=timeout)
    for entry in conn.response or []:
        if entry.get("type") != "searchResEntry":
            continue
        found = (entry.get("attributes") or {}).get(user_object) or []
        values = [found] if isinstance(found, str) else [str(v) for v in found]
        return LdapEntry(str(entry.get("dn") or dn), tuple(values))
    return LdapEntry(dn)


def _rdn_value(dn: str, attribute: str) -> str | None:
    """The value of ``dn``'s first RDN when it is of type ``attribute``, else None."""
    try:
        parts = parse_dn(dn, strip=True)
    except Exception:  # ldap3 raises several types for a value that is not a DN
        return None
    if parts and parts[0][0].lower() == attribute.lower():
        return str(parts[0][1])
    return None


def _smallest(values: Iterable[str]) -> str | None:
    names = sorted(n for n in (normal_user_name(v) for v in values) if n)
    return names[0] if names else None


def entry_user(entry: LdapEntry, user_object: str, typed: str) -> tuple[str, bool]:
    """``(user, from_entry)``: the entry's own identifier (module docstring) in its normal
    form and True, or the ``typed`` name in its normal form and False when the entry gave
    none."""
    if entry.names:
        named = _rdn_value(entry.dn, user_object)
        if named is not None and normal_user_name(named):
            return normal_user_name(named), True
        smallest = _smallest(entry.names)
        if smallest is not None:
            return smallest, True
    return normal_user_name(typed), False
