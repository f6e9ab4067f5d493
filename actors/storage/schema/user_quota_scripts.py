"""Lua scripts of the per-user quotas of ``:quotas:`` (ours, docs/fairness.md): the checkout
and the on-demand request created within a user's limits, and the usage of every user.

Part of :mod:`vmpooler.actors.storage.schema`: import ``UserQuotaScripts`` from there.

Each user who checked out or asked for VMs while quotas are configured has a *held set*
(``schema.quota_held(user)``) whose members are what the user holds:

* ``vm:<pool>:<vm>`` a VM it checked out: held while the VM is in ``pool``'s running set;
* ``rq:<id>`` an on-demand request: while in flight (no status) it holds its requested
  count; once ready, its delivered VMs still running; failed, deleted or gone, nothing.

A member that holds nothing is dropped by the next script that counts the set, so nothing
else has to release it (a returned VM, an expired request, a deleted one). The check and the
write are one script, so concurrent clients can never jointly exceed a limit. The users
index (``schema.quota_users()``) maps each user with a held set to
``<label>|<vms_held>|<ondemand_in_flight>|<vms_per_request>|<lifetime_hours>``: an opaque
number (``schema.quota_labels()`` counts them) and the limits in force at its last write
(empty: no limit), for the usage view.
"""

from __future__ import annotations

from vmpooler.actors.storage.schema.checkout_scripts import CHECKOUT_PREPARE, CHECKOUT_TAKE
from vmpooler.actors.storage.schema.request_scripts import CREATE_WRITES

__all__ = ["USAGE_OF", "UserQuotaScripts"]


USAGE_OF = """
local function requested_total(requested)
  local total = 0
  for entry in string.gmatch(requested, '[^,]+') do
    total = total + (tonumber(string.match(entry, ':(%d+)$')) or 0)
  end
  return total
end
local function running(pool, vm)
  local reply = redis.pcall('SISMEMBER', 'vmpooler__running__' .. pool, vm)
  return reply == 1
end
local function holds(member, rq_prefix)
  local kind, rest = string.sub(member, 1, 3), string.sub(member, 4)
  if kind == 'vm:' then
    local pool, vm = string.match(rest, '^(.*):([^:]*)$')
    if pool and running(pool, vm) then return 1, 0 end
    return 0, 0
  end
  if kind ~= 'rq:' then return 0, 0 end
  local key = rq_prefix .. rest
  if redis.call('TYPE', key).ok ~= 'hash' then return 0, 0 end
  local f = redis.call('HMGET', key, 'requested', 'status')
  if not f[1] then return 0, 0 end
  if not f[2] or f[2] == '' then return requested_total(f[1]), 1 end
  if f[2] ~= 'ready' then return 0, 0 end
  local n = 0
  for entry in string.gmatch(f[1], '[^,]+') do
    local alias, pool = string.match(entry, '^([^:]*):([^:]*):')
    if alias then
      local vms = redis.pcall('SMEMBERS', 'vmpooler__' .. rest .. '__' .. alias .. '__' .. pool)
      if type(vms) == 'table' and not vms.err then
        for _, vm in ipairs(vms) do
          if running(pool, vm) then n = n + 1 end
        end
      end
    end
  end
  return n, 0
end
local function usage_of(set, rq_prefix)
  local kind = redis.call('TYPE', set).ok
  if kind ~= 'set' then
    if kind ~= 'none' then redis.call('DEL', set) end
    return 0, 0
  end
  local held, flight = 0, 0
  for _, member in ipairs(redis.call('SMEMBERS', set)) do
    local h, f = holds(member, rq_prefix)
    if h > 0 or f > 0 then
      held, flight = held + h, flight + f
    else
      redis.call('SREM', set, member)
    end
  end
  return held, flight
end
local function register(index, labels, user, limits)
  local current = redis.call('HGET', index, user)
  local label = current and string.match(current, '^(%d+)|')
  if not label then label = redis.call('INCR', labels) end
  redis.call('HSET', index, user, label .. '|' .. limits)
end
"""
"""Lua helpers: ``usage_of(set, request hash prefix)`` counts a held set (VMs held, requests
in flight), dropping the members that hold nothing; ``register(index, labels, user,
limits)`` records a user in the users index."""

EACH_USER = USAGE_OF + """
local function each_user(index_key, held_prefix, rq_prefix, visit)
  local index = redis.call('HGETALL', index_key)
  for i = 1, #index, 2 do
    local user, entry = index[i], index[i + 1]
    local set = held_prefix .. user
    local held, flight = usage_of(set, rq_prefix)
    if held == 0 and flight == 0 then
      redis.call('HDEL', index_key, user)
      redis.call('DEL', set)
    else
      visit(user, entry, held, flight)
    end
  end
end
"""
"""Lua: ``each_user(index, held prefix, request prefix, visit)`` calls ``visit(user, entry,
held, in flight)`` for every indexed user holding something, and drops from the index (and
deletes the held set of) every user holding nothing."""


class UserQuotaScripts:
    """Lua sources of the per-user quotas, registered once by their stores."""

    # KEYS and ARGV of CheckoutScripts.CHECKOUT, then three more keys and four more values:
    # KEYS[#KEYS-2] the user's held set, KEYS[#KEYS-1] the users index, KEYS[#KEYS] the label
    # counter; ARGV[#ARGV-3] user, ARGV[#ARGV-2] the vms_held limit ('' = none),
    # ARGV[#ARGV-1] the limits text of the index, ARGV[#ARGV] request hash key prefix.
    # After the token check, the user's held VMs are counted (dropping what it no longer
    # holds); with a limit, a checkout that would take them over it is refused before any VM
    # is taken. Each VM handed out joins the held set as ``vm:<pool>:<vm>``.
    # Returns what CHECKOUT returns, or {-2, limit, held} over the vms_held limit (nothing
    # written but the token's ``last`` and the dropped members).
    CHECKOUT_WITHIN_QUOTA = CHECKOUT_PREPARE + USAGE_OF + """
local q_set, q_index, q_labels = KEYS[#KEYS - 2], KEYS[#KEYS - 1], KEYS[#KEYS]
local q_user, q_limit = ARGV[#ARGV - 3], ARGV[#ARGV - 2]
local q_limits, q_prefix = ARGV[#ARGV - 1], ARGV[#ARGV]
local q_held = usage_of(q_set, q_prefix)
if q_limit ~= '' and q_held + units > tonumber(q_limit) then
  return {-2, tonumber(q_limit), q_held}
end
""" + CHECKOUT_TAKE + """
for _, t in ipairs(taken) do
  redis.call('SADD', q_set, 'vm:' .. pool_of(t[1]) .. ':' .. t[2])
end
register(q_index, q_labels, q_user, q_limits)
return out
"""

    # KEYS[1] request hash, KEYS[2] provisioning__request, KEYS[3] the user's held set,
    # KEYS[4] the users index, KEYS[5] the label counter
    # ARGV[1..8] as RequestScripts.CREATE (ARGV[6]: the user), ARGV[9] the
    # ondemand_in_flight limit ('' = none), ARGV[10] the vms_held limit ('' = none),
    # ARGV[11] VMs the request asks for, ARGV[12] the limits text of the index,
    # ARGV[13] request hash key prefix, ARGV[14] the lifetime (hours) its VMs get under
    # ``lifetime_hours`` ('' = none: the usual lifetime)
    # The user's held set is counted (dropping what it no longer holds); the request is
    # created and joins the set as ``rq:<id>`` only if the id is free and both limits hold.
    # With ARGV[14] the request hash gets ``quota_lifetime``, which caps the lifetime of
    # every VM handed to it (request_scripts.REQUEST_LIFETIME).
    # Returns {1, held, in flight} created (counts including it), {0, 0, 0} the id is taken,
    # {-1, limit, in flight} too many requests in flight, {-2, limit, held} too many VMs held
    # (nothing written but the dropped members).
    CREATE_WITHIN_QUOTA = USAGE_OF + """
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, 0, 0} end
local held, flight = usage_of(KEYS[3], ARGV[13])
if ARGV[9] ~= '' and flight >= tonumber(ARGV[9]) then return {-1, tonumber(ARGV[9]), flight} end
local asked = tonumber(ARGV[11])
if ARGV[10] ~= '' and held + asked > tonumber(ARGV[10]) then
  return {-2, tonumber(ARGV[10]), held}
end
""" + CREATE_WRITES + """
if ARGV[14] ~= '' then redis.call('HSET', KEYS[1], 'quota_lifetime', ARGV[14]) end
redis.call('SADD', KEYS[3], 'rq:' .. ARGV[1])
register(KEYS[4], KEYS[5], ARGV[6], ARGV[12])
return {1, held + asked, flight + 1}
"""

    # KEYS[1] the users index
    # ARGV[1] held set key prefix, ARGV[2] request hash key prefix
    # Counts every indexed user's held set (dropping what it no longer holds); a user
    # holding nothing leaves the index and its set goes.
    # Returns {user1, entry1, held1, in flight1, user2, ...} (entry: the index's value).
    USAGE = EACH_USER + """
local out = {}
each_user(KEYS[1], ARGV[1], ARGV[2], function(user, entry, held, flight)
  out[#out + 1] = user; out[#out + 1] = entry
  out[#out + 1] = held; out[#out + 1] = flight
end)
return out
"""

    # KEYS[1] the users index, KEYS[2] the usage snapshot (hash)
    # ARGV[1] held set key prefix, ARGV[2] request hash key prefix, ARGV[3] now (seconds,
    # the caller's clock), ARGV[4] the snapshot's largest age (seconds), ARGV[5] how many
    # users the snapshot lists, ARGV[6] the snapshot's TTL (seconds)
    # While the snapshot was computed less than ARGV[4] seconds before ARGV[3], it is returned
    # as stored (O(1)); else the users are counted as USAGE counts them (dropping what holds
    # nothing), the ARGV[5] holding the most VMs kept (then most requests in flight, then
    # smallest label), and the result is stored with ``at`` = ARGV[3] and returned. Scripts
    # run one at a time, so of concurrent callers only the first counts; the others find
    # its snapshot fresh.
    # Returns {at, users, vms_held, ondemand_in_flight, top, counted}: ``top`` JSON
    # ``[[user, entry, held, in flight], ...]`` (``{}`` when empty; entry: the index's
    # value), the totals over every user holding something, counted 1 when this call counted.
    USAGE_SNAPSHOT = EACH_USER + """
local now, max_age = tonumber(ARGV[3]), tonumber(ARGV[4])
local snap = redis.call('HMGET', KEYS[2], 'at', 'users', 'vms_held', 'ondemand_in_flight', 'top')
local at = tonumber(snap[1])
if at and snap[5] and now - at >= 0 and now - at < max_age then
  return {snap[1], snap[2], snap[3], snap[4], snap[5], 0}
end
local rows, users, held_total, flight_total = {}, 0, 0, 0
each_user(KEYS[1], ARGV[1], ARGV[2], function(user, entry, held, flight)
  users = users + 1
  held_total, flight_total = held_total + held, flight_total + flight
  rows[#rows + 1] = {user, entry, held, flight, tonumber(string.match(entry, '^(%d+)|')) or 0}
end)
table.sort(rows, function(x, y)
  if x[3] ~= y[3] then return x[3] > y[3] end
  if x[4] ~= y[4] then return x[4] > y[4] end
  if x[5] ~= y[5] then return x[5] < y[5] end
  return x[1] < y[1]
end)
local top = {}
for i = 1, math.min(#rows, tonumber(ARGV[5])) do
  local row = rows[i]
  top[i] = {row[1], row[2], row[3], row[4]}
end
local text = cjson.encode(top)
redis.call('HSET', KEYS[2], 'at', ARGV[3], 'users', users, 'vms_held', held_total,
           'ondemand_in_flight', flight_total, 'top', text)
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[6]))
return {ARGV[3], tostring(users), tostring(held_total), tostring(flight_total), text, 1}
"""
