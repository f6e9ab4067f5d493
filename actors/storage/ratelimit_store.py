"""Redis operations of the API rate limiter (reference §1.6): one counter per class and client.

Key names come from :func:`vmpooler.actors.storage.schema.ratelimit`. Each request costs one round
trip: :meth:`RateLimitStore.count` runs :attr:`RateLimitScripts.HIT
<vmpooler.actors.storage.schema.RateLimitScripts.HIT>` (EVALSHA, with redis-py's automatic
EVAL fallback when the script cache is empty), which picks the counter, checks, counts and
reports the TTL atomically, so two API processes can never both take the last slot.

A request carrying a token is counted under the token only if the token exists (the script
checks ``vmpooler__token__<token>`` itself, in the same round trip); otherwise under the
client's address. A random token therefore buys neither a fresh counter nor a key in Redis.

Divergence from vmpooler 3.9.1: vmpooler pipelined ``INCR`` + ``EXPIRE period`` on
*every* accepted request, so the counter only reset after ``period`` seconds without an
accepted request. A client well under the rate (say one request every 30 s against 100 per
60 s) never let its counter expire and was eventually rejected as if it had sent 100
requests in a minute. Here the ``EXPIRE`` is set only when the counter is created: a
**fixed window** of ``period`` seconds starting at the first counted request, after which
the client starts from zero. A counter found without a TTL (left by a crashed writer or a
Ruby vmpooler sharing the Redis) gets one, so no counter can block a client forever.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.schema import RateLimitScripts

__all__ = ["Bucket", "RateLimitDecision", "RateLimitStore"]


@dataclass(frozen=True, slots=True)
class Bucket:
    """One counter: rate-limit class ``cls``, ``client`` (``ip:<address>`` or
    ``token:<token>``), at most ``limit`` requests per ``period`` seconds."""

    cls: str
    client: str
    limit: int
    period: int


@dataclass(frozen=True, slots=True)
class RateLimitDecision:
    """What one :meth:`RateLimitStore.count` decided.

    ``allowed``: the request was counted and may proceed. ``count``: the counter after the
    request (the value that blocked it, if rejected). ``ttl``: seconds until the window ends.
    ``bucket``: the counter that decided (the token's or the address's).
    """

    allowed: bool
    count: int
    ttl: int
    bucket: Bucket | None = None


class RateLimitStore:
    """Counters of the rate limiter over one Redis client (thread-safe, like the client)."""

    def __init__(self, client: redis.Redis) -> None:
        self._hit = client.register_script(RateLimitScripts.HIT)

    def count(self, by_address: Bucket, *, token: str | None = None,
              by_token: Bucket | None = None) -> RateLimitDecision:
        """Count one request in ``by_token`` if ``token`` names an existing API token, else in
        ``by_address``, unless that counter is at its limit within the current window. One
        round trip whatever the case.

        Raises ``redis.RedisError`` (the caller fails open); a counter holding something that
        is not an integer counts as 0 here and then makes Redis refuse the ``INCR``.
        """
        keys = [schema.ratelimit(by_address.cls, by_address.client)]
        args = [int(by_address.limit), max(1, int(by_address.period))]
        if token is not None and by_token is not None:
            keys += [schema.token(token), schema.ratelimit(by_token.cls, by_token.client)]
            args += [int(by_token.limit), max(1, int(by_token.period))]
        allowed, count, ttl, used_token = self._hit(keys=keys, args=args)
        bucket = by_token if int(used_token) else by_address
        return RateLimitDecision(allowed=bool(int(allowed)), count=int(count), ttl=int(ttl),
                                 bucket=bucket)

    def hit(self, cls: str, client: str, limit: int, period: int) -> RateLimitDecision:
        """Count one request of ``client`` in rate-limit class ``cls`` (see :meth:`count`)."""
        return self.count(Bucket(cls, client, limit, period))
