"""Lua scripts of the API's limiters: the request rate limiter and the failed-login guard.

Part of :mod:`vmpooler.actors.storage.schema`: import ``RateLimitScripts`` from there. Each
script decides and counts in one step, so concurrent requests (several API processes) can
never overshoot a limit. Counters are **fixed windows**: a counter's expiry is set when it is
created (or found without one, as a crashed writer or a Ruby vmpooler may leave it), never
renewed by later requests.
"""

from __future__ import annotations

__all__ = ["RateLimitScripts"]

# The fixed-window hit on KEYS[counter] with limit and period (shared by HIT's two cases).
_HIT_COUNTER = """
local n = tonumber(redis.call('GET', counter) or '0') or 0
local ttl
if n >= limit then
  ttl = redis.call('TTL', counter)
  if ttl < 0 then
    redis.call('EXPIRE', counter, period)
    ttl = period
  end
  return {0, n, ttl, by_token}
end
n = redis.call('INCR', counter)
if n == 1 then
  redis.call('EXPIRE', counter, period)
  return {1, n, period, by_token}
end
ttl = redis.call('TTL', counter)
if ttl < 0 then
  redis.call('EXPIRE', counter, period)
  ttl = period
end
return {1, n, ttl, by_token}
"""


class RateLimitScripts:
    """Lua sources of the limiters, registered once by their stores."""

    # KEYS[1] the client address's counter; with a token also KEYS[2] the token's hash and
    # KEYS[3] the token's counter.
    # ARGV[1] limit, ARGV[2] period (seconds) of the address's counter; with a token ARGV[3],
    # ARGV[4] those of the token's counter.
    # The token's counter is used when the token exists (it is a valid API token), else the
    # address's. A rejected request does not count.
    # Returns {allowed (1|0), counter after this request, ttl seconds of the window,
    # by_token (1 when the token's counter was used, else 0)}.
    HIT = """
local counter, limit, period, by_token = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), 0
if #KEYS == 3 and redis.call('EXISTS', KEYS[2]) == 1 then
  counter, limit, period, by_token = KEYS[3], tonumber(ARGV[3]), tonumber(ARGV[4]), 1
end
""" + _HIT_COUNTER

    # KEYS[1] the user's failure counter, KEYS[2] the client address's failure counter
    # ARGV[1] user limit, ARGV[2] address limit (0: that counter is off), ARGV[3] window (s)
    # A login attempt: refused while either counter is at its limit; otherwise counted in
    # both (as a failure until LOGIN_SUCCEEDED takes it back), so concurrent guesses cannot
    # overshoot. Returns {1, 0, 0} when counted, {0, which (1 user, 2 address), ttl} when
    # refused.
    LOGIN_ATTEMPT = """
local window = tonumber(ARGV[3])
for i = 1, 2 do
  local limit = tonumber(ARGV[i])
  if limit > 0 and (tonumber(redis.call('GET', KEYS[i]) or '0') or 0) >= limit then
    local ttl = redis.call('TTL', KEYS[i])
    if ttl < 0 then
      redis.call('EXPIRE', KEYS[i], window)
      ttl = window
    end
    return {0, i, ttl}
  end
end
for i = 1, 2 do
  if tonumber(ARGV[i]) > 0 then
    if redis.call('INCR', KEYS[i]) == 1 or redis.call('TTL', KEYS[i]) < 0 then
      redis.call('EXPIRE', KEYS[i], window)
    end
  end
end
return {1, 0, 0}
"""

    # KEYS[1] the user's failure counter, KEYS[2] the client address's failure counter
    # ARGV[1] 1 when LOGIN_ATTEMPT counted the address (its limit is on), else 0
    # A counted attempt succeeded: the user's failures are forgotten; the address's counter
    # only gives back this attempt (a success never wipes other users' failures from the
    # same address). Returns 1.
    LOGIN_SUCCEEDED = """
redis.call('DEL', KEYS[1])
if ARGV[1] == '1' then
  local n = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if n > 1 then
    redis.call('DECR', KEYS[2])
  elseif n == 1 then
    redis.call('DEL', KEYS[2])
  end
end
return 1
"""
