"""Lua script of the status reads (``/status``, ``/poolstat``, ``/totalrunning``).

Part of :mod:`vmpooler.actors.storage.schema`: import ``StatusScripts`` from there.

Unlike the other scripts this one writes nothing: it only gathers, in one EVALSHA, what
would otherwise take hundreds of commands (SCARD of four queues of every pool, ...).
Handling one command and one reply instead of ~400 is what makes ``/status`` cheap for the
API process; running inside Redis also makes the reading one consistent snapshot.

Key names are never built in Lua: the caller passes every key, named by
:mod:`vmpooler.actors.storage.schema`, in ``KEYS``.
"""

from __future__ import annotations

__all__ = ["StatusScripts"]


class StatusScripts:
    """Lua source of the one-round-trip status reading, registered once by the status store."""

    # KEYS: S sets, then H hashes, then T (0 or 5) counter/queue keys, then A duration
    # hashes, then D hashes, in order:
    #   KEYS[1..S]        sets whose sizes are counted (SCARD)
    #   next H keys       hashes in which every field of ARGV[6..] is looked up (HMGET)
    #   next T keys       T = 5: tasks__clone, tasks__ondemandclone (GET),
    #                     provisioning__request, provisioning__processing (ZCARD),
    #                     odcreate__task (ZRANGE 0 -1)
    #   next A keys       hashes of durations (seconds as text), summed here (HVALS)
    #   last D keys       hashes read whole (HGETALL)
    # ARGV[1] S, ARGV[2] H, ARGV[3] T (0 or 5), ARGV[4] D, ARGV[5] A, ARGV[6..] the fields
    # for the H hashes
    # Returns {counts, lookups, totals, wholes, sums}, never a nil anywhere (nil / false
    # would reach RESP2 clients as nil but RESP3 clients as a boolean):
    #   counts   {n_1, ..., n_S}, integers
    #   lookups  one array per H hash: {field, value, field, value, ...} of the fields present
    #   totals   {} when T = 0, else {clone, ondemandclone, waiting, processing, {tasks...}}:
    #            the two counters as strings ('' when unset), two integers, the members
    #   wholes   one flat HGETALL array {field, value, ...} per D hash
    #   sums     one array per A hash: {0, count, sum, min, max} when every value is a plain
    #            decimal ('12.5', '-3', '.5', '7.'; sum, min and max as '%.17g' text, which
    #            reads back as the very same double; '' for none), else {1, value, ...}: the
    #            values as stored, for the caller to read. Plain decimals are what strtod and
    #            Python's float() read alike; the sum is added in HVALS order, as the caller
    #            adds the values it reads itself.
    READ_STATUS = """
local s, h, t, d = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local a = tonumber(ARGV[5])
local counts = {}
for i = 1, s do counts[i] = redis.call('SCARD', KEYS[i]) end
local lookups = {}
for j = 1, h do
  local key, found = KEYS[s + j], {}
  local first = 6
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
local sums = {}
for j = 1, a do
  local values = redis.call('HVALS', KEYS[base + j])
  local n, sum, low, high, plain = 0, 0, 0, 0, true
  for _, text in ipairs(values) do
    local x = nil
    if string.find(text, '^%-?%d+%.?%d*$') or string.find(text, '^%-?%.%d+$') then
      x = tonumber(text)
    end
    if x == nil or x ~= x or x == math.huge or x == -math.huge then plain = false; break end
    if n == 0 then low = x; high = x end
    if x < low then low = x end
    if x > high then high = x end
    n = n + 1
    sum = sum + x
  end
  if plain and (sum == math.huge or sum == -math.huge or sum ~= sum) then plain = false end
  if not plain then
    local out = {1}
    for i, text in ipairs(values) do out[i + 1] = text end
    sums[j] = out
  elseif n == 0 then
    sums[j] = {0, 0, '', '', ''}
  else
    sums[j] = {0, n, string.format('%.17g', sum), string.format('%.17g', low),
               string.format('%.17g', high)}
  end
end
base = base + a
local wholes = {}
for j = 1, d do wholes[j] = redis.call('HGETALL', KEYS[base + j]) end
return {counts, lookups, totals, wholes, sums}
"""
