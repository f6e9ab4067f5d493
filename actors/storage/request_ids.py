"""The rule for on-demand request ids a client chooses (``request_id`` of POST
``/ondemandvm``, the ``:requestid`` of GET and DELETE ``/ondemandvm/<id>``).

A request id becomes part of key names: ``vmpooler__odrequest__<id>`` and, for the VMs
delivered to it, ``vmpooler__<id>__<alias>__<pool>``, whose first word is the id. An id
holding ``__``, ending in ``_`` or equal to a word of the key schema would turn such a set
into a key of another kind (``vm__inj`` made ``vmpooler__vm__inj__<alias>__<pool>`` a set
among the VM hashes, which stopped every purge and health check). So an id is 1 to
:data:`MAX_LENGTH` characters of ``A-Z a-z 0-9 . _ -``, does not start or end with ``_``,
holds no ``__`` and is none of :data:`~vmpooler.actors.storage.schema.NAMESPACES`. Generated
ids (UUID v4) always pass.

What callers may rely on: :func:`request_id_problem` returns None for a valid id, else one
sentence starting with ``request_id`` that says what is wrong; it never touches Redis.
"""

from __future__ import annotations

import re

from vmpooler.actors.storage import schema

__all__ = ["MAX_LENGTH", "request_id_problem"]

MAX_LENGTH = 64
"""The longest request id accepted (a UUID has 36 characters)."""

_ALPHABET = re.compile(r"[A-Za-z0-9._-]+", re.ASCII)


def request_id_problem(value: object) -> str | None:
    """None when ``value`` is a valid request id, else why it is not."""
    if not isinstance(value, str) or not value:
        return "request_id must be a non-empty string"
    if len(value) > MAX_LENGTH:
        return f"request_id must be at most {MAX_LENGTH} characters"
    if not _ALPHABET.fullmatch(value):
        return "request_id must hold only letters, digits, '.', '_' and '-'"
    if "__" in value or value.startswith("_") or value.endswith("_"):
        return "request_id must not hold '__' nor start or end with '_'"
    if value in schema.NAMESPACES:
        return f"request_id must not be '{value}', a word of vmpooler's Redis key names"
    return None
