"""Lua script of alias failover: a pool's published state (part of
:mod:`vmpooler.actors.storage.schema`: import ``FailoverScripts`` from there)."""

from __future__ import annotations

__all__ = ["FailoverScripts"]


class FailoverScripts:
    """Lua sources of the failover state, registered once by the failover store."""

    # KEYS[1] the pool's failover hash
    # ARGV[1] ttl seconds, ARGV[2..] field, value, field, value, ...
    # Replaces the whole hash (fields of an earlier state do not linger) and sets its TTL.
    # Returns 1. The store runs it behind the pool's lease fence.
    PUBLISH = """
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return 1
"""
