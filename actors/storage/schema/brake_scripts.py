"""Lua scripts of the mass-failure brake: holding a failing ready VM, and letting it go.

Part of :mod:`vmpooler.actors.storage.schema`: import ``BrakeScripts`` from there. Each move
is one ``SMOVE`` that applies only if the VM is still in the source set, so a VM is never in
two queues and a VM checked out meanwhile is left alone.
"""

from __future__ import annotations

__all__ = ["BrakeScripts"]


class BrakeScripts:
    """Lua sources of the brake's transitions, registered once by the brake store."""

    # KEYS[1] ready, KEYS[2] held, KEYS[3] vm hash
    # ARGV[1] vm, ARGV[2] now (vmpooler time string)
    # ready -> held, stamping ``held`` in the VM's hash. Returns 1 moved, 0 not ready.
    HOLD = """
if redis.call('SMOVE', KEYS[1], KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[3], 'held', ARGV[2])
return 1
"""

    # KEYS[1] held, KEYS[2] destination (ready or completed), KEYS[3] vm hash
    # ARGV[1] vm
    # held -> ready (it passed its check) or -> completed (it failed it, or the pool
    # drained): the ``held`` stamp is removed. Returns 1 moved, 0 not held.
    UNHOLD = """
if redis.call('SMOVE', KEYS[1], KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[3], 'held')
return 1
"""
