"""API v3 token endpoints (reference §1.3): list, create, show and delete API tokens.

Every endpoint answers 404 ``{"ok": false}`` while auth is not configured. Tokens live in
the hash ``schema.token(t)`` (``user``, ``created``, ``last``) with no TTL, as in vmpooler.

Documented differences from vmpooler 3.9.1:

* ``GET /token`` lists with ``SCAN`` (and pipelined ``HMGET`` per batch), never ``KEYS``,
  so a large keyspace does not block Redis; tokens are listed in sorted order.
* ``GET /token/{token}`` still needs no authentication (vmfloaty relies on it) but never
  reveals another token: a path that is not a well-formed token (≤ 64 of
  ``[A-Za-z0-9_-]``) answers 404 without touching Redis, and the answer holds only the
  requested token's fields and the VMs whose ``token:token`` equals it (constant-time).
* ``DELETE /token/{token}`` of a token that does not exist answers **404**; vmpooler
  answers 401, which clients misread as bad credentials (its own spec asks "should this
  be 404?"). Without valid credentials it is still 401, checked first.
* The ``vms.running`` lookup walks the configured pools' running sets with ``SSCAN`` and
  one pipelined ``HGET`` per batch of VMs (:mod:`vmpooler.actors.storage.token_store`),
  instead of one round trip per VM.
* New tokens come from :mod:`secrets` (a CSPRNG), never from ``ctx.rng``; creation uses
  ``HSETNX`` so an (astronomically unlikely) collision can never hand out a live token.
* Failed Basic logins are limited per user name and per client address
  (:mod:`vmpooler.web.login_guard`): 429 while locked out, without asking the provider.
"""

from __future__ import annotations

import hmac
import secrets
import string
from typing import Any

import falcon

from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.token_store import TokenStore
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError, json_body
from vmpooler.web.auth import authenticate, login
from vmpooler.web.login_guard import LoginGuard
from vmpooler.web.tokens import well_formed

__all__ = ["TOKEN_LENGTH", "new_token", "register"]

TOKEN_LENGTH = 32

_FIRST = string.ascii_lowercase[:25]  # a-y, as vmpooler
_REST = string.ascii_lowercase + string.digits


def new_token() -> str:
    """A fresh 32-character token: first char ``a``–``y``, the rest ``[a-z0-9]``."""
    return secrets.choice(_FIRST) + "".join(
        secrets.choice(_REST) for _ in range(TOKEN_LENGTH - 1))


def _same_token(stored: str | None, token: str) -> bool:
    """Constant-time equality of a stored token value with ``token``."""
    if stored is None:
        return False
    return hmac.compare_digest(stored.encode("utf-8"), token.encode("utf-8"))


def _require_auth(ctx: ApiContext) -> None:
    if not ctx.auth_configured:
        raise ApiError(404)


class TokenCollection:
    """``GET /token`` (my tokens) and ``POST /token`` (a new token for me)."""

    def __init__(self, ctx: ApiContext, store: TokenStore, guard: LoginGuard) -> None:
        self.ctx = ctx
        self.store = store
        self.guard = guard

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """200 ``{"ok": true, <token>: {created, last}}`` for the caller's tokens, else 404."""
        _require_auth(self.ctx)
        user = authenticate(req, self.ctx, self.guard)
        found = {token: {"created": created, "last": last if last is not None else "never"}
                 for token, created, last in self.store.tokens_of(user)}  # SCAN may repeat
        result: dict[str, Any] = {"ok": bool(found)}
        result.update(sorted(found.items()))
        json_body(resp, 200 if result["ok"] else 404, result)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """200 ``{"ok": true, "token": <new token>}`` owned by the caller."""
        _require_auth(self.ctx)
        user, groups = login(req, self.ctx, self.guard,
                             groups=self.ctx.config.quotas.ldap_groups)
        token = self.store.create(user, created=timefmt.format_epoch(self.ctx.clock.now()),
                                  new_token=new_token, groups=groups)
        json_body(resp, 200, {"ok": True, "token": token})


class TokenItem:
    """``GET /token/{token}`` (details, no auth) and ``DELETE /token/{token}``."""

    def __init__(self, ctx: ApiContext, store: TokenStore, guard: LoginGuard) -> None:
        self.ctx = ctx
        self.store = store
        self.guard = guard

    def on_get(self, req: falcon.Request, resp: falcon.Response, token: str) -> None:
        """200 ``{"ok": true, <token>: {<fields>, "vms"?: {"running": [...]}}}``, else 404."""
        _require_auth(self.ctx)
        if not well_formed(token):
            raise ApiError(404)
        details: dict[str, Any] = self.store.details(token)
        if not details:
            raise ApiError(404)
        pools = [pool.name for pool in self.ctx.config.pools]
        running = list(dict.fromkeys(  # SSCAN may repeat members
            self.store.running_vms(token, pools, _same_token)))
        if running:
            details["vms"] = {"running": running}
        json_body(resp, 200, {"ok": True, token: details})

    def on_delete(self, req: falcon.Request, resp: falcon.Response, token: str) -> None:
        """200 ``{"ok": true}`` once deleted; 401 without credentials; 404 if missing."""
        _require_auth(self.ctx)
        authenticate(req, self.ctx, self.guard)
        if not well_formed(token) or not self.store.delete(token):
            raise ApiError(404)
        json_body(resp, 200, {"ok": True})


def register(app: falcon.App, ctx: ApiContext, prefix: str) -> None:
    """Add ``/token`` and ``/token/{token}`` under ``prefix``."""
    store, guard = TokenStore(ctx.redis), LoginGuard(ctx)
    app.add_route(f"{prefix}/token", TokenCollection(ctx, store, guard))
    app.add_route(f"{prefix}/token/{{token}}", TokenItem(ctx, store, guard))
