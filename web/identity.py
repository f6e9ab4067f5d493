"""Who is asking (``:quotas:``, docs/fairness.md): the :class:`Requester` of an API request.

The user is the token's user when a valid token is presented, in its normal form
(:func:`~vmpooler.actors.fairness.names.normal_user_name`, so a token an older version wrote
with ``user: Bob`` is user ``bob``; its groups: those the token
recorded from LDAP when it was made, field ``groups``, plus the static ``members`` map);
without one, the client's key (its address through the trusted proxies, an IPv6 address
grouped by ``ipv6_prefix_length``, as the rate limiter sees it: :mod:`vmpooler.web.clientaddr`),
or ``anonymous`` when ``:quotas: anonymous: true``.

What callers may rely on: :func:`requester` never raises for a missing or unknown token (it
falls back to the address); it reads at most one Redis hash. Thread-safe.
"""

from __future__ import annotations

import functools

import falcon

from vmpooler.actors.fairness.names import normal_user_name
from vmpooler.actors.fairness.quota_policy import ANONYMOUS, Requester
from vmpooler.actors.storage.token_store import TokenStore
from vmpooler.web.api_context import ApiContext
from vmpooler.web.clientaddr import TrustedProxies

__all__ = ["client_key", "requester", "token_groups"]


def token_groups(details: dict[str, str]) -> frozenset[str]:
    """The groups a token's hash recorded (field ``groups``, comma-separated)."""
    return frozenset(g for g in details.get("groups", "").split(",") if g)


def requester(req: falcon.Request, ctx: ApiContext, token: str | None) -> Requester:
    """The user behind ``req``; ``token`` is the token it presented (None: none, or not
    checked because auth is off)."""
    policy = ctx.config.quotas
    if token:
        details = TokenStore(ctx.redis).details(token)
        user = normal_user_name(details.get("user") or "")
        if user:
            return Requester(user, policy.groups_of(user, token_groups(details)),
                             authenticated=True)
    if policy.anonymous:
        return Requester(ANONYMOUS, policy.groups_of(ANONYMOUS))
    address = client_key(req, ctx)
    return Requester(address, policy.groups_of(address))


@functools.lru_cache(maxsize=4)
def _proxies(entries: tuple[str, ...], ipv6_prefix_length: int) -> TrustedProxies:
    """The :class:`TrustedProxies` of a configuration's entries and prefix length, parsed
    once (a reload with other values parses them again)."""
    return TrustedProxies(entries, ipv6_prefix_length=ipv6_prefix_length)


def client_key(req: falcon.Request, ctx: ApiContext) -> str:
    """The client's key as the limiters count it (its address through the trusted proxies, an
    IPv6 address grouped by ``ipv6_prefix_length``), with no Redis read: who a request without
    a token's user is, for quotas and for the bound on the misses one requester may log
    (:func:`vmpooler.actors.storage.schema.demand_guard`)."""
    settings = ctx.config.settings
    return _proxies(tuple(settings.trusted_proxies), settings.ipv6_prefix_length).client_key(req)
