"""Who may change the pools through the API (``/config/*`` writes and ``/poolreset``).

vmpooler lets anyone change the pools when ``experimental_features`` is on and ``:auth:`` is
not configured. Here that holds only where no other host can ask: on a listener that other
hosts can reach, those writes are refused (403 ``{"ok": false, "error": ...}`` naming the
settings) unless ``:config: experimental_features_without_auth`` says the operator wants it,
which the API logs as a warning at start (:func:`startup_warning`).

A listener is local when it is a ``unix:`` socket or its host is a loopback address
(``127.0.0.0/8``, ``::1``) or ``localhost``; anything else (``0.0.0.0``, ``::``, a host
name, an inherited ``fd://`` socket) can be reached from elsewhere.
"""

from __future__ import annotations

import ipaddress

from vmpooler.actors.config import Config
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError

__all__ = ["OPT_IN", "check_pool_change", "listens_beyond_loopback", "startup_warning"]

OPT_IN = "experimental_features_without_auth"
"""The ``:config:`` setting that lets anyone change the pools on a reachable listener."""

_REFUSED = ("pool changes need :auth: on a listener other hosts can reach: configure :auth:, "
            f"or set :config: {OPT_IN}: true to let anyone change the pools "
            "(experimental_features is on)")


def listens_beyond_loopback(bind: str) -> bool:
    """Whether a gunicorn ``bind`` (``HOST:PORT``, ``[V6]:PORT``, ``unix:PATH``,
    ``fd://N``) can be reached from other hosts (module docstring)."""
    if bind.startswith("unix:"):
        return False
    if bind.startswith("fd://"):
        return True
    host = bind.rpartition(":")[0] if ":" in bind else bind
    host = host.strip("[]").split("%", 1)[0]
    if host.lower() == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def _open_to_anyone(config: Config, public: bool) -> bool:
    """Whether pool changes are on without :auth: on a reachable listener."""
    return config.settings.experimental_features and not config.auth and public


def check_pool_change(ctx: ApiContext) -> None:
    """Raise the 403 when ``ctx``'s API may not change pools without a token (module
    docstring); the caller has checked ``experimental_features`` and any token."""
    if _open_to_anyone(ctx.config, ctx.public_listener) and not getattr(
            ctx.config.settings, OPT_IN):
        raise ApiError(403, {"ok": False, "error": _REFUSED})


def startup_warning(config: Config, bind: str) -> str | None:
    """What the API logs at start about pool changes on ``bind``: open to anyone (the
    opt-in set), refused (not set), or None (nothing to say)."""
    if not _open_to_anyone(config, listens_beyond_loopback(bind)):
        return None
    if getattr(config.settings, OPT_IN):
        return (f"anyone who reaches {bind} may change the pools (/config/*, /poolreset): "
                f"experimental_features and {OPT_IN} are on and :auth: is not configured")
    return (f"pool changes (/config/*, /poolreset) are refused with 403 on {bind}: "
            f"experimental_features is on but :auth: is not configured (set {OPT_IN} to "
            "allow them without a token)")
