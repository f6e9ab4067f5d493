"""Lua script of the status reads (``/status``, ``/poolstat``, ``/totalrunning``).

Part of :mod:`vmpooler.actors.schema`: import ``StatusScripts`` from there.

Unlike the other scripts this one writes nothing: it only gathers, in one EVALSHA, what a
pipeline of hundreds of commands used to read (SCARD of four queues of every pool, ...).
Handling one command and one reply instead of ~400 is what makes ``/status`` cheap for the
API process; running inside Redis also makes the reading one consistent snapshot.

Key names are never built in Lua: the caller passes every key, named by
:mod:`vmpooler.actors.schema`, in ``KEYS``.
"""

from __future__ import annotations

__all__ = ["StatusScripts"]


class StatusScripts:
    """Lua source of the one-round-trip status reading, registered once by the status store."""

    # KEYS: S sets, then H hashes, then T (0 or 5) counter/queue keys, then D hashes, in order:
    #   KEYS[1..S]        sets whose sizes are counted (SCARD)
    #   next H keys       hashes in which every field of ARGV[5..] is looked up (HMGET)
    #   next T keys       T = 5: tasks__clone, tasks__ondemandclone (GET),
    #                     provisioning__request, provisioning__processing (ZCARD),
    #                     odcreate__task (ZRANGE 0 -1)
    #   last D keys       hashes read whole (HGETALL)
    # ARGV[1] S, ARGV[2] H, ARGV[3] T (0 or 5), ARGV[4] D, ARGV[5..] the fields for the H hashes
    # Returns {counts, lookups, totals, wholes}, never a nil anywhere (nil / false would reach
    # RESP2 clients as nil but RESP3 clients as a boolean):
    #   counts   {n_1, ..., n_S}, integers
    #   lookups  one array per H hash: {field, value, field, value, ...} of the fields present
    #   totals   {} when T = 0, else {clone, ondemandclone, waiting, processing, {tasks...}}:
    #            the two counters as strings ('' when unset), two integers, the members
    #   wholes   one flat HGETALL array {field, value, ...} per D hash
    READ_STATUS = """
local s, h, t, d = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local counts = {}
for i = 1, s do counts[i] = redis.call('SCARD', KEYS[i]) end
local lookups = {}
for j = 1, h do
  local key, found = KEYS[s + j], {}
  local first = 5
  while first <= #ARGV do
    local last = math.min(first + 499, #ARGV)
    local values = redis.call('HMGET', key, unpack(ARGV, first, last))
    for k = 1, last - first + 1 do
      if values[k] then
        found[#found + 1] = ARGV[first + k - 1]
        found[#found + 1] = values[k]
      end
    end
    first = last + 1
  end
  lookups[j] = found
end
local base = s + h
local totals = {}
if t == 5 then
  totals[1] = redis.call('GET', KEYS[base + 1]) or ''
  totals[2] = redis.call('GET', KEYS[base + 2]) or ''
  totals[3] = redis.call('ZCARD', KEYS[base + 3])
  totals[4] = redis.call('ZCARD', KEYS[base + 4])
  totals[5] = redis.call('ZRANGE', KEYS[base + 5], 0, -1)
end
base = base + t
local wholes = {}
for j = 1, d do wholes[j] = redis.call('HGETALL', KEYS[base + j]) end
return {counts, lookups, totals, wholes}
"""
