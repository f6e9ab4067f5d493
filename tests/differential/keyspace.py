"""A Redis key space as comparable data, and what one request changed in it.

:func:`dump` reads every key with its type, value and whether it expires. :func:`changes`
turns two dumps into a set of atomic changes — a key appearing, disappearing or changing
type or expiry, a hash field's new value, a set member added or removed, a zset member's new
score, a string's new value — so two servers' changes can be compared one by one, and a
difference made by one request is not reported again for every later request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

__all__ = ["Change", "Dump", "changes", "dump"]

Dump = dict[str, tuple[str, Any, bool]]
"""key → (type, value, expires). Values: str (string), dict (hash), frozenset (set),
dict member→score (zset), tuple (list), int (stream: its length)."""

Change = tuple[str, str, str]
"""(key, item, new value): item is ``<type>``, ``<expires>``, a hash field, ``+member`` /
``-member`` of a set, ``zset:member`` or ``<value>``."""


def dump(client: redis.Redis) -> Dump:
    """Every key of ``client``'s database (``decode_responses=True``)."""
    out: Dump = {}
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        value: Any
        if kind == "string":
            value = client.get(key)
        elif kind == "hash":
            value = client.hgetall(key)
        elif kind == "set":
            value = frozenset(client.smembers(key))
        elif kind == "zset":
            value = dict(client.zrange(key, 0, -1, withscores=True))
        elif kind == "list":
            value = tuple(client.lrange(key, 0, -1))
        elif kind == "stream":
            value = client.xlen(key)
        else:
            continue  # gone meanwhile
        out[key] = (kind, value, client.ttl(key) > 0)
    return out


def changes(before: Dump, after: Dump, text: Callable[[str], str],
            score: Callable[[float], str]) -> set[Change]:
    """The changes from ``before`` to ``after``, every name and value passed through ``text``
    and every zset score through ``score`` (the caller's normalisation)."""
    found: set[Change] = set()
    for raw_key in before.keys() | after.keys():
        key = text(raw_key)
        old, new = before.get(raw_key), after.get(raw_key)
        if old == new:
            continue
        old_kind = old[0] if old else "none"
        new_kind = new[0] if new else "none"
        if old_kind != new_kind:
            found.add((key, "<type>", new_kind))
        if bool(old and old[2]) != bool(new and new[2]):
            found.add((key, "<expires>", str(bool(new and new[2]))))
        old_value = old[1] if old and old_kind == new_kind else None
        new_value = new[1] if new else None
        found |= _value_changes(key, new_kind, old_value, new_value, text, score)
    return found


def _value_changes(key: str, kind: str, old: Any, new: Any, text: Callable[[str], str],
                   score: Callable[[float], str]) -> set[Change]:
    found: set[Change] = set()
    if kind == "hash":
        old, new = old or {}, new or {}
        for field in old.keys() | new.keys():
            if old.get(field) != new.get(field):
                value = new.get(field)
                found.add((key, text(field), "<deleted>" if value is None else text(value)))
    elif kind == "set":
        old, new = old or frozenset(), new or frozenset()
        found |= {(key, "+" + text(m), "") for m in new - old}
        found |= {(key, "-" + text(m), "") for m in old - new}
    elif kind == "zset":
        old, new = old or {}, new or {}
        for member in old.keys() | new.keys():
            if old.get(member) != new.get(member):
                value = new.get(member)
                found.add((key, "zset:" + text(member),
                           "<deleted>" if value is None else score(value)))
    elif kind in ("string", "list", "stream"):
        found.add((key, "<value>", text(str(new))))
    return found
