"""API tokens on requests: vmpooler's ``need_token`` and the optional ownership rule.

A token is the ``X-AUTH-TOKEN`` header; it is valid when ``vmpooler__token__<token>``
exists. :func:`need_token` records ``last`` = now on success (one round trip) and otherwise
raises vmpooler's 401. :func:`check_owner` enforces ``:config: enforce_vm_ownership`` (off by
default, an addition to vmpooler where any valid token may act on any VM).
"""

from __future__ import annotations

import re

import falcon

from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.checkout_store import CheckoutStore
from vmpooler.web.context import ApiContext
from vmpooler.web.errors import ApiError, unauthorized

__all__ = [
    "TOKEN_HEADER", "check_owner", "need_token", "ownership_enforced", "presented_token",
    "unauthorized", "well_formed",
]

TOKEN_HEADER = "X-AUTH-TOKEN"

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


def ownership_enforced(ctx: ApiContext) -> bool:
    """Whether ``:config: enforce_vm_ownership`` is truthy."""
    return bool(ctx.config.settings.raw.get("enforce_vm_ownership"))


def check_owner(req: falcon.Request, ctx: ApiContext, owner: str | None) -> None:
    """Under ``enforce_vm_ownership``, a VM carrying a token (``owner``) may only be changed
    with that token; raise 403 otherwise. A VM without a token is anyone's."""
    if not ownership_enforced(ctx) or not owner:
        return
    if presented_token(req) != owner:
        raise ApiError(403, {"ok": False,
                             "error": "This VM was checked out with another token"})
