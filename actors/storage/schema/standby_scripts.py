"""Lua scripts of a pool's standby tier: a checked VM entering it, its state moves, and a
resumed VM found ready leaving it for ``ready``.

Part of :mod:`vmpooler.actors.storage.schema`: import ``StandbyScripts`` from there. Each
move is one ``SMOVE`` that applies only if the VM is still in the source set, so a VM is in
one set at a time; the VM's hash field ``standby`` says where it stands in the tier
(``suspending``, ``suspended``, ``resuming``, ``checking``). A VM leaving the tier for
``completed`` goes through the pool store's ``RETIRE``.
"""

from __future__ import annotations

__all__ = ["StandbyScripts"]


class StandbyScripts:
    """Lua sources of the standby tier's transitions, registered once by its store."""

    # KEYS[1] pending, KEYS[2] standby, KEYS[3] vm hash, KEYS[4] boot stats of the day,
    # KEYS[5] lastboot hash
    # ARGV[1] vm, ARGV[2] pool, ARGV[3] now (vmpooler time string), ARGV[4] boot seconds
    # pending -> standby (state ``suspending``) for a pooled VM that passed its readiness
    # check, with the boot statistics ``MARK_READY`` records. Returns 1 moved, 0 not
    # pending, -1 a request's VM (nothing written).
    ENTER = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('HEXISTS', KEYS[3], 'request_id') == 1 then return -1 end
redis.call('SMOVE', KEYS[1], KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], 'standby', 'suspending', 'standby_since', ARGV[3])
redis.call('HSET', KEYS[4], ARGV[2] .. ':' .. ARGV[1], ARGV[4])
redis.call('HSET', KEYS[5], ARGV[2], ARGV[3])
return 1
"""

    # KEYS[1] standby, KEYS[2] ready, KEYS[3] vm hash
    # ARGV[1] vm, ARGV[2] now (vmpooler time string)
    # ready -> standby (state ``suspending``): a ready VM the pool has too many of, kept
    # instead of destroyed. Returns 1 moved, 0 not ready (checked out meanwhile).
    PARK = """
if redis.call('SMOVE', KEYS[2], KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[3], 'standby', 'suspending', 'standby_since', ARGV[2])
redis.call('HDEL', KEYS[3], 'ready')
return 1
"""

    # KEYS[1] standby, KEYS[2] vm hash
    # ARGV[1] vm, ARGV[2] state, ARGV[3] stamp field ('' = none), ARGV[4] its value
    # Records the VM's state in the tier, if it is still in it. Returns 1 set, 0 not there.
    SET_STATE = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], 'standby', ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[2], ARGV[3], ARGV[4]) end
return 1
"""

    # KEYS[1] standby, KEYS[2] ready, KEYS[3] vm hash
    # ARGV[1] vm, ARGV[2] now (vmpooler time string)
    # standby -> ready: a resumed VM passed its readiness check. Its tier fields go; ``ready``
    # is stamped as for a VM that came from pending. Returns 1 moved, 0 not in standby.
    WAKE = """
if redis.call('SMOVE', KEYS[1], KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[3], 'standby', 'standby_since', 'suspended', 'resumed')
redis.call('HSET', KEYS[3], 'ready', ARGV[2])
return 1
"""

    # KEYS[1] standby, KEYS[2] pending, KEYS[3] vm hash, KEYS[4] (optional) the request's
    # lease
    # ARGV[1] vm, ARGV[2] now (vmpooler time string), ARGV[3] request id, ARGV[4] alias,
    # ARGV[5] (with KEYS[4]) the request's lease value the grant was made under
    # standby -> pending for an on-demand request, as a clone of the request's would enter
    # it: ``clone`` is now (its pending timeout counts from here), the request recorded, the
    # tier's fields gone. Only a suspended VM is taken. Returns 1 taken, 0 not suspended in
    # the tier, -2 the request moved to another lease holder (nothing written).
    TAKE_FOR_REQUEST = """
if KEYS[4] and redis.call('GET', KEYS[4]) ~= ARGV[5] then return -2 end
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[3], 'standby') ~= 'suspended' then return 0 end
redis.call('SMOVE', KEYS[1], KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], 'standby', 'standby_since', 'suspended', 'resumed')
redis.call('HSET', KEYS[3], 'clone', ARGV[2], 'request_id', ARGV[3], 'pool_alias', ARGV[4])
return 1
"""
