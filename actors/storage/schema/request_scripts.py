"""Lua scripts of the on-demand request lifecycle (reference §2.4).

Part of :mod:`vmpooler.actors.storage.schema`: import ``RequestScripts`` from there.

Every write of a request's ``status`` — by its actor, by the API, by anyone — goes through
one of these scripts, and each checks the current status first (compare-and-set):

* ``failed`` and ``deleted`` are final: no script ever changes them;
* ``ready`` is only ever followed by ``deleted`` (a client returning the request's VMs);
* a request becomes ``ready`` only when every entry's delivered-VM set is full and its status
  is still unset.

The scripts a request's actor runs (CLAIM, ATTACH, FULFIL, FAIL, RETRY, RETIRE) also run
behind the fence of the request's lease (``lease_scripts.fenced``) when several managers
share the Redis: a former holder's late writes are refused.

So a writer outside the actor system — an API process, a second manager, a Ruby vmpooler
sharing the Redis — cannot resurrect a finished request or hand its VMs to anyone else.

Entries of a request are ``alias:pool:count`` (the ``requested`` field). Scripts that touch
an entry's VMs take three keys per entry: its delivered set, the pool's running set and the
pool's completed set.
"""

from __future__ import annotations

from vmpooler.actors.storage.schema.checkout_scripts import DEMAND_LOG

__all__ = ["CREATE_WRITES", "REQUEST_LIFETIME", "RequestScripts"]


CREATE_WRITES = """
redis.call('HSET', KEYS[1], 'requested', ARGV[3])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'token:token', ARGV[4], 'token:user', ARGV[5])
end
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[1], 'user', ARGV[6], 'priority', ARGV[7], 'share', ARGV[8])
end
redis.call('ZADD', KEYS[2], tonumber(ARGV[2]), ARGV[1])
"""
"""The writes of a new request (KEYS and ARGV as ``RequestScripts.CREATE``), shared with the
quota's create (``quota_scripts``)."""

REQUEST_LIFETIME = """
local function request_lifetime(request, usual)
  local cap = tonumber(redis.call('HGET', request, 'quota_lifetime') or '')
  if not cap then return usual end
  local hours = tonumber(usual)
  if hours and hours > 0 and hours < cap then return usual end
  return tostring(cap)
end
"""
"""Lua helper: ``request_lifetime(request hash key, usual)`` the lifetime (hours, '' = none
written) a VM handed to the request gets: ``usual`` (what it gets without quotas), capped
by the request's ``quota_lifetime`` (ours: written at its creation when the user's
``lifetime_hours`` shortens its VMs' lifetime); a usual lifetime of 0 or none counts as
longer than any cap."""


class RequestScripts:
    """Lua sources of the request transitions, registered once by the request store."""

    # KEYS[1] request hash, KEYS[2] provisioning__request
    # ARGV[1] id, ARGV[2] score (creation epoch), ARGV[3] requested, ARGV[4] token ('' = none),
    # ARGV[5] the token's user, ARGV[6] the requester ('' = not recorded; ours: fields
    # ``user``, ``priority`` ARGV[7] and ``share`` ARGV[8])
    # Returns 1 created, 0 the id is taken (nothing written).
    CREATE = (
        "\nif redis.call('EXISTS', KEYS[1]) == 1 then return 0 end"
        + CREATE_WRITES
        + "return 1\n"
    )

    # KEYS[1] request hash, KEYS[2] provisioning__request, KEYS[3] provisioning__processing
    # ARGV[1] id, ARGV[2] now (epoch; the score when the request is in neither queue)
    # Moves the request from the waiting queue to processing, keeping its creation score.
    # Returns {0} no such request (dropped from both queues),
    #         {-1, status} already finished (dropped from both queues),
    #         {1, score, requested, retry_count, token, fresh, user, priority, share,
    #         token_user}; fresh '1' when the request came from the waiting queue (never
    #         claimed before, so no VM was cloned for it); user, priority and share are who
    #         asked ('' when not recorded: older writers), token_user the token's user.
    CLAIM = """
local requested = redis.call('HGET', KEYS[1], 'requested')
if not requested then
  redis.call('ZREM', KEYS[2], ARGV[1]); redis.call('ZREM', KEYS[3], ARGV[1])
  return {0}
end
local status = redis.call('HGET', KEYS[1], 'status')
if status and status ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[1]); redis.call('ZREM', KEYS[3], ARGV[1])
  return {-1, status}
end
local score = redis.call('ZSCORE', KEYS[3], ARGV[1])
local fresh = '0'
if not score then
  score = redis.call('ZSCORE', KEYS[2], ARGV[1])
  if score then fresh = '1' else score = ARGV[2] end
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], tonumber(score), ARGV[1])
local function field(name) return redis.call('HGET', KEYS[1], name) or '' end
return {1, tostring(score), requested, redis.call('HGET', KEYS[1], 'retry_count') or '0',
        field('token:token'), fresh,
        field('user'), field('priority'), field('share'), field('token:user')}
"""

    # KEYS[1] request hash, KEYS[2] pool's pending set, KEYS[3] running, KEYS[4] completed,
    # KEYS[5] the entry's delivered set, KEYS[6] pool's active hash, KEYS[7] VM hash
    # ARGV[1] vm, ARGV[2] now (vmpooler time string), ARGV[3] entry count,
    # ARGV[4] lifetime hours for a request with a token ('' = leave unset)
    # Hands a ready VM to its request: pending -> running, recorded as delivered and checked
    # out under the request's token. A VM the request cannot take (request finished or gone,
    # entry already full) goes pending -> completed instead. The VM's ``lifetime`` is ARGV[4]
    # (token only) capped by the request's ``quota_lifetime`` (REQUEST_LIFETIME).
    # Returns 1 attached, 2 already attached, 0 the VM is not pending (nothing written),
    #         -1 refused and moved to completed.
    ATTACH = REQUEST_LIFETIME + """
if redis.call('SISMEMBER', KEYS[5], ARGV[1]) == 1 then return 2 end
local status = redis.call('HGET', KEYS[1], 'status')
local refuse = redis.call('HEXISTS', KEYS[1], 'requested') == 0
  or (status and status ~= '')
  or redis.call('SCARD', KEYS[5]) >= tonumber(ARGV[3])
if refuse then
  if redis.call('SMOVE', KEYS[2], KEYS[4], ARGV[1]) == 1 then return -1 end
  return 0
end
if redis.call('SMOVE', KEYS[2], KEYS[3], ARGV[1]) == 0 then return 0 end
redis.call('SADD', KEYS[5], ARGV[1])
redis.call('HSET', KEYS[6], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[7], 'checkout', ARGV[2])
local token = redis.call('HGET', KEYS[1], 'token:token')
local usual = ''
if token then
  redis.call('HSET', KEYS[7], 'token:token', token,
             'token:user', redis.call('HGET', KEYS[1], 'token:user') or '')
  usual = ARGV[4]
end
local lifetime = request_lifetime(KEYS[1], usual)
if lifetime ~= '' then redis.call('HSET', KEYS[7], 'lifetime', lifetime) end
return 1
"""

    # KEYS[1] request hash, KEYS[2] pool's ready set, KEYS[3] running, KEYS[4] the entry's
    # delivered set, KEYS[5] pool's active hash, KEYS[6] pool's checkout log (schema.demand)
    # ARGV[1] now (vmpooler time string), ARGV[2] entry count, ARGV[3] lifetime hours for a
    # request with a token ('' = leave unset), ARGV[4] VM hash key prefix, ARGV[5] request
    # id, ARGV[6] the entry's alias, ARGV[7] epoch of now ('' = no checkout log), ARGV[8]
    # seconds the log keeps, ARGV[9] members it keeps, ARGV[10..] candidate VMs (read from
    # the ready set by the caller, so any of them may have been checked out or taken since)
    # ``ondemand_from_ready`` (ours): hands ready VMs to the request as ATTACH hands a
    # finished clone (ready -> running, recorded as delivered, checked out under the
    # request's token, ``lifetime`` as ATTACH writes it; the VM hash also gets
    # ``request_id`` and ``pool_alias``), while the request is in flight and the entry not
    # full. A candidate counts only if this script moves it out of the ready set itself
    # (SMOVE = 1): one taken meanwhile by a checkout or another request is skipped, so a VM
    # never has two owners. A candidate whose hash is gone is left for the pool actor. With
    # an epoch, each VM taken is logged in the pool's checkout log as the checkout logs it
    # (``<epoch>:<vm>``, DEMAND_LOG; a key of another type is left alone).
    # Returns the VMs taken (possibly none).
    TAKE_READY = DEMAND_LOG + REQUEST_LIFETIME + """
local status = redis.call('HGET', KEYS[1], 'status')
if redis.call('HEXISTS', KEYS[1], 'requested') == 0 or (status and status ~= '') then
  return {}
end
local room = tonumber(ARGV[2]) - redis.call('SCARD', KEYS[4])
local token = redis.call('HGET', KEYS[1], 'token:token')
local user = redis.call('HGET', KEYS[1], 'token:user') or ''
local lifetime = request_lifetime(KEYS[1], token and ARGV[3] or '')
local epoch, keep_s, keep_n = ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])
local taken = {}
for i = 10, #ARGV do
  if room <= 0 then break end
  local vm = ARGV[i]
  local h = ARGV[4] .. vm
  if redis.call('EXISTS', h) == 1 and redis.call('SMOVE', KEYS[2], KEYS[3], vm) == 1 then
    redis.call('SADD', KEYS[4], vm)
    redis.call('HSET', KEYS[5], vm, ARGV[1])
    redis.call('HSET', h, 'checkout', ARGV[1], 'request_id', ARGV[5], 'pool_alias', ARGV[6])
    if token then redis.call('HSET', h, 'token:token', token, 'token:user', user) end
    if lifetime ~= '' then redis.call('HSET', h, 'lifetime', lifetime) end
    if epoch ~= '' then demand_log(KEYS[6], epoch, vm, keep_s, keep_n) end
    room = room - 1
    taken[#taken + 1] = vm
  end
end
return taken
"""

    # KEYS[1] request hash, KEYS[2] provisioning__processing, KEYS[3..] delivered sets
    # ARGV[1] id, ARGV[2] hash ttl seconds, ARGV[3..] the count of each set
    # Marks the request ready if its status is unset and every set is full.
    # Returns {1} ready, {0, status} already finished ('' = request gone), {-1} not complete.
    FULFIL = """
if redis.call('HEXISTS', KEYS[1], 'requested') == 0 then return {0, ''} end
local status = redis.call('HGET', KEYS[1], 'status')
if status and status ~= '' then return {0, status} end
for i = 3, #KEYS do
  if redis.call('SCARD', KEYS[i]) < tonumber(ARGV[i]) then return {-1} end
end
redis.call('HSET', KEYS[1], 'status', 'ready')
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
redis.call('ZREM', KEYS[2], ARGV[1])
return {1}
"""

    # KEYS[1] request hash, KEYS[2] provisioning__request, KEYS[3] provisioning__processing,
    # then per entry: delivered set, pool's running set, pool's completed set
    # ARGV[1] id, ARGV[2] failure reason, ARGV[3] ttl seconds of the hash and the sets
    # Fails a request whose status is unset: its delivered VMs running -> completed.
    # Returns {1, moved} failed, {0, status} already finished ('' = request gone).
    FAIL = """
if redis.call('HEXISTS', KEYS[1], 'requested') == 0 then return {0, ''} end
local status = redis.call('HGET', KEYS[1], 'status')
if status and status ~= '' then return {0, status} end
redis.call('HSET', KEYS[1], 'status', 'failed', 'failure_reason', ARGV[2])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
redis.call('ZREM', KEYS[2], ARGV[1]); redis.call('ZREM', KEYS[3], ARGV[1])
local moved = 0
for i = 4, #KEYS, 3 do
  for _, vm in ipairs(redis.call('SMEMBERS', KEYS[i])) do
    moved = moved + redis.call('SMOVE', KEYS[i + 1], KEYS[i + 2], vm)
  end
  redis.call('EXPIRE', KEYS[i], tonumber(ARGV[3]))
end
return {1, moved}
"""

    # KEYS[1] request hash, KEYS[2] provisioning__request, KEYS[3] provisioning__processing,
    # then per entry: delivered set, pool's running set, pool's completed set
    # ARGV[1] id, ARGV[2] ttl seconds of the hash
    # Deletes a request (the API's DELETE): status -> deleted unless it failed; its delivered
    # VMs running -> completed; the sets removed.
    # Returns {1, moved} deleted, {0} no such request, {-1} already deleted,
    #         {-2} it had failed (status kept).
    DELETE = """
if redis.call('HEXISTS', KEYS[1], 'requested') == 0 then return {0} end
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'deleted' then return {-1} end
if status == 'failed' then return {-2} end
redis.call('HSET', KEYS[1], 'status', 'deleted')
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
redis.call('ZREM', KEYS[2], ARGV[1]); redis.call('ZREM', KEYS[3], ARGV[1])
local moved = 0
for i = 4, #KEYS, 3 do
  for _, vm in ipairs(redis.call('SMEMBERS', KEYS[i])) do
    moved = moved + redis.call('SMOVE', KEYS[i + 1], KEYS[i + 2], vm)
  end
  redis.call('DEL', KEYS[i])
end
return {1, moved}
"""

    # KEYS[1] request hash, KEYS[2] pool's pending set, KEYS[3] pool's completed set
    # ARGV[1] vm
    # A ready VM whose request has no actor: completed if the request is finished or gone,
    # else left pending (its actor is being started and will take it).
    # Returns 1 moved to completed, 0 left alone.
    SETTLE_ORPHAN = """
local status = redis.call('HGET', KEYS[1], 'status')
if redis.call('HEXISTS', KEYS[1], 'requested') == 1 and not (status and status ~= '') then
  return 0
end
return redis.call('SMOVE', KEYS[2], KEYS[3], ARGV[1])
"""

    # KEYS[1] request hash; ARGV: none
    # Counts one more clone retry of the request. Returns the new count.
    RETRY = """
return redis.call('HINCRBY', KEYS[1], 'retry_count', 1)
"""

    # KEYS[1] pool's pending set, KEYS[2] pool's completed set; ARGV[1] vm
    # A finished request's VM still booting: pending -> completed. Returns 1 moved, 0 not
    # pending.
    RETIRE = """
return redis.call('SMOVE', KEYS[1], KEYS[2], ARGV[1])
"""

    # KEYS: the pending set of each pool the request uses
    # ARGV[1] id, ARGV[2] VM hash key prefix
    # Returns, per key, a list {vm1, alias1, vm2, alias2, ...} of the pending VMs cloned for
    # this request (from each VM hash's ``request_id`` and ``pool_alias``).
    IN_FLIGHT = """
local out = {}
for i, key in ipairs(KEYS) do
  local found = {}
  for _, vm in ipairs(redis.call('SMEMBERS', key)) do
    local f = redis.call('HMGET', ARGV[2] .. vm, 'request_id', 'pool_alias')
    if f[1] == ARGV[1] then
      table.insert(found, vm); table.insert(found, f[2] or '')
    end
  end
  out[i] = found
end
return out
"""
