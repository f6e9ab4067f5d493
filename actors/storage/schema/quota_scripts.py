"""Lua script of the per-user limit on on-demand requests in flight
(``max_ondemand_requests_per_user``).

Part of :mod:`vmpooler.actors.storage.schema`: import ``QuotaScripts`` from there. The count
and the creation are one script, so two requests racing for a user's last slot cannot both
be created; a request stops counting as soon as its status is set (ready, failed, deleted)
or its hash is gone, without anyone having to release it.
"""

from __future__ import annotations

from vmpooler.actors.storage.schema.request_scripts import CREATE_WRITES

__all__ = ["QuotaScripts"]


class QuotaScripts:
    """Lua sources of the in-flight quota, registered once by the quota store."""

    # KEYS[1] request hash, KEYS[2] provisioning__request, KEYS[3] the user's in-flight set
    # ARGV[1..8] as RequestScripts.CREATE, ARGV[9] limit, ARGV[10] request hash key prefix,
    # ARGV[11] seconds the in-flight set lives after its last write
    # Members of the set whose request is no longer in flight (no hash, a hash of another
    # type, no ``requested`` field, or a status) are dropped first; then the request is
    # created and added to the set only if fewer than ``limit`` remain.
    # Returns 1 created, 0 the id is taken, -1 the user has ``limit`` requests in flight
    # (nothing written but the dropped members), each with the number in flight:
    # {code, in flight}.
    CREATE_WITHIN_QUOTA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, 0} end
if redis.call('TYPE', KEYS[3]).ok ~= 'set' then redis.call('DEL', KEYS[3]) end
local live = 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local key = ARGV[10] .. id
  local finished = true
  if redis.call('TYPE', key).ok == 'hash' then
    local f = redis.call('HMGET', key, 'requested', 'status')
    finished = (not f[1]) or (f[2] and f[2] ~= '') or false
  end
  if finished then redis.call('SREM', KEYS[3], id) else live = live + 1 end
end
if live >= tonumber(ARGV[9]) then return {-1, live} end
""" + CREATE_WRITES + """
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('EXPIRE', KEYS[3], tonumber(ARGV[11]))
return {1, live + 1}
"""
