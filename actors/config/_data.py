"""Helpers for plain YAML-shaped data: deep freezing, thawing and secret masking."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["MASK", "SECRET_WORDS", "empty_mapping", "freeze", "is_masked_value", "is_secret_key",
           "mask_secrets", "thaw"]

MASK = "********"

SECRET_WORDS = ("password", "passwd", "passphrase", "secret", "token", "credential", "key")
"""A mapping key containing one of these (any case) names a secret: ``secret_key``,
``credentials``, ``private_key``, ``access_key``, ``apiKey``, ``bind_password``…"""


def empty_mapping() -> Mapping[str, Any]:
    """A new read-only empty mapping (a dataclass ``default_factory``)."""
    return MappingProxyType({})


def freeze(value: Any) -> Any:
    """Return a read-only deep copy: mappings become ``MappingProxyType``, lists tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: freeze(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(item) for item in value)
    return value


def thaw(value: Any) -> Any:
    """Return a plain mutable deep copy (dicts and lists) of frozen or plain data."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(item) for item in value]
    return value


def is_secret_key(key: object) -> bool:
    """Whether a mapping key names a secret: it contains one of :data:`SECRET_WORDS`.

    Broad on purpose: a harmless key that happens to match (``monkey``) is masked too,
    which costs nothing, while a missed secret leaks. No key vmpooler's clients read from
    ``/config`` (``name``, ``template``, ``size``, ``alias``, ``clone_target``, ``domain``,
    ``provider``, ``ready_ttl``…) contains one of them.
    """
    if not isinstance(key, str):
        return False
    name = key.lower()
    return any(word in name for word in SECRET_WORDS)


def is_masked_value(key: object, value: Any) -> bool:
    """Whether ``mask_secrets`` hides ``value`` found under ``key``: a secret key's value,
    unless null or a boolean (a switch such as ``require_token_for_vm_changes: true`` is no
    secret; a number may be a PIN, so it is hidden)."""
    return is_secret_key(key) and value is not None and not isinstance(value, bool)


def mask_secrets(value: Any) -> Any:
    """Return a plain deep copy in which the value of every secret key (whole, even a
    mapping or a list) is ``"********"`` (see :func:`is_masked_value`)."""
    if isinstance(value, Mapping):
        return {
            key: MASK if is_masked_value(key, item) else mask_secrets(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask_secrets(item) for item in value]
    return value
