"""The failed-login guard (ours): password guessing through HTTP Basic is limited per user
name and per client address.

Every attempt that presents credentials is counted, per user name in its normal form
(:func:`~vmpooler.actors.fairness.names.normal_user_name`: ``ｂｏｂ``, `` Bob`` and ``bob`` are
one name), before the ``:auth:`` provider is asked
(:class:`~vmpooler.actors.storage.login_store.LoginStore`, one round trip); a success takes
the count back and forgets that user's failures, a failure leaves it. Once a user name has
``login_failures_per_user`` failures (default 10), or an address ``login_failures_per_address``
(default 30), within ``login_failure_window`` seconds (default 300, a fixed window from the
first failure), further attempts for that name / from that address are answered **429**
without asking the provider (so a correct password is refused too until the window ends):
``Retry-After``, ``X-RateLimit-*`` and ``{"ok": false, "error": "Too many failed logins",
"limit", "period", "retry_after"}``, the rate limiter's shape. Each refusal counts
``api.login_refused`` (tag ``scope``: ``user`` or ``address``) and is logged, at most one line
per :data:`LOG_EVERY` seconds per process. A limit of 0 turns that counter off. The address
is the rate limiter's client key (:mod:`vmpooler.web.clientaddr`: an IPv6 client's network of
``ipv6_prefix_length`` bits).

Redis errors propagate (the endpoints answer 503, as they would for their own reads).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import falcon

from vmpooler.actors.fairness.names import normal_user_name
from vmpooler.actors.storage.login_store import LoginStore
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError
from vmpooler.web.clientaddr import TrustedProxies

__all__ = ["LOG_EVERY", "REFUSED_METRIC", "LoginGuard", "PendingLogin"]

log = logging.getLogger(__name__)

REFUSED_METRIC = "api.login_refused"
LOG_EVERY = 60.0
"""At most one log line per this many seconds for refused logins (a guesser floods)."""


@dataclass(frozen=True, slots=True)
class PendingLogin:
    """An attempt counted by :meth:`LoginGuard.begin`, to be given back on success."""

    user: str
    address: str


class LoginGuard:
    """Counts and limits HTTP Basic login attempts for one API process (thread-safe)."""

    def __init__(self, ctx: ApiContext, *, store: LoginStore | None = None,
                 proxies: TrustedProxies | None = None) -> None:
        self._ctx = ctx
        self._store = store if store is not None else LoginStore(ctx.redis)
        self._proxies = (proxies if proxies is not None
                         else TrustedProxies.of(ctx.config.settings))
        settings = ctx.config.settings
        self._user_limit = max(0, settings.login_failures_per_user)
        self._address_limit = max(0, settings.login_failures_per_address)
        self._window = max(1, settings.login_failure_window)
        self._lock = threading.Lock()
        self._logged_at: float | None = None
        self._quiet = 0

    @property
    def enabled(self) -> bool:
        """Whether either limit is on."""
        return bool(self._user_limit or self._address_limit)

    def begin(self, req: falcon.Request, user: str) -> PendingLogin | None:
        """Count an attempt by ``user`` (any spelling of it); raise the 429
        :class:`ApiError` if the user name or the client address is locked out. None when
        the guard is off."""
        if not self.enabled:
            return None
        user = normal_user_name(user)
        address = self._proxies.client_key(req)
        attempt = self._store.attempt(user, address, user_limit=self._user_limit,
                                      address_limit=self._address_limit, window=self._window)
        if attempt.allowed:
            return PendingLogin(user, address)
        scope = attempt.scope or "user"
        self._refused(scope, user, address)
        limit = self._user_limit if scope == "user" else self._address_limit
        retry = attempt.retry_after
        raise ApiError(429, {"ok": False, "error": "Too many failed logins", "limit": limit,
                             "period": self._window, "retry_after": retry}, headers={
            "X-RateLimit-Limit": str(limit),
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": str(int(self._ctx.clock.now()) + retry),
            "Retry-After": str(retry),
        })

    def succeeded(self, pending: PendingLogin | None) -> None:
        """The provider accepted ``pending``: give its count back."""
        if pending is not None:
            self._store.succeeded(pending.user, pending.address,
                                  address_limit=self._address_limit)

    def _refused(self, scope: str, user: str, address: str) -> None:
        try:
            self._ctx.metrics.increment(REFUSED_METRIC, tags={"scope": scope})
        except Exception:  # a metrics backend must never break a response
            log.debug("[!] [api] metrics backend failed", exc_info=True)
        now = self._ctx.clock.monotonic()
        with self._lock:
            if self._logged_at is not None and now - self._logged_at < LOG_EVERY:
                self._quiet += 1
                return
            quiet, self._quiet, self._logged_at = self._quiet, 0, now
        more = f"; {quiet} more refused since the last line" if quiet else ""
        log.warning("[!] [auth] login of %r from %s refused: too many failed logins for this "
                    "%s%s", user[:64], address, scope, more)
