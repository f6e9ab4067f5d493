"""Lua scripts of the API's VM endpoints: the checkout, the token's touch, the return and
the modification of a VM.

Part of :mod:`vmpooler.actors.storage.schema`: import ``CheckoutScripts`` from there.
"""

from __future__ import annotations

__all__ = ["CHECKOUT_PREPARE", "CHECKOUT_TAKE", "DEMAND_LOG", "LOG_MISS", "CheckoutScripts"]


DEMAND_LOG = """
local function demand_log(key, epoch, member, keep_s, keep_n)
  local kind = redis.call('TYPE', key).ok
  if kind ~= 'zset' and kind ~= 'none' then return end  -- a stray key never fails the caller
  redis.call('ZADD', key, epoch, epoch .. ':' .. member)
  local size = redis.call('ZCARD', key)
  if size > keep_n or size % 64 == 0 then  -- trimmed every 64 entries, and at the bound
    redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. (tonumber(epoch) - keep_s))
    redis.call('ZREMRANGEBYRANK', key, 0, -(keep_n + 1))
  end
end
"""
"""Lua helper: ``demand_log(key, epoch, member, keep_s, keep_n)`` logs ``<epoch>:<member>``
in a pool's checkout log (``schema.demand``) at score ``epoch``, keeping at most ``keep_n``
members and dropping those older than ``keep_s`` seconds at every 64th entry (a trim at each
checkout cost ~8 % of its time); a key of another type is left alone and nothing is logged.
Shared by the checkout and the take of ready VMs by on-demand requests."""

CHECKOUT_PREPARE = """
if redis.replicate_commands then redis.replicate_commands() end
local now, prefix, token, lifetime = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local epoch, keep_s, keep_n = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local units = tonumber(ARGV[12])
""" + DEMAND_LOG + """
local function log_demand(pool, what)
  demand_log('vmpooler__demand__' .. pool, epoch, what, keep_s, keep_n)
end
local user = false
if token ~= '' then
  if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
  redis.call('HSET', KEYS[1], 'last', now)
  user = redis.call('HGET', KEYS[1], 'user')
end
"""
"""The first part of ``CheckoutScripts.CHECKOUT``: helpers and the token check (which may
return ``{-1}``); shared with the quota's checkout (``user_quota_scripts``)."""

LOG_MISS = """
local function log_miss(pool, who)
  if who ~= '' then
    local guard = 'vmpooler__demand_guard__' .. pool
    local kind = redis.call('TYPE', guard).ok
    if kind ~= 'hash' and kind ~= 'none' then return end  -- a stray key: nothing logged
    local asked = redis.call('HINCRBY', guard, who, 1)
    if asked == 1 and redis.call('TTL', guard) < 0 then redis.call('EXPIRE', guard, ARGV[11]) end
    if asked > tonumber(ARGV[10]) then return end
  end
  local missed = redis.call('HINCRBY', 'vmpooler__history__misses', pool, 1)
  demand_log('vmpooler__demand_misses__' .. pool, epoch, '-' .. missed, keep_s, tonumber(ARGV[8]))
end
"""
"""Lua helper of the failed checkout: ``log_miss(pool, who)`` logs one miss ``<epoch>:-<n>``
in the pool's ``schema.demand_misses`` (its own cap, ARGV[8]), unless requester ``who``
('' = not bounded) already asked for ARGV[10] in the pool's window (``schema.demand_guard``,
which expires ARGV[11] seconds after it was created)."""

CHECKOUT_TAKE = LOG_MISS + """
local function key(p, k) return KEYS[1 + 5 * (p - 1) + k] end
local function pool_of(p) return string.sub(key(p, 1), 18) end
local taken = {}
local firsts = {}
local pos = 13
for u = 1, units do
  local n = tonumber(ARGV[pos])
  firsts[u] = n > 0 and tonumber(ARGV[pos + 1])
  local got = false
  for c = 1, n do
    local p = tonumber(ARGV[pos + c])
    while not got do
      local vm = redis.call('SPOP', key(p, 1))
      if not vm then break end
      if redis.call('EXISTS', prefix .. vm) == 1 then
        got = {p, vm}
      else
        redis.call('SADD', key(p, 3), vm)
      end
    end
    if got then break end
  end
  if not got then
    for _, t in ipairs(taken) do redis.call('SADD', key(t[1], 1), t[2]) end
    if epoch ~= '' then
      pos = pos + n + 1
      for v = u + 1, units do
        firsts[v] = tonumber(ARGV[pos]) > 0 and tonumber(ARGV[pos + 1])
        pos = pos + tonumber(ARGV[pos]) + 1
      end
      local who = ARGV[9]
      if who ~= '' then who = (user and user ~= '' and ('u:' .. user)) or ('a:' .. who) end
      local logged = {}
      for v = 1, units do
        local first = firsts[v]
        if first and not logged[first] then
          logged[first] = true
          log_miss(pool_of(first), who)
        end
      end
    end
    return {0, u}
  end
  taken[#taken + 1] = got
  pos = pos + n + 1
end
local out = {1}
for _, t in ipairs(taken) do
  local p, vm = t[1], t[2]
  local h = prefix .. vm
  redis.call('SADD', key(p, 2), vm)
  redis.call('SADD', key(p, 4), vm)
  redis.call('HSET', key(p, 5), vm, now)
  redis.call('HSET', h, 'checkout', now)
  redis.call('HINCRBY', 'vmpooler__history__checkouts', pool_of(p), 1)
  if epoch ~= '' then log_demand(pool_of(p), vm) end
  if token ~= '' then
    redis.call('HSET', h, 'token:token', token)
    if user then redis.call('HSET', h, 'token:user', user) end
  end
  if lifetime ~= '' then redis.call('HSET', h, 'lifetime', lifetime) end
  out[#out + 1] = p
  out[#out + 1] = vm
end
"""
"""The second part of ``CheckoutScripts.CHECKOUT``: takes one VM per unit (returning ``{0, u}``
when a unit finds none) and leaves ``taken`` (pool index, VM) and the reply ``out``."""


class CheckoutScripts:
    """One Lua text per transition the API makes; each documents its KEYS and ARGV."""

    # KEYS[1] token hash (any key when ARGV[3] is ''), then five keys per pool i (1-based) at
    # KEYS[2 + 5*(i-1)] ..: ready, running, completed, migrating, active
    # ARGV[1] now, ARGV[2] VM hash key prefix, ARGV[3] owner token ('' = none), ARGV[4] lifetime
    # ('' = none), ARGV[5] epoch of now ('' = no checkout log), ARGV[6] seconds the logs keep,
    # ARGV[7] members the served log keeps, ARGV[8] members the miss log keeps, ARGV[9] the
    # client's address ('' = misses not bounded per requester), ARGV[10] misses one requester
    # may log per pool and window, ARGV[11] seconds of that window, ARGV[12] number of units,
    # then per unit: n, then n pool indexes in preference order. Each unit takes one ready VM
    # of the first of its pools that has one; a ready VM whose hash is gone is moved to
    # completed and never handed out. All or nothing: if a unit finds no VM, every VM taken in
    # this call goes back to ready and nothing else is written (apart from vanished VMs moved
    # to completed, the token's ``last`` and the miss log).
    # Each VM handed out counts in its pool's field of ``vmpooler__history__checkouts``
    # (schema.history_checkouts; the pool name is its ready key's after ``vmpooler__ready__``).
    # With an epoch, each VM handed out is logged as ``<epoch>:<vm>`` in its pool's
    # ``vmpooler__demand__<pool>`` (schema.demand; at most ARGV[7] members, entries older than
    # ARGV[6] seconds go at every 64th: a trim at each checkout cost ~8 % of its time). When
    # the call finds none, ONE miss ``<epoch>:-<n>`` is logged per distinct pool that is the
    # first pool of some unit, however many units name it, in ``vmpooler__demand_misses__<pool>``
    # (schema.demand_misses, at most ARGV[8] members: misses never push served checkouts out;
    # n: that pool's misses so far, ``vmpooler__history__misses``), and with ARGV[9] only
    # while the requester (``u:<token user>`` when the token has a user, else
    # ``a:<ARGV[9]>``) logged fewer than ARGV[10] in the pool's window (schema.demand_guard).
    # Returns {-1} token unknown (nothing written), {0, u} unit u (1-based) found no VM,
    #         {1, p1, vm1, p2, vm2, ...} the pool index and VM of every unit, in unit order.
    CHECKOUT = CHECKOUT_PREPARE + CHECKOUT_TAKE + "return out\n"

    # KEYS[1] token hash
    # ARGV[1] now
    # Returns {0} the token does not exist (nothing written), else records ``last`` = now and
    # returns {1, user} ('' when the hash has no user).
    TOUCH_TOKEN = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
redis.call('HSET', KEYS[1], 'last', ARGV[1])
return {1, redis.call('HGET', KEYS[1], 'user') or ''}
"""

    # KEYS[1] running, KEYS[2] ready, KEYS[3] completed, KEYS[4] active hash, KEYS[5] migrating
    # ARGV[1] vm
    # A returned VM leaves running (or ready) for completed, and its active and migrating
    # entries go. Returns 1 moved from running, 2 moved from ready, 3 already in completed
    # (nothing written), 0 in none of these queues (nothing written).
    RETURN_VM = """
local vm = ARGV[1]
local from_running = redis.call('SREM', KEYS[1], vm)
local from_ready = redis.call('SREM', KEYS[2], vm)
if from_running + from_ready == 0 then
  if redis.call('SISMEMBER', KEYS[3], vm) == 1 then return 3 end
  return 0
end
redis.call('SADD', KEYS[3], vm)
redis.call('HDEL', KEYS[4], vm)
redis.call('SREM', KEYS[5], vm)
if from_running == 1 then return 1 end
return 2
"""

    # KEYS[1] vm hash, KEYS[2] tag statistics hash of the day
    # ARGV[1] vm, ARGV[2] lifetime ('' = unchanged), ARGV[3] seconds the day's statistics are
    # kept (0: no expiry), ARGV[4] most tags a VM may carry, ARGV[5..] tag name, value pairs
    # Writes ``lifetime`` and ``tag:<name>`` (and ``<vm>:<name>`` in the day's statistics,
    # whose expiry becomes ARGV[3]) only if the VM hash still exists and its tags stay within
    # ARGV[4]. Returns {1} written, {0} the VM is gone, {-1, tags it has, new tag names} the
    # cap would be exceeded (nothing written either way).
    MODIFY_VM = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
if #ARGV > 4 then
  local has, adds = 0, 0
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(f, 1, 4) == 'tag:' then has = has + 1 end
  end
  for i = 5, #ARGV, 2 do
    if redis.call('HEXISTS', KEYS[1], 'tag:' .. ARGV[i]) == 0 then adds = adds + 1 end
  end
  if has + adds > tonumber(ARGV[4]) then return {-1, has, adds} end
end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'lifetime', ARGV[2]) end
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[1], 'tag:' .. ARGV[i], ARGV[i + 1])
  redis.call('HSET', KEYS[2], ARGV[1] .. ':' .. ARGV[i], ARGV[i + 1])
end
if #ARGV > 4 and tonumber(ARGV[3]) > 0 then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
return {1}
"""
