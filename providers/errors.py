"""Errors a provider raises, and the permanent/transient classification the core relies on.

A provider never retries, backs off or trips a breaker itself: it raises, and the core
(``ProviderActor``) decides. The only question it asks of an error is :func:`is_permanent`:
a permanent error will fail again on retry (bad template, bad credentials, a bug), so an
on-demand request gives up at once instead of burning its ``max_vm_retries``.
"""

from __future__ import annotations

import re

__all__ = [
    "AuthenticationError",
    "ClusterNotFoundError",
    "ConnectionLostError",
    "DatastoreNotFoundError",
    "FolderNotFoundError",
    "NetworkNotFoundError",
    "PermanentProviderError",
    "PermissionDeniedError",
    "ProviderError",
    "TaskLostError",
    "TemplateNotFoundError",
    "TransientProviderError",
    "VmNotFoundError",
    "is_permanent",
]


class ProviderError(Exception):
    """Base class of every error a provider raises on purpose.

    ``permanent`` tells the core whether retrying the same call can ever succeed. Plain
    ``ProviderError`` and its subclasses default to transient (worth retrying), unless the
    message matches one of vmpooler's permanent patterns (see :func:`is_permanent`).
    """

    permanent: bool = False


class TransientProviderError(ProviderError):
    """A failure that may go away on retry: a timeout, a busy host, a dropped connection."""


class PermanentProviderError(ProviderError):
    """A failure that retrying cannot fix: bad configuration, missing template, no support."""

    permanent = True


class ConnectionLostError(TransientProviderError):
    """The hypervisor could not be reached or dropped the connection (it may be restarting)."""


class TaskLostError(TransientProviderError):
    """The hypervisor no longer knows the task of a call in flight: it restarted (or was
    replaced) meanwhile, and the task vanished with it. The hypervisor answered, so this
    says nothing about its health: the core does not count it against the circuit breaker.
    The call's work is lost (a clone: its slot is released and the clone made again)."""


class TemplateNotFoundError(PermanentProviderError):
    """The pool's template does not exist where the configuration says."""


class FolderNotFoundError(PermanentProviderError):
    """The pool's folder does not exist and may not be created."""


class DatastoreNotFoundError(PermanentProviderError):
    """The pool's datastore does not exist in its datacenter."""


class ClusterNotFoundError(PermanentProviderError):
    """The pool's clone target (cluster, host or resource pool) or datacenter does not exist."""


class NetworkNotFoundError(PermanentProviderError):
    """The pool's network does not exist in its datacenter."""


class AuthenticationError(PermanentProviderError):
    """The hypervisor refused the configured credentials."""


class PermissionDeniedError(PermanentProviderError):
    """The configured user lacks a privilege the call needs; ``privilege`` names it when the
    hypervisor said which (None when it did not)."""

    def __init__(self, message: str, privilege: str | None = None) -> None:
        super().__init__(message)
        self.privilege = privilege


class VmNotFoundError(ProviderError):
    """The VM the call names does not exist (in that pool) on the provider.

    Transient by classification: the core normally treats it as "gone", not as a retry case.
    """


# vmpooler 3.9.1's permanent-error class names (Ruby), plus Python's programming errors
# TypeError and AttributeError: both are Python's equivalent of Ruby's ArgumentError /
# NoMethodError (a bad call or a missing method), so retrying them only repeats the bug.
# Matched on the exact class name, as vmpooler does (subclasses are not included).
_PERMANENT_CLASS_NAMES = frozenset(
    {"ArgumentError", "NoMethodError", "NameError", "TypeError", "AttributeError"}
)

_SEP = r"[\s_-]+"  # words may be separated by spaces, underscores or hyphens
_NAME = r"(?:\S+" + _SEP + r")?"  # optional object name in between, e.g. "template 'x' not found"


def _phrase(*words: str) -> str:
    return _SEP.join(words)


# vmpooler 3.9.1's permanent message patterns, matched case-insensitively anywhere in the
# message; "invalid … path" means the words "invalid" and "path" with anything between.
# Extension: an optional single token (the object's name) may sit between the object and
# the verb, so "Template 'centos-7' not found" is permanent too.
_PERMANENT_MESSAGE = re.compile(
    "|".join(
        [
            "template" + _SEP + _NAME + _phrase("not", "found"),
            "template" + _SEP + _NAME + _phrase("does", "not", "exist"),
            "invalid" + _SEP + r"(?:.*[\s_-])?path",
            "folder" + _SEP + _NAME + _phrase("not", "found"),
            "datastore" + _SEP + _NAME + _phrase("not", "found"),
            _phrase("resource", "pool") + _SEP + _NAME + _phrase("not", "found"),
            _phrase("permission", "denied"),
            _phrase("authentication", "failed"),
            _phrase("invalid", "credentials"),
            _phrase("configuration", "error"),
        ]
    ),
    re.IGNORECASE,
)


def is_permanent(exc: BaseException) -> bool:
    """Return True when retrying the call that raised ``exc`` cannot succeed.

    Permanent are: any :class:`ProviderError` whose ``permanent`` attribute is true
    (:class:`PermanentProviderError`); any exception whose class name is exactly
    ``ArgumentError``, ``NoMethodError``, ``NameError`` (vmpooler's list), ``TypeError`` or
    ``AttributeError`` (our addition: Python programming errors); any exception whose
    message matches vmpooler's patterns — template not found / does not exist, invalid …
    path, folder / datastore / resource pool not found, permission denied, authentication
    failed, invalid credentials, configuration error — case-insensitively, with spaces,
    underscores or hyphens between the words. Everything else is transient. Never raises.
    """
    if isinstance(exc, ProviderError) and exc.permanent:
        return True
    if type(exc).__name__ in _PERMANENT_CLASS_NAMES:
        return True
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not break classification
        return False
    return _PERMANENT_MESSAGE.search(message) is not None
