"""API tokens on requests: vmpooler's ``need_token`` and the optional rules for ``/vm``.

A token is the ``X-AUTH-TOKEN`` header; it is valid when ``vmpooler__token__<token>``
exists. :func:`need_token` records ``last`` = now on success (one round trip) and otherwise
raises vmpooler's 401; :func:`has_valid_token` answers the same question without raising.

:func:`authorize_vm_change` applies the rules of changing or returning a VM. vmpooler's, the
default: a lifetime needs a valid token when ``:auth:`` is configured, returning a VM that
carries a token needs a valid token (any, even without ``:auth:``), tags need nothing. Two
settings of ours tighten them, and only where ``:auth:`` is configured (without it no client
can get a token, and ``vmpooler check-config`` warns that they do nothing):

* ``enforce_vm_ownership``: a VM checked out with a token may only be changed or returned
  with that token (401 without a valid token, 403 with another); a VM not checked out yet
  (ready or pending) only with a valid token (401). A VM checked out without a token stays
  anyone's;
* ``require_token_for_vm_changes``: every change or return needs a valid token (401).
"""

from __future__ import annotations

import re

import falcon
import redis

from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.checkout_store import CheckoutStore
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError, unauthorized
from vmpooler.web.viewer import TOKEN_HEADER

__all__ = [
    "TOKEN_HEADER", "authorize_vm_change", "check_owner", "has_valid_token", "need_token",
    "ownership_enforced", "presented_token", "token_is_valid", "unauthorized", "well_formed",
]


_WELL_FORMED = re.compile(r"[A-Za-z0-9_-]{1,64}")


def well_formed(token: str | None) -> bool:
    """Whether ``token`` could be an API token (1 to 64 of ``[A-Za-z0-9_-]``; ours are 32 of
    ``[a-z0-9]``). Anything else is refused without asking Redis."""
    return token is not None and _WELL_FORMED.fullmatch(token) is not None


def presented_token(req: falcon.Request) -> str | None:
    """The token header as sent (None when absent; '' when present but empty)."""
    return req.get_header(TOKEN_HEADER)


def need_token(req: falcon.Request, ctx: ApiContext, store: CheckoutStore | None = None) -> str:
    """The request's token if it exists (its ``last`` becomes now), else raise the 401."""
    token = presented_token(req)
    if token is None:
        raise unauthorized()
    store = store or CheckoutStore(ctx.redis)
    if store.touch_token(token, now=timefmt.format_epoch(ctx.clock.now())) is None:
        raise unauthorized()
    return token


def has_valid_token(req: falcon.Request, ctx: ApiContext,
                    store: CheckoutStore | None = None) -> bool:
    """Whether the request carries a valid token (its ``last`` becomes now). False, not an
    error, when Redis cannot say: a caller shows less, it never fails for it."""
    if not presented_token(req):
        return False
    try:
        need_token(req, ctx, store)
    except ApiError:
        return False
    except redis.RedisError:
        return False
    return True


def token_is_valid(store: CheckoutStore, token: str, now: float) -> bool:
    """Whether ``token`` exists (its ``last`` becomes ``now``, epoch seconds). False, not an
    error, for a malformed token (Redis not asked) or when Redis cannot say."""
    if not well_formed(token):
        return False
    try:
        return store.touch_token(token, now=timefmt.format_epoch(now)) is not None
    except redis.RedisError:
        return False


def ownership_enforced(ctx: ApiContext) -> bool:
    """Whether ``:config: enforce_vm_ownership`` is on and ``:auth:`` configured."""
    return ctx.config.settings.enforce_vm_ownership and ctx.auth_configured


def check_owner(req: falcon.Request, ctx: ApiContext, owner: str | None) -> None:
    """Under ``enforce_vm_ownership``, a VM carrying a token (``owner``) may only be changed
    with that token; raise 403 otherwise. A VM without a token is anyone's."""
    if not ownership_enforced(ctx) or not owner:
        return
    if presented_token(req) != owner:
        raise ApiError(403, {"ok": False,
                             "error": "This VM was checked out with another token"})


def authorize_vm_change(req: falcon.Request, ctx: ApiContext, store: CheckoutStore, *,
                        owner: str | None, checked_out: bool, token_needed: bool) -> None:
    """Raise 401 or 403 unless the request may change or return a VM (module docstring).

    ``owner`` is the VM's ``token:token``, ``checked_out`` whether it has a ``checkout``
    time, ``token_needed`` whether vmpooler's own rule asks for a valid token here. At most
    one round trip (the token check).
    """
    if ctx.auth_configured:
        settings = ctx.config.settings
        token_needed = (token_needed or settings.require_token_for_vm_changes
                        or (settings.enforce_vm_ownership and (bool(owner) or not checked_out)))
    if token_needed:
        need_token(req, ctx, store)
    check_owner(req, ctx, owner)
