"""Helpers for plain YAML-shaped data: deep freezing, thawing and secret masking."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["MASK", "empty_mapping", "freeze", "is_secret_key", "mask_secrets", "thaw"]

MASK = "********"

_SECRET_NAMES = frozenset({"password", "secret", "token", "api_key", "apikey"})
_SECRET_SUFFIXES = ("_password", "_secret", "_token", "_api_key")


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
    """Whether a mapping key names a secret (``password``, ``token``, ``*_password`` …)."""
    if not isinstance(key, str):
        return False
    name = key.lower().lstrip(":")
    return name in _SECRET_NAMES or name.endswith(_SECRET_SUFFIXES)


def mask_secrets(value: Any) -> Any:
    """Return a plain deep copy in which every non-null secret value is ``"********"``."""
    if isinstance(value, Mapping):
        return {
            key: MASK if is_secret_key(key) and item is not None else mask_secrets(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask_secrets(item) for item in value]
    return value
