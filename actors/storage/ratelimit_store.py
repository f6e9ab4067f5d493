"""Redis operations of the API rate limiter (reference §1.6): one counter per class and client.

Key names come from :func:`vmpooler.actors.storage.schema.ratelimit`. Each request costs one round
trip: :meth:`RateLimitStore.hit` runs :data:`HIT_SCRIPT` (EVALSHA, with redis-py's automatic
EVAL fallback when the script cache is empty), which checks, counts and reports the TTL
atomically, so two API processes can never both take the last slot.

Divergence from vmpooler 3.9.1: vmpooler pipelined ``INCR`` + ``EXPIRE period`` on
*every* accepted request, so the counter only reset after ``period`` seconds without an
accepted request. A client well under the rate (say one request every 30 s against 100 per
60 s) never let its counter expire and was eventually rejected as if it had sent 100
requests in a minute. Here the ``EXPIRE`` is set only when the counter is created: a
**fixed window** of ``period`` seconds starting at the first counted request, after which
the client starts from zero. A counter found without a TTL (left by a crashed writer or a
Ruby vmpooler sharing the Redis) gets one, so no counter can block a client forever.

The script lives here rather than in :class:`vmpooler.actors.storage.schema.Scripts` because it is
not a VM state transition; it touches only its own key.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from vmpooler.actors.storage import schema

__all__ = ["HIT_SCRIPT", "RateLimitDecision", "RateLimitStore"]

# KEYS[1] counter; ARGV[1] limit, ARGV[2] period (seconds)
# Returns {allowed (1|0), counter after this request, ttl seconds of the window}.
# A rejected request does not count. The TTL is set only when the counter is created (or
# found without one): a fixed window.
HIT_SCRIPT = """
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local n = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local ttl
if n >= limit then
  ttl = redis.call('TTL', KEYS[1])
  if ttl < 0 then
    redis.call('EXPIRE', KEYS[1], period)
    ttl = period
  end
  return {0, n, ttl}
end
n = redis.call('INCR', KEYS[1])
if n == 1 then
  redis.call('EXPIRE', KEYS[1], period)
  return {1, n, period}
end
ttl = redis.call('TTL', KEYS[1])
if ttl < 0 then
  redis.call('EXPIRE', KEYS[1], period)
  ttl = period
end
return {1, n, ttl}
"""


@dataclass(frozen=True, slots=True)
class RateLimitDecision:
    """What one :meth:`RateLimitStore.hit` decided.

    ``allowed``: the request was counted and may proceed. ``count``: the counter after the
    request (the value that blocked it, if rejected). ``ttl``: seconds until the window ends.
    """

    allowed: bool
    count: int
    ttl: int


class RateLimitStore:
    """Counters of the rate limiter over one Redis client (thread-safe, like the client)."""

    def __init__(self, client: redis.Redis) -> None:
        self._hit = client.register_script(HIT_SCRIPT)

    def hit(self, cls: str, client: str, limit: int, period: int) -> RateLimitDecision:
        """Count one request of ``client`` in rate-limit class ``cls`` unless it is over
        ``limit`` within the current ``period``-second window. One round trip.

        Raises ``redis.RedisError`` (the caller fails open); a counter holding something that
        is not an integer counts as 0 here and then makes Redis refuse the ``INCR``.
        """
        allowed, count, ttl = self._hit(keys=[schema.ratelimit(cls, client)],
                                        args=[int(limit), max(1, int(period))])
        return RateLimitDecision(allowed=bool(int(allowed)), count=int(count), ttl=int(ttl))

