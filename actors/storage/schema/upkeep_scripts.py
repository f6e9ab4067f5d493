"""Lua scripts of the manager's upkeep: stale-entry purge, orphaned hashes, DLQ replay.

Part of :mod:`vmpooler.actors.storage.schema`: import ``UpkeepScripts`` from there. Each script
checks the state it acts on before it writes, so a VM that moved meanwhile (checked out,
returned, reaped by its pool actor) is left alone.
"""

from __future__ import annotations

__all__ = ["UpkeepScripts"]


class UpkeepScripts:
    """Lua sources of the upkeep transitions, registered once by the upkeep store."""

    # KEYS[1] completed, KEYS[2] active hash, KEYS[3] vm hash
    # ARGV[1] vm, ARGV[2] hash ttl seconds
    # A stale completed VM leaves completed (vmpooler's purge: the provider's VM, if any, is
    # rediscovered and destroyed). A hash with no expiry is given ``ttl``, so it cannot stay
    # forever. Returns 1 removed, 0 it was not in completed.
    PURGE_COMPLETED = """
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('TTL', KEYS[3]) == -1 then redis.call('EXPIRE', KEYS[3], tonumber(ARGV[2])) end
return 1
"""

    # KEYS[1] vm hash, KEYS[2..] the pool's pending, ready, running, completed, discovered,
    # migrating sets, then its held and standby sets
    # ARGV[1] vm, ARGV[2] pool (the hash's ``pool`` field when read), ARGV[3] ttl seconds
    # An orphaned VM hash (in none of its pool's queues) expires within ``ttl``: the expiry
    # is set only when there is none or it is later, so running this again never postpones
    # it (vmpooler reset it to an hour on every purge, so with purge_interval under an hour
    # an orphaned hash never expired).
    # A key of another type is left alone, and a queue key of another type holds no VM (no
    # key written by someone else can make this script fail).
    # Returns 1 expiry set, 2 already expiring within ttl, 0 in a queue (or another pool
    # now), -1 the hash is gone, -2 the key is not a hash.
    EXPIRE_ORPHAN = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then return -2 end
if redis.call('HGET', KEYS[1], 'pool') ~= ARGV[2] then return 0 end
for i = 2, #KEYS do
  if redis.call('TYPE', KEYS[i]).ok == 'set' and redis.call('SISMEMBER', KEYS[i], ARGV[1]) == 1
  then return 0 end
end
local ttl = redis.call('TTL', KEYS[1])
if ttl >= 0 and ttl <= tonumber(ARGV[3]) then return 2 end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
"""

    # KEYS[1] the dead-letter queue, KEYS[2..] the pool's pending, ready, running,
    # completed, discovered, migrating sets, then its held and standby sets
    # ARGV[1] the entry (sorted-set member), ARGV[2] vm
    # Replays one entry: a VM in none of its pool's queues goes to completed, where the pool
    # actor destroys it if the provider still has it and forgets it otherwise; the entry
    # leaves the queue only then. A VM already in a queue is being looked after: only the
    # entry goes.
    # Returns {1, 0} requeued to completed, {2, i} already in queue KEYS[i], {0, 0} the entry
    # is gone (replayed by someone else; nothing written).
    REPLAY_DEAD_LETTER = """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {0, 0} end
for i = 2, #KEYS do
  if redis.call('SISMEMBER', KEYS[i], ARGV[2]) == 1 then
    redis.call('ZREM', KEYS[1], ARGV[1])
    return {2, i}
  end
end
redis.call('SADD', KEYS[5], ARGV[2])
redis.call('ZREM', KEYS[1], ARGV[1])
return {1, 0}
"""
