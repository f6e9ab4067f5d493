"""What a vCenter fault means for the core: pyvmomi exceptions turned into ProviderErrors.

The core asks one question of an error, "will retrying help?" (:func:`is_permanent`). Bad
credentials and missing privileges will not; everything vCenter or the network may get over
(a busy host, a dropped connection, a name taken meanwhile) will. Messages never carry
credentials.
"""

from __future__ import annotations

import http.client

from pyVmomi import vim, vmodl

from vmpooler.providers.errors import (
    AuthenticationError,
    ConnectionLostError,
    PermissionDeniedError,
    ProviderError,
    TransientProviderError,
)

__all__ = [
    "CLONE_PRIVILEGE",
    "SessionExpiredError",
    "StaleReferenceError",
    "VcenterFaultError",
    "clone_refusal",
    "describe",
    "fault_name",
    "is_connection_error",
    "translate",
]


class VcenterFaultError(TransientProviderError):
    """vCenter refused or failed a call with a fault worth retrying later; ``fault`` is the
    fault's class name (``InvalidPowerState``, ``DuplicateName``, ...)."""

    def __init__(self, message: str, fault: str) -> None:
        super().__init__(message)
        self.fault = fault


def fault_name(exc: BaseException) -> str | None:
    """The vCenter fault class name behind ``exc`` (translated or not), or None."""
    if isinstance(exc, VcenterFaultError):
        return exc.fault
    if isinstance(exc, vmodl.MethodFault):
        return type(exc).__name__.rsplit(".", 1)[-1]
    return None


class StaleReferenceError(TransientProviderError):
    """A cached managed object reference no longer exists (the object was deleted, or
    vCenter was replaced). The caller drops its cache and looks the object up again."""


class SessionExpiredError(TransientProviderError):
    """vCenter said ``NotAuthenticated`` (the session timed out or was logged out) even
    after a fresh login. Transient: a later call logs in again."""


def is_connection_error(exc: BaseException) -> bool:
    """True when ``exc`` says the session's connection is unusable: refused, reset, timed
    out, TLS failure, a broken HTTP exchange, or pyvmomi's "is down or is not a VIM server"."""
    if isinstance(exc, OSError | http.client.HTTPException | EOFError):
        return True
    return type(exc) is Exception and "is not a VIM server" in str(exc)


def describe(fault: BaseException) -> str:
    """A short readable text for a fault: its class and message (``msg`` or first
    localized message), e.g. ``InvalidPowerState: The attempted operation cannot be
    performed in the current state (Powered on)``."""
    name = type(fault).__name__.rsplit(".", 1)[-1]
    text = getattr(fault, "msg", None) or ""
    if not text:
        messages = getattr(fault, "faultMessage", None) or []
        text = next((m.message for m in messages if getattr(m, "message", None)), "")
    if not text and not isinstance(fault, vmodl.MethodFault):
        text = str(fault)
    return f"{name}: {text}" if text else name


CLONE_PRIVILEGE = "VirtualMachine.Provisioning.Clone"
"""The privilege a clone needs above all (on the template; docs/vsphere.md lists the rest)."""


def clone_refusal(exc: ProviderError) -> ProviderError:
    """``exc`` as a failed clone raises it: a permission denied without the privilege
    vCenter did not name says which a clone needs, so the operator's one log line points
    at it; anything else is ``exc`` itself."""
    if not isinstance(exc, PermissionDeniedError) or exc.privilege is not None:
        return exc
    return PermissionDeniedError(f"{exc}; a clone needs privilege {CLONE_PRIVILEGE} on the "
                                 f"template, and those of docs/vsphere.md 'Privileges'")


def translate(exc: BaseException, *, server: str, username: str) -> ProviderError:
    """The ProviderError for ``exc`` (returned, not raised). ``server``/``username`` only
    name who was refused; the password never appears.

    ``NotAuthenticated`` (an expired session) becomes the transient
    :class:`SessionExpiredError`, never a PermissionDeniedError: pyvmomi makes it a subclass
    of ``NoPermission``, so it is tested first. Only a real ``NoPermission`` is permanent.
    """
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, vim.fault.NotAuthenticated):  # before NoPermission: its subclass
        return SessionExpiredError(
            f"vCenter {server}: session of user {username!r} not authenticated "
            f"({describe(exc)})")
    if isinstance(exc, vim.fault.InvalidLogin):
        return AuthenticationError(
            f"authentication failed: vCenter {server} refused user {username!r}")
    if isinstance(exc, vim.fault.NoPermission):
        privilege = getattr(exc, "privilegeId", None) or None
        what = f"privilege {privilege}" if privilege else "a privilege vCenter did not name"
        return PermissionDeniedError(
            f"permission denied: user {username!r} lacks {what} "
            f"on {getattr(exc, 'object', None)} ({describe(exc)})", privilege)
    if isinstance(exc, vmodl.fault.ManagedObjectNotFound):
        return StaleReferenceError(f"object {getattr(exc, 'obj', None)} no longer exists")
    if is_connection_error(exc):
        return ConnectionLostError(f"vCenter {server} unreachable: {type(exc).__name__}: {exc}")
    if isinstance(exc, vmodl.MethodFault):
        return VcenterFaultError(f"vCenter {server}: {describe(exc)}", str(fault_name(exc)))
    return TransientProviderError(f"{type(exc).__name__}: {exc}")
