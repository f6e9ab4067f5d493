"""Who is asking, for answers that show more to some clients than to others.

:func:`is_local` says whether a request comes from this host: its TCP peer is a loopback
address (``127.0.0.0/8``, ``::1``, or ``::ffff:127.x``) *and* it carries no ``Forwarded``,
``X-Forwarded-For`` or ``X-Real-IP`` header. A reverse proxy on the same host connects from
loopback on behalf of other clients and says so with those headers; whatever they claim,
such a request is not counted as local (forwarding headers only ever take the privilege
away, never give it). :func:`from_loopback` asks it of a Falcon request.

:func:`sees_details` is the one rule for answers that show internals (manager ids, the text
of a Redis error with its address): a local client, or, where tokens exist (``:auth:``
configured), one presenting a valid ``X-AUTH-TOKEN``. The API's ``/readiness`` and the
manager's probe listener both apply it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import falcon

__all__ = ["FORWARDING_HEADERS", "TOKEN_HEADER", "from_loopback", "is_local", "sees_details"]

FORWARDING_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP")
"""Headers a proxy adds for the client it forwards."""

TOKEN_HEADER = "X-AUTH-TOKEN"
"""The header carrying an API token."""

HeaderReader = Callable[[str], "str | None"]
"""A request's header by name (case-insensitive), None when absent."""


def is_local(peer: str | None, header: HeaderReader) -> bool:
    """Whether the peer address ``peer`` is a loopback address and no header read through
    ``header`` says the request was forwarded."""
    if any(header(name) is not None for name in FORWARDING_HEADERS):
        return False
    try:
        address = ipaddress.ip_address((peer or "").split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def from_loopback(req: falcon.Request) -> bool:
    """Whether the request's peer is a loopback address and nothing says it was forwarded."""
    return is_local(req.remote_addr, req.get_header)


def sees_details(peer: str | None, header: HeaderReader,
                 token_valid: Callable[[str], bool] | None) -> bool:
    """Whether a request may see internals: :func:`is_local`, or a :data:`TOKEN_HEADER`
    that ``token_valid`` accepts (``token_valid`` None: no tokens exist, ``:auth:`` is not
    configured). ``token_valid`` is asked only for a presented token of a non-local client,
    and must answer False, not raise, when it cannot tell."""
    if is_local(peer, header):
        return True
    token = header(TOKEN_HEADER)
    return token_valid is not None and bool(token) and token_valid(str(token))
