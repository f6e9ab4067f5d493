"""Lua scripts of leases with fencing tokens, and the fence every owner's write runs behind.

Part of :mod:`vmpooler.actors.storage.schema`: import ``LeaseScripts`` from there. A lease
key (``schema.lease``) holds ``<token> <holder>``: the token is the ``INCR`` of
``schema.lease_token()`` taken when the lease was acquired, so a later holder always has a
larger token, and the value as a whole names one holding exactly once.
"""

from __future__ import annotations

__all__ = ["FENCED", "LeaseScripts", "fenced"]

FENCED = "FENCED"
"""The status reply of a fenced script whose caller no longer holds the lease (nothing
written, apart from what ``on_refused`` documents)."""


def fenced(body: str, *, on_refused: str = "") -> str:
    """``body`` behind the fence: the caller appends the lease key to KEYS and the lease
    value it believes it holds to ARGV; both are removed before ``body`` runs, so its own
    KEYS and ARGV are unchanged. When the lease holds another value (or none), the script
    runs ``on_refused`` (Lua, may be empty) and replies :data:`FENCED`."""
    return (
        "local fence_value = table.remove(ARGV)\n"
        "local fence_key = table.remove(KEYS)\n"
        "if redis.call('GET', fence_key) ~= fence_value then\n"
        f"{on_refused}\n"
        f"  return redis.status_reply('{FENCED}')\n"
        "end\n"
        f"{body}"
    )


class LeaseScripts:
    """Lua sources of taking, renewing and releasing a lease."""

    # KEYS[1] lease, KEYS[2] token counter
    # ARGV[1] holder, ARGV[2] ttl milliseconds
    # Free: takes it with a new token (INCR) for ttl: {1, value}. Held by ARGV[1]: renews the
    # ttl: {2, value}. Held by another: {0, value, pttl} (nothing written).
    ACQUIRE = """
local value = redis.call('GET', KEYS[1])
if not value then
  value = redis.call('INCR', KEYS[2]) .. ' ' .. ARGV[1]
  redis.call('SET', KEYS[1], value, 'PX', tonumber(ARGV[2]), 'NX')
  return {1, value}
end
if string.sub(value, -(#ARGV[1] + 1)) == ' ' .. ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
  return {2, value}
end
return {0, value, redis.call('PTTL', KEYS[1])}
"""

    # KEYS[1] lease; ARGV[1] the value held, ARGV[2] ttl milliseconds
    # Renews only the holding named by ARGV[1]. Returns 1 renewed, 0 not held (nothing).
    RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
"""

    # KEYS[1] lease; ARGV[1] the value held
    # Releases only the holding named by ARGV[1]. Returns 1 released, 0 not held (nothing).
    RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""
