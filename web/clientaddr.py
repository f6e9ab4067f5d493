"""The client's address as the API's limiters see it: the peer's, or what trusted proxies say.

``:config: trusted_proxies`` lists addresses or CIDR networks of reverse proxies. When the
peer that connected (gunicorn's ``REMOTE_ADDR``) is one of them, the client is the
**right-most address of the forwarding chain that is not itself a trusted proxy**: the chain
is ``X-Forwarded-For`` (every such header, in order), or ``Forwarded``'s ``for=`` values when
there is no ``X-Forwarded-For``, followed by the peer. Entries left of that address were
written by the client and are ignored, so a client cannot choose its identity by sending
the headers itself. When every hop is trusted the left-most one is the client; an entry that
is not an address (``unknown``, an obfuscated ``_id``) stops the walk at the trusted hop
that wrote it. When the peer is not a trusted proxy, the headers are ignored.

The proxies must set or append to ``X-Forwarded-For`` (nginx's
``$proxy_add_x_forwarded_for``, HAProxy's ``option forwardfor``, Envoy, Traefik, cloud load
balancers do); a proxy that writes only ``Forwarded`` must remove any ``X-Forwarded-For`` a
client sent, or the client's own header would be read.

With trusted proxies, addresses are normalised by :mod:`ipaddress` (``::ffff:10.0.0.1`` is
``10.0.0.1``, a zone index is dropped), so one client has one spelling. Without any, the
peer's address is used as the server gives it (vmpooler's key names), at most 64 characters.

The limiters (rate limiter, failed-login guard, per-address quotas) count a client under its
**client key** (:func:`client_key`, :meth:`TrustedProxies.client_key`): an IPv4 address as
above; an IPv6 address as its network of ``:config: ipv6_prefix_length`` bits (default 64,
the size one subscriber or host usually gets), written ``2001:db8:1:2::/64``, so the
addresses of one prefix count together; an IPv4-mapped IPv6 address (``::ffff:1.2.3.4``) as
the IPv4 address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import falcon

from vmpooler.actors.config import GlobalSettings

__all__ = ["DEFAULT_IPV6_PREFIX", "TrustedProxies", "client_key", "parse_address"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_IPV6_PREFIX = 64
"""Bits of an IPv6 address that name one client unless ``ipv6_prefix_length`` says else."""

_MAX_HOPS = 32
"""Forwarding entries looked at, from the right: a longer chain is cut (the client's own)."""


def parse_address(text: str) -> Address | None:
    """An address from a forwarding entry or a peer address (``1.2.3.4``, ``1.2.3.4:5678``,
    ``[2001:db8::1]:443``, ``"[::1]"``, ``fe80::1%eth0``), or None if it is not one."""
    text = text.strip().strip('"').strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:  # IPv4 with a port
        text = text.partition(":")[0]
    text = text.partition("%")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def client_key(address: str, ipv6_prefix_length: int = DEFAULT_IPV6_PREFIX) -> str:
    """The key the limiters count ``address`` (a client address as
    :meth:`TrustedProxies.client_address` gives it) under: an IPv6 address becomes its
    ``/ipv6_prefix_length`` network (``2001:db8:1:2::/64``), an IPv4-mapped one its IPv4
    address; anything else (IPv4, text that is no address) is returned as given. At most 64
    characters. An IPv6 address with an ``ipv6_prefix_length`` outside 0..128 raises
    ``ValueError``."""
    if ":" not in address:  # IPv4, or no address at all: as given, without parsing
        return address[:64]
    parsed = parse_address(address)
    if isinstance(parsed, ipaddress.IPv4Address):
        return str(parsed)  # IPv4-mapped IPv6
    if not isinstance(parsed, ipaddress.IPv6Address):
        return address[:64]
    if not 0 <= ipv6_prefix_length <= 128:
        raise ValueError(f"IPv6 prefix length {ipv6_prefix_length} is not in 0..128")
    host_bits = 128 - ipv6_prefix_length
    network = ipaddress.IPv6Address(int(parsed) >> host_bits << host_bits)
    return f"{network}/{ipv6_prefix_length}"


class TrustedProxies:
    """The configured trusted proxies and the IPv6 prefix of one client (immutable,
    thread-safe)."""

    def __init__(self, entries: Iterable[str] = (), *,
                 ipv6_prefix_length: int = DEFAULT_IPV6_PREFIX) -> None:
        """``entries``: addresses or CIDR networks, as validated by the configuration.
        Raises ``ValueError`` for an entry that is neither, or a prefix length not in
        0..128."""
        self._networks: tuple[Network, ...] = tuple(
            ipaddress.ip_network(entry, strict=False) for entry in entries)
        if not 0 <= ipv6_prefix_length <= 128:
            raise ValueError(f"IPv6 prefix length {ipv6_prefix_length} is not in 0..128")
        self._ipv6_prefix = ipv6_prefix_length

    @classmethod
    def of(cls, settings: GlobalSettings) -> TrustedProxies:
        """The proxies and prefix length of ``settings`` (``trusted_proxies``,
        ``ipv6_prefix_length``)."""
        return cls(settings.trusted_proxies, ipv6_prefix_length=settings.ipv6_prefix_length)

    def __bool__(self) -> bool:
        return bool(self._networks)

    def trusted(self, address: Address) -> bool:
        """Whether ``address`` is one of the trusted proxies."""
        return any(address.version == network.version and address in network
                   for network in self._networks)

    def client_address(self, req: falcon.Request) -> str:
        """The client's address for ``req`` (see the module): without trusted proxies the
        peer's as the server gives it, else as :mod:`ipaddress` writes it (the peer's text
        when that is not an address); at most 64 characters either way."""
        peer_text = req.remote_addr or ""
        if not self._networks:  # as vmpooler: the peer's address as the server gives it
            return peer_text[:64]
        peer = parse_address(peer_text)
        if peer is None:
            return peer_text[:64]
        if not self.trusted(peer):
            return str(peer)
        client = peer
        for entry in reversed(_chain(req)[-_MAX_HOPS:]):
            hop = parse_address(entry)
            if hop is None:
                break
            client = hop
            if not self.trusted(hop):
                break
        return str(client)

    def client_key(self, req: falcon.Request) -> str:
        """:func:`client_key` of :meth:`client_address`: what the limiters count ``req``
        under."""
        return client_key(self.client_address(req), self._ipv6_prefix)


def _chain(req: falcon.Request) -> list[str]:
    """The forwarding chain before the peer, left to right: ``X-Forwarded-For`` entries if
    the request has that header, else ``Forwarded``'s ``for=`` values."""
    forwarded_for = req.get_header("X-Forwarded-For", default="")
    if forwarded_for:
        return [entry for entry in forwarded_for.split(",") if entry.strip()]
    return [hop.src for hop in (req.forwarded or ()) if hop.src]
