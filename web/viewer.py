"""Who is asking, for answers that show more to some clients than to others.

:func:`from_loopback` says whether a request comes from this host: its TCP peer
(``REMOTE_ADDR``) is a loopback address (``127.0.0.0/8``, ``::1``, or ``::ffff:127.x``)
*and* it carries no ``Forwarded``, ``X-Forwarded-For`` or ``X-Real-IP`` header. A reverse
proxy on the same host connects from loopback on behalf of other clients and says so with
those headers; whatever they claim, such a request is not counted as local (forwarding
headers only ever take the privilege away, never give it).
"""

from __future__ import annotations

import ipaddress

import falcon

__all__ = ["FORWARDING_HEADERS", "from_loopback"]

FORWARDING_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP")
"""Headers a proxy adds for the client it forwards."""


def from_loopback(req: falcon.Request) -> bool:
    """Whether the request's peer is a loopback address and nothing says it was forwarded."""
    if any(req.get_header(name) is not None for name in FORWARDING_HEADERS):
        return False
    try:
        address = ipaddress.ip_address((req.remote_addr or "").split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback
