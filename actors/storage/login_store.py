"""Redis operations of the failed-login guard (ours): per user name and per client address.

Key names come from :func:`vmpooler.actors.storage.schema.login_failures_user` (the name
case-folded and hashed, so its length is bounded) and
:func:`~vmpooler.actors.storage.schema.login_failures_address`; each counter expires
``window`` seconds after it was created (a fixed window). An attempt is counted *before* the
credentials are checked (:meth:`LoginStore.attempt`, one round trip), so concurrent guesses
cannot overshoot a limit; a success takes it back (:meth:`LoginStore.succeeded`).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.schema import RateLimitScripts

__all__ = ["LoginAttempt", "LoginStore"]


@dataclass(frozen=True, slots=True)
class LoginAttempt:
    """What :meth:`LoginStore.attempt` decided: ``allowed`` (counted, ask the provider), or
    refused because of the ``scope`` (``user`` or ``address``) counter, whose window ends in
    ``retry_after`` seconds."""

    allowed: bool
    scope: str | None = None
    retry_after: int = 0


class LoginStore:
    """Failed-login counters over one Redis client (thread-safe, like the client)."""

    def __init__(self, client: redis.Redis) -> None:
        self._attempt = client.register_script(RateLimitScripts.LOGIN_ATTEMPT)
        self._succeeded = client.register_script(RateLimitScripts.LOGIN_SUCCEEDED)

    def attempt(self, user: str, address: str, *, user_limit: int, address_limit: int,
                window: int) -> LoginAttempt:
        """Refuse the attempt if ``user`` or ``address`` already failed ``user_limit`` /
        ``address_limit`` times within the window (a limit of 0 is off); otherwise count it
        in both, as a failure until :meth:`succeeded`. One round trip; raises
        ``redis.RedisError``."""
        allowed, which, ttl = self._attempt(
            keys=[schema.login_failures_user(user), schema.login_failures_address(address)],
            args=[max(0, int(user_limit)), max(0, int(address_limit)), max(1, int(window))])
        if int(allowed):
            return LoginAttempt(allowed=True)
        return LoginAttempt(allowed=False, scope="user" if int(which) == 1 else "address",
                            retry_after=max(0, int(ttl)))

    def succeeded(self, user: str, address: str, *, address_limit: int) -> None:
        """The attempt of ``user`` from ``address`` was accepted: forget the user's failures
        and give back the attempt's count on the address. One round trip."""
        self._succeeded(
            keys=[schema.login_failures_user(user), schema.login_failures_address(address)],
            args=[1 if address_limit > 0 else 0])
