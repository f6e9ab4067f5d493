"""EC2's errors as the core's :class:`~vmpooler.providers.errors.ProviderError` classes.

Transient (worth the pool's back-off and counted by the breaker): throttling
(``RequestLimitExceeded`` and its kin), capacity (``InsufficientInstanceCapacity`` …),
EC2's own outages and any connection or read failure. Permanent (the pool's
configuration-error state): ``UnauthorizedOperation`` and other refusals of the
credentials, a missing AMI, subnet, security group or key pair, and malformed parameters.
A missing instance is :class:`~vmpooler.providers.errors.VmNotFoundError` (the caller decides
whether that means gone or not yet visible). Importing this module imports botocore.
"""

from __future__ import annotations

from botocore import exceptions as bce

from vmpooler.providers.errors import (
    AuthenticationError,
    ConnectionLostError,
    NetworkNotFoundError,
    PermanentProviderError,
    PermissionDeniedError,
    ProviderError,
    TemplateNotFoundError,
    TransientProviderError,
    VmNotFoundError,
)

__all__ = ["CAPACITY", "THROTTLING", "error_code", "translate"]

THROTTLING = frozenset({
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled",
    "RequestThrottledException", "TooManyRequestsException", "SlowDown",
})
CAPACITY = frozenset({
    "InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientAddressCapacity",
    "InsufficientHostCapacity", "InsufficientReservedInstanceCapacity",
    "InsufficientVolumeCapacity", "Server.InsufficientInstanceCapacity",
})
_OUTAGE = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable",
                     "RequestExpired", "IdempotentParameterMismatch"})
_AUTH = frozenset({"AuthFailure", "InvalidClientTokenId", "SignatureDoesNotMatch",
                   "UnrecognizedClientException", "InvalidAccessKeyId", "ExpiredToken"})
_DENIED = frozenset({"UnauthorizedOperation", "OptInRequired", "Blocked",
                     "AccessDenied", "AccessDeniedException", "PendingVerification"})
_NETWORK = ("InvalidSubnetID", "InvalidSubnet", "InvalidGroup", "InvalidSecurityGroupID",
            "InvalidVpcID", "InvalidNetworkInterfaceID")
_TEMPLATE = ("InvalidAMIID", "InvalidAMIName")
_INSTANCE = ("InvalidInstanceID",)


def error_code(exc: BaseException) -> str | None:
    """EC2's error code of a ``ClientError`` (``RequestLimitExceeded``, …), else None."""
    if isinstance(exc, bce.ClientError):
        return str(exc.response.get("Error", {}).get("Code") or "") or None
    return None


def _family(code: str, prefixes: tuple[str, ...]) -> bool:
    return any(code == p or code.startswith(p + ".") for p in prefixes)


def translate(exc: BaseException, what: str) -> ProviderError:
    """The :class:`ProviderError` for ``exc`` raised by ``what`` (an EC2 operation and its
    object, for the message). A ProviderError is returned unchanged. Never raises."""
    if isinstance(exc, ProviderError):
        return exc
    code = error_code(exc)
    if code is not None:
        message = f"{what}: {code}: {_message(exc)}"
        if code in THROTTLING:
            return TransientProviderError(f"{what}: EC2 throttled the request ({code})")
        if code in CAPACITY:
            return TransientProviderError(f"{what}: EC2 has no capacity ({code})")
        if code in _OUTAGE:
            return TransientProviderError(message)
        if code in _AUTH:
            return AuthenticationError(f"{what}: authentication failed ({code})")
        if code in _DENIED:
            return PermissionDeniedError(f"{what}: permission denied ({code}): "
                                         f"{_message(exc)}", privilege=code)
        if _family(code, _TEMPLATE):
            return TemplateNotFoundError(f"{what}: template (AMI) not found: {_message(exc)}")
        if _family(code, _NETWORK):
            return NetworkNotFoundError(f"{what}: configuration error: {_message(exc)}")
        if _family(code, _INSTANCE):
            return VmNotFoundError(message)
        if code.startswith(("Invalid", "Missing", "Unsupported")) or code in (
                "InvalidParameterValue", "InvalidParameterCombination", "UnknownParameter"):
            return PermanentProviderError(f"{what}: configuration error: {code}: "
                                          f"{_message(exc)}")
        return TransientProviderError(message)
    if isinstance(exc, bce.NoCredentialsError | bce.PartialCredentialsError):
        return AuthenticationError(f"{what}: authentication failed: {exc}")
    if isinstance(exc, bce.ParamValidationError):
        return PermanentProviderError(f"{what}: configuration error: {exc}")
    if isinstance(exc, bce.ConnectionError | bce.HTTPClientError | OSError):
        return ConnectionLostError(f"{what}: EC2 unreachable: {exc}")
    return TransientProviderError(f"{what}: {type(exc).__name__}: {exc}")


def _message(exc: BaseException) -> str:
    if isinstance(exc, bce.ClientError):
        return str(exc.response.get("Error", {}).get("Message") or "")
    return str(exc)
