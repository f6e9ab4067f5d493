"""The Redis schema: every key name and every Lua script vmpooler uses, in one place.

Key names are vmpooler 3.9.1's exactly (reference §2.1), so a Redis shared with a Ruby
vmpooler, dashboards and operators' scripts keep working. Nothing else in the project spells
``vmpooler__``: everything asks this module.

Each Lua script is one transition that could race with another process (the API, another
manager). It checks the current state before it writes, and returns a code the caller must
handle. Scripts document their KEYS and ARGV.
"""

from __future__ import annotations

__all__ = [
    "Scripts",
    "active",
    "boot_stats",
    "clone_stats",
    "commands",
    "completed",
    "config_clone_target",
    "config_poolsize",
    "config_template",
    "discovered",
    "dlq",
    "empty",
    "lastboot",
    "migrating",
    "migration",
    "odcreate_task",
    "pending",
    "pool_hash",
    "poolreset",
    "pools",
    "provisioning_processing",
    "provisioning_request",
    "ratelimit",
    "ready",
    "running",
    "tasks_clone",
    "tasks_disk",
    "tasks_ondemandclone",
    "tasks_snapshot",
    "tasks_snapshot_revert",
    "template_deltas",
    "template_prepared",
    "token",
    "undo_size_override",
    "undo_template_override",
    "vm",
]

_P = "vmpooler__"


# -- per-pool VM queues (sets) -------------------------------------------------------------
def pending(pool: str) -> str:
    """Set of VMs being cloned or booting."""
    return f"{_P}pending__{pool}"


def ready(pool: str) -> str:
    """Set of VMs ready for checkout."""
    return f"{_P}ready__{pool}"


def running(pool: str) -> str:
    """Set of checked-out VMs."""
    return f"{_P}running__{pool}"


def completed(pool: str) -> str:
    """Set of VMs waiting to be destroyed."""
    return f"{_P}completed__{pool}"


def discovered(pool: str) -> str:
    """Set of provider VMs found in no queue (destroyed on the next pass unless claimed)."""
    return f"{_P}discovered__{pool}"


def migrating(pool: str) -> str:
    """Set of checked-out VMs the provider may migrate (a side set: they stay in running)."""
    return f"{_P}migrating__{pool}"


def active(pool: str) -> str:
    """Hash VM -> checkout time of checked-out VMs."""
    return f"{_P}active__{pool}"


def empty(pool: str) -> str:
    """String ``"true"`` while the pool has no ready VM."""
    return f"{_P}empty__{pool}"


# -- per-VM and per-token hashes ------------------------------------------------------------
def vm(name: str) -> str:
    """Hash of one VM's fields (reference §2.2)."""
    return f"{_P}vm__{name}"


def token(value: str) -> str:
    """Hash ``user``, ``created``, ``last`` of one API token."""
    return f"{_P}token__{value}"


def ratelimit(cls: str, client: str) -> str:
    """Integer request counter of one rate-limit class and client (``ip:<addr>`` or
    ``token:<token>``); expires ``period`` seconds after it was created."""
    return f"{_P}ratelimit__{cls}__{client}"


# -- global counters and task queues --------------------------------------------------------
def tasks_clone() -> str:
    """Integer: pooled clones in flight."""
    return f"{_P}tasks__clone"


def tasks_ondemandclone() -> str:
    """Integer: on-demand clones in flight."""
    return f"{_P}tasks__ondemandclone"


def tasks_disk() -> str:
    """Set of ``"<vm>:<gb>"`` disk requests."""
    return f"{_P}tasks__disk"


def tasks_snapshot() -> str:
    """Set of ``"<vm>:<name>"`` snapshot requests."""
    return f"{_P}tasks__snapshot"


def tasks_snapshot_revert() -> str:
    """Set of ``"<vm>:<name>"`` snapshot-revert requests."""
    return f"{_P}tasks__snapshot-revert"


# -- on-demand request queues (global sorted sets) -------------------------------------------
def provisioning_request() -> str:
    """Sorted set of on-demand request ids not yet expanded, score = creation epoch."""
    return f"{_P}provisioning__request"


def provisioning_processing() -> str:
    """Sorted set of on-demand request ids being provisioned, score = creation epoch."""
    return f"{_P}provisioning__processing"


def odcreate_task() -> str:
    """Sorted set of clone tasks ``"<name>:<pool>:<count>:<id>"``.

    Score: queueing epoch; 1 for retries, 0 for a cancel marker.
    """
    return f"{_P}odcreate__task"


# -- statistics -------------------------------------------------------------------------------
def clone_stats(date: str) -> str:
    """Hash ``"<pool>:<vm>"`` -> clone seconds, per day (``YYYY-MM-DD``)."""
    return f"{_P}clone__{date}"


def boot_stats(date: str) -> str:
    """Hash ``"<pool>:<vm>"`` -> seconds from clone to ready, per day."""
    return f"{_P}boot__{date}"


def tag_stats(date: str) -> str:
    """Hash ``"<vm>:<tag>"`` -> value, per day."""
    return f"{_P}tag__{date}"


def lastboot() -> str:
    """Hash pool -> time its last VM became ready."""
    return f"{_P}lastboot"


# -- pool configuration and overrides -------------------------------------------------------
def pools() -> str:
    """Set of configured pool names (published by the manager at start)."""
    return f"{_P}pools"


def pool_hash(pool: str) -> str:
    """Hash of a pool's configuration as published by the manager."""
    return f"{_P}pool__{pool}"


def config_poolsize() -> str:
    """Hash pool -> size override."""
    return f"{_P}config__poolsize"


def config_template() -> str:
    """Hash pool -> template override."""
    return f"{_P}config__template"


def config_clone_target() -> str:
    """Hash pool -> clone target override."""
    return f"{_P}config__clone_target"


def undo_size_override() -> str:
    """Set of pools whose size override was removed."""
    return f"{_P}pool__undo_size_override"


def undo_template_override() -> str:
    """Set of pools whose template override was removed."""
    return f"{_P}pool__undo_template_override"


def poolreset() -> str:
    """Set of pools asked to drain and refill."""
    return f"{_P}poolreset"


def template_prepared() -> str:
    """Hash pool -> template last prepared."""
    return f"{_P}template__prepared"


def template_deltas() -> str:
    """Set of templates that have delta disks."""
    return f"{_P}template__deltas"


def migration() -> str:
    """Set of VMs migrating now (vSphere provider)."""
    return f"{_P}migration"


def dlq(queue: str) -> str:
    """Sorted set of dead-letter entries for ``pending``, ``ready`` or ``clone``."""
    return f"{_P}dlq__{queue}"


# -- API -> manager commands ------------------------------------------------------------------
def commands() -> str:
    """Stream of API commands for the managers' consumer group (ours; vmpooler has none)."""
    return f"{_P}commands"


class Scripts:
    """Lua sources of every compare-and-set transition, registered once by the store.

    Return codes: ``1`` applied; ``0`` the VM was not in the expected state (nothing written);
    negative values are documented per script.
    """

    # KEYS[1] counter, KEYS[2] vm hash, KEYS[3] pending set
    # ARGV[1] limit, ARGV[2] vm name, ARGV[3] clone time, ARGV[4] pool, ARGV[5] domain ('' = none)
    # Returns 1 reserved (counter incremented, hash written, VM in pending),
    #         0 no clone slot (counter >= limit), -1 name taken (hash exists).
    START_CLONE = """
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n >= tonumber(ARGV[1]) then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2], 'clone', ARGV[3], 'template', ARGV[4], 'pool', ARGV[4])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[2], 'domain', ARGV[5]) end
redis.call('SADD', KEYS[3], ARGV[2])
return 1
"""

    # KEYS[1] counter, KEYS[2] vm hash, KEYS[3] clone stats hash of the day
    # ARGV[1] "<pool>:<vm>", ARGV[2] clone seconds, ARGV[3] ip
    # Releases the clone slot (never below 0) and records the clone. Returns 1.
    CLONE_SUCCEEDED = """
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n > 0 then redis.call('DECR', KEYS[1]) else redis.call('SET', KEYS[1], 0) end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HSET', KEYS[2], 'clone_time', ARGV[2], 'ip', ARGV[3])
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
return 1
"""

    # KEYS[1] counter, KEYS[2] vm hash, KEYS[3] pending set
    # ARGV[1] vm, ARGV[2] error message, ARGV[3] error class, ARGV[4] hash ttl seconds,
    # ARGV[5] '1' to release a clone slot
    # Removes the VM from pending and lets its hash expire. Returns 1 if it was pending, else 0.
    CLONE_FAILED = """
if ARGV[5] == '1' then
  local n = tonumber(redis.call('GET', KEYS[1]) or '0')
  if n > 0 then redis.call('DECR', KEYS[1]) else redis.call('SET', KEYS[1], 0) end
end
local was = redis.call('SREM', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[2], 'clone_error', ARGV[2], 'clone_error_class', ARGV[3])
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4]))
return was
"""

    # KEYS[1] pending, KEYS[2] ready, KEYS[3] vm hash, KEYS[4] boot stats of the day,
    # KEYS[5] lastboot hash
    # ARGV[1] vm, ARGV[2] pool, ARGV[3] now (vmpooler time string), ARGV[4] boot seconds
    # Moves pending -> ready only if the VM is pending. Returns 1 moved, 0 not pending.
    MARK_READY = """
if redis.call('SMOVE', KEYS[1], KEYS[2], ARGV[1]) == 0 then return 0 end
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
    # ARGV[1] '1' to drain ready too ('0' = pending only)
    # Moves every pending (and ready) VM to completed atomically. Returns the number moved.
    DRAIN = """
local moved = 0
local sources = {KEYS[2]}
if ARGV[1] == '1' then sources = {KEYS[1], KEYS[2]} end
for _, key in ipairs(sources) do
  for _, name in ipairs(redis.call('SMEMBERS', key)) do
    redis.call('SMOVE', key, KEYS[3], name)
    moved = moved + 1
  end
end
return moved
"""

    # KEYS[1] counter
    # Releases one slot, never going below zero. Returns the new value.
    RELEASE_SLOT = """
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n > 0 then return redis.call('DECR', KEYS[1]) end
redis.call('SET', KEYS[1], 0)
return 0
"""

    # KEYS[1] token hash (any key when ARGV[3] is ''), then five keys per pool i (1-based) at
    # KEYS[2 + 5*(i-1)] ..: ready, running, completed, migrating, active
    # ARGV[1] now, ARGV[2] VM hash key prefix, ARGV[3] owner token ('' = none), ARGV[4] lifetime
    # ('' = none), ARGV[5] number of units, then per unit: n, then n pool indexes in preference
    # order. Each unit takes one ready VM of the first of its pools that has one; a ready VM
    # whose hash is gone is moved to completed and never handed out. All or nothing: if a unit
    # finds no VM, every VM taken in this call goes back to ready and nothing else is written
    # (apart from vanished VMs moved to completed and the token's ``last``).
    # Returns {-1} token unknown (nothing written), {0, u} unit u (1-based) found no VM,
    #         {1, p1, vm1, p2, vm2, ...} the pool index and VM of every unit, in unit order.
    CHECKOUT = """
if redis.replicate_commands then redis.replicate_commands() end
local now, prefix, token, lifetime = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local user = false
if token ~= '' then
  if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
  redis.call('HSET', KEYS[1], 'last', now)
  user = redis.call('HGET', KEYS[1], 'user')
end
local function key(p, k) return KEYS[1 + 5 * (p - 1) + k] end
local taken = {}
local pos = 6
for u = 1, tonumber(ARGV[5]) do
  local n = tonumber(ARGV[pos])
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
  if token ~= '' then
    redis.call('HSET', h, 'token:token', token)
    if user then redis.call('HSET', h, 'token:user', user) end
  end
  if lifetime ~= '' then redis.call('HSET', h, 'lifetime', lifetime) end
  out[#out + 1] = p
  out[#out + 1] = vm
end
return out
"""

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
    # ARGV[1] vm, ARGV[2] lifetime ('' = unchanged), ARGV[3..] tag name, value pairs
    # Writes ``lifetime`` and ``tag:<name>`` (and ``<vm>:<name>`` in the day's statistics) only
    # if the VM hash still exists. Returns 1 written, 0 the VM is gone (nothing written).
    MODIFY_VM = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'lifetime', ARGV[2]) end
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[1], 'tag:' .. ARGV[i], ARGV[i + 1])
  redis.call('HSET', KEYS[2], ARGV[1] .. ':' .. ARGV[i], ARGV[i + 1])
end
return 1
"""
