"""Key names of one VM's hash, one API token's hash, and the API's per-client counters
(rate limits, failed logins).

Part of :mod:`vmpooler.actors.storage.schema`: import the names from there."""

from __future__ import annotations

import hashlib

from vmpooler.actors.storage.schema.prefix import PREFIX as _P

__all__ = [
    "login_failures_address",
    "login_failures_user",
    "ratelimit",
    "token",
    "vm",
    "vm_name",
    "vm_pattern",
]



def vm(name: str) -> str:
    """Hash of one VM's fields (reference §2.2)."""
    return f"{_P}vm__{name}"


def vm_pattern() -> str:
    """SCAN pattern matching every VM hash (``vm(name)`` for any name)."""
    return f"{_P}vm__*"


def vm_name(key: str) -> str:
    """The VM name of a VM hash key (the inverse of :func:`vm`)."""
    return key.removeprefix(f"{_P}vm__")


def token(value: str) -> str:
    """Hash ``user``, ``created``, ``last`` of one API token."""
    return f"{_P}token__{value}"


def ratelimit(cls: str, client: str) -> str:
    """Integer request counter of one rate-limit class and client (``ip:<addr>`` or
    ``token:<token>`` of an existing API token); expires ``period`` s after its creation."""
    return f"{_P}ratelimit__{cls}__{client}"


def login_failures_user(user: str) -> str:
    """Integer (ours): failed Basic logins of a user name, TTL ``login_failure_window``. The
    name is case-folded and hashed (32 hex digits of SHA-256): bounded, ``JDoe`` is ``jdoe``."""
    digest = hashlib.sha256(user.strip().casefold().encode("utf-8", "surrogatepass"))
    return f"{_P}login_failures__user__{digest.hexdigest()[:32]}"


def login_failures_address(address: str) -> str:
    """Integer (ours): failed Basic logins from a client address (≤ 64 characters), same TTL."""
    return f"{_P}login_failures__address__{address[:64]}"
