"""Lua scripts of the pooled-VM lifecycle (the checkout and the API's VM writes:
:mod:`.checkout_scripts`).

Part of :mod:`vmpooler.actors.storage.schema`: import ``Scripts`` from there.
"""

from __future__ import annotations

__all__ = ["RELEASE_SLOT_BODY", "Scripts"]

RELEASE_SLOT_BODY = """
if redis.call('SREM', {slots}, {vm}) == 1 then
  local n = tonumber(redis.call('GET', {counter}) or '0')
  if n > 0 then redis.call('DECR', {counter}) else redis.call('SET', {counter}, 0) end
end
"""
"""Lua releasing one clone slot: the VM ``{vm}`` leaves the slot set ``{slots}`` of the
manager that took it and, only if it was there, the counter ``{counter}`` goes down by one
(never below zero). So a slot is released once, whoever comes first: the clone's answer, a
refused (fenced) answer, or a fold of its manager's slots after it died (FOLD_SLOTS)."""


class Scripts:
    """Lua sources of every compare-and-set transition, registered once by the store.

    Return codes: ``1`` applied; ``0`` the VM was not in the expected state (nothing written);
    negative values are documented per script.
    """

    # KEYS[1] counter, KEYS[2] vm hash, KEYS[3] pending set, KEYS[4] the starting manager's
    # slot set (``tasks__clone__<manager>`` or ``tasks__ondemandclone__<manager>``), KEYS[5]
    # the slot owners hash
    # ARGV[1] limit, ARGV[2] vm name, ARGV[3] clone time, ARGV[4] pool, ARGV[5] domain ('' = none),
    # ARGV[6] on-demand request id ('' = a pooled clone), ARGV[7] the request's alias,
    # ARGV[8] the starting manager's id
    # Optional KEYS[6] the request's lease, ARGV[9] the lease value the clone was granted
    # under: nothing is written unless the lease holds it.
    # The counter is ``tasks__clone`` for pooled clones, ``tasks__ondemandclone`` for requests;
    # the slot is also recorded as the VM's member of the manager's slot set (RELEASE_SLOT).
    # Returns 1 reserved (counter incremented, hash written, VM in pending),
    #         0 no clone slot (counter >= limit), -1 name taken (hash exists),
    #         -2 the request's lease holds another value (its holder changed).
    START_CLONE = """
if KEYS[6] and redis.call('GET', KEYS[6]) ~= ARGV[9] then return -2 end
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n >= tonumber(ARGV[1]) then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
redis.call('INCR', KEYS[1])
redis.call('SADD', KEYS[4], ARGV[2])
redis.call('HSET', KEYS[5], ARGV[8], 1)
redis.call('HSET', KEYS[2], 'clone', ARGV[3], 'template', ARGV[4], 'pool', ARGV[4])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[2], 'domain', ARGV[5]) end
if ARGV[6] and ARGV[6] ~= '' then
  redis.call('HSET', KEYS[2], 'request_id', ARGV[6], 'pool_alias', ARGV[7])
end
redis.call('SADD', KEYS[3], ARGV[2])
return 1
"""

    # KEYS[1] migrations-in-flight set (``vmpooler__migration``)
    # ARGV[1] limit, ARGV[2] vm name
    # Returns 1 when the VM may migrate (it is now in the set), 0 when ``limit`` VMs already
    # migrate. The check and the SADD are one step, so concurrent pools never overshoot
    # (vmpooler read SCARD and SADDed later).
    RESERVE_MIGRATION = """
if redis.call('SISMEMBER', KEYS[1], ARGV[2]) == 1 then return 1 end
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('SADD', KEYS[1], ARGV[2])
return 1
"""

    # KEYS[1] vm hash; ARGV field, value, field, value...
    # Returns 1 when written, 0 when the hash does not exist (the VM is gone: not recreated).
    SET_FIELDS_IF_EXISTS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""

    # The owner's plain writes, as scripts so that they can run behind the fence
    # (schema.lease_scripts.fenced); unfenced, the store sends the plain commands instead.
    # KEYS vm hashes; ARGV[i] the field, value pairs for KEYS[i], each ``field\tvalue``.
    # HSETs each. Returns 1.
    SET_FIELDS = """
for i, key in ipairs(KEYS) do
  local field, value = string.match(ARGV[i], '^([^\t]*)\t(.*)$')
  redis.call('HSET', key, field, value)
end
return 1
"""

    # KEYS[1] set; ARGV[1] member. SREM. Returns what SREM returns.
    SET_REMOVE = """
return redis.call('SREM', KEYS[1], ARGV[1])
"""

    # KEYS[1] the empty flag; ARGV[1] '1' to set it ("true"), '0' to delete it. Returns 1.
    SET_FLAG = """
if ARGV[1] == '1' then redis.call('SET', KEYS[1], 'true') else redis.call('DEL', KEYS[1]) end
return 1
"""

    # KEYS[1] counter, KEYS[2] vm hash, KEYS[3] clone stats hash of the day, KEYS[4] the
    # manager's slot set
    # ARGV[1] "<pool>:<vm>", ARGV[2] clone seconds, ARGV[3] ip, ARGV[4] vm
    # Releases the clone slot (RELEASE_SLOT) and records the clone; counts it in the pool's
    # field of ``vmpooler__history__clones`` (schema.history_clones). Returns 1.
    CLONE_SUCCEEDED = RELEASE_SLOT_BODY.format(counter="KEYS[1]", slots="KEYS[4]",
                                               vm="ARGV[4]") + """
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HSET', KEYS[2], 'clone_time', ARGV[2], 'ip', ARGV[3])
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('HINCRBY', 'vmpooler__history__clones', string.match(ARGV[1], '^(.*):') or ARGV[1], 1)
return 1
"""

    # KEYS[1] counter, KEYS[2] vm hash, KEYS[3] pending set, KEYS[4] the manager's slot set
    # ARGV[1] vm, ARGV[2] error message, ARGV[3] error class, ARGV[4] hash ttl seconds,
    # ARGV[5] '1' to release the VM's clone slot (RELEASE_SLOT)
    # Removes the VM from pending and lets its hash expire. Returns 1 if it was pending, else 0.
    CLONE_FAILED = """
if ARGV[5] == '1' then
""" + RELEASE_SLOT_BODY.format(counter="KEYS[1]", slots="KEYS[4]", vm="ARGV[1]") + """
end
local was = redis.call('SREM', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[2], 'clone_error', ARGV[2], 'clone_error_class', ARGV[3])
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4]))
return was
"""

    # KEYS[1] pending, KEYS[2] ready, KEYS[3] vm hash, KEYS[4] boot stats of the day,
    # KEYS[5] lastboot hash
    # ARGV[1] vm, ARGV[2] pool, ARGV[3] now (vmpooler time string), ARGV[4] boot seconds
    # Moves pending -> ready only if the VM is pending and was not cloned for an on-demand
    # request (its request takes it instead).
    # Returns 1 moved, 0 not pending, -1 a request's VM (nothing written).
    MARK_READY = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('HEXISTS', KEYS[3], 'request_id') == 1 then return -1 end
redis.call('SMOVE', KEYS[1], KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], 'ready', ARGV[3])
redis.call('HSET', KEYS[4], ARGV[2] .. ':' .. ARGV[1], ARGV[4])
redis.call('HSET', KEYS[5], ARGV[2], ARGV[3])
return 1
"""

    # KEYS[1] source set, KEYS[2] completed set, KEYS[3] vm hash
    # ARGV[1] vm, ARGV[2] field to set ('' = none), ARGV[3] its value
    # Moves the VM to completed only if it is in the source set. Returns 1 moved, 0 not there.
    RETIRE = """
if redis.call('SMOVE', KEYS[1], KEYS[2], ARGV[1]) == 0 then return 0 end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[3], ARGV[2], ARGV[3]) end
return 1
"""

    # KEYS[1] completed, KEYS[2] active hash, KEYS[3] vm hash
    # ARGV[1] vm, ARGV[2] now, ARGV[3] hash ttl seconds
    # Marks a completed VM as being destroyed. Returns 1, or 0 if it is not in completed.
    BEGIN_DESTROY = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], 'destroy', ARGV[2])
redis.call('EXPIRE', KEYS[3], tonumber(ARGV[3]))
return 1
"""

    # KEYS[1] completed, KEYS[2] active hash, KEYS[3] vm hash
    # ARGV[1] vm, ARGV[2] '1' to delete the VM hash now (the VM was not in the inventory)
    # Forgets a destroyed VM. Returns 1 if it was in completed, else 0.
    FORGET = """
local was = redis.call('SREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if ARGV[2] == '1' then redis.call('DEL', KEYS[3]) end
return was
"""

    # KEYS[1] pending, KEYS[2] ready, KEYS[3] running, KEYS[4] completed, KEYS[5] discovered
    # ARGV: VM names found in the provider's inventory for this pool
    # Adds to discovered every VM that is in no queue. Returns the list of VMs added.
    DISCOVER = """
local added = {}
for _, name in ipairs(ARGV) do
  local known = false
  for i = 1, 5 do
    if redis.call('SISMEMBER', KEYS[i], name) == 1 then known = true; break end
  end
  if not known then
    redis.call('SADD', KEYS[5], name)
    table.insert(added, name)
  end
end
return added
"""

    # KEYS[1] pending, KEYS[2] ready, KEYS[3] running, KEYS[4] completed, KEYS[5] discovered
    # ARGV[1] vm
    # A discovered VM still in no other queue moves to completed (to be destroyed); one that
    # appeared in another queue meanwhile is only removed from discovered.
    # Returns 1 moved to completed, 2 claimed elsewhere, 0 not in discovered.
    RESOLVE_DISCOVERED = """
if redis.call('SISMEMBER', KEYS[5], ARGV[1]) == 0 then return 0 end
for i = 1, 3 do
  if redis.call('SISMEMBER', KEYS[i], ARGV[1]) == 1 then
    redis.call('SREM', KEYS[5], ARGV[1]); return 2
  end
end
redis.call('SMOVE', KEYS[5], KEYS[4], ARGV[1])
return 1
"""

    # KEYS[1] ready, KEYS[2] pending, KEYS[3] completed
    # ARGV[1] '1' to drain ready too ('0' = pending only), ARGV[2] VM hash key prefix
    # Moves every pending (and ready) VM to completed atomically, except pending VMs cloned
    # for an on-demand request (their request owns them). Returns the number moved.
    DRAIN = """
local moved = 0
local sources = {KEYS[2]}
if ARGV[1] == '1' then sources = {KEYS[1], KEYS[2]} end
for _, key in ipairs(sources) do
  for _, name in ipairs(redis.call('SMEMBERS', key)) do
    if key == KEYS[1] or redis.call('HEXISTS', ARGV[2] .. name, 'request_id') == 0 then
      redis.call('SMOVE', key, KEYS[3], name)
      moved = moved + 1
    end
  end
end
return moved
"""

    # KEYS[1] pooled clone counter, KEYS[2] on-demand clone counter, KEYS[3] slot owners hash
    # ARGV[1] pooled slot set key prefix (``tasks__clone__``), ARGV[2] on-demand slot set key
    # prefix, ARGV[3..] managers that are gone
    # Forgets the slots of the managers gone (their slot sets and their owner entries; an
    # answer of theirs that comes later releases nothing), then sets each counter to the sum
    # of the remaining owners' slot set sizes: the counters hold exactly the slots of live
    # managers, never zeroed under a manager that has clones in flight. One step, so a clone
    # starting or finishing meanwhile is counted once.
    # Returns {pooled, on-demand, slots forgotten}.
    FOLD_SLOTS = """
local forgotten = 0
for i = 3, #ARGV do
  forgotten = forgotten + redis.call('SCARD', ARGV[1] .. ARGV[i])
      + redis.call('SCARD', ARGV[2] .. ARGV[i])
  redis.call('DEL', ARGV[1] .. ARGV[i], ARGV[2] .. ARGV[i])
  redis.call('HDEL', KEYS[3], ARGV[i])
end
local pooled, ondemand = 0, 0
for _, owner in ipairs(redis.call('HKEYS', KEYS[3])) do
  pooled = pooled + redis.call('SCARD', ARGV[1] .. owner)
  ondemand = ondemand + redis.call('SCARD', ARGV[2] .. owner)
end
redis.call('SET', KEYS[1], pooled)
redis.call('SET', KEYS[2], ondemand)
return {pooled, ondemand, forgotten}
"""

    # KEYS[1] counter, KEYS[2] the manager's slot set; ARGV[1] vm
    # Releases the VM's clone slot if the manager still holds it (RELEASE_SLOT_BODY). Returns
    # the counter's new value.
    RELEASE_SLOT = RELEASE_SLOT_BODY.format(counter="KEYS[1]", slots="KEYS[2]", vm="ARGV[1]") + """
return tonumber(redis.call('GET', KEYS[1]) or '0')
"""
