"""Refuse to start beside a running Ruby vmpooler manager.

Our managers share a Redis with each other (leases, fencing, heartbeats) and with vmpooler's
API. A vmpooler (Ruby) *manager* on the same Redis would destroy our clones as strays (VMs
of its pools' folders in none of its queues) and zero the shared clone counters when it
starts. It writes no heartbeat; what it does write, continually, is ``check`` on every ready
VM of its pools, each ``vm_checktime`` minutes (reference §4.4). Ours write ``check`` too,
but always with ``check_by`` naming the value (:mod:`vmpooler.actors.storage.check_stamps`).

So, before a manager writes anything, :func:`refuse_beside_foreign_manager` reads the
ready VMs of every configured pool and every pool published in ``vmpooler__pools`` and
raises :class:`ForeignManagerError` if one of them carries a ``check`` that none of our
managers wrote and that is younger than :func:`foreign_window`. One read, no re-check: a
running Ruby manager keeps each ready VM it has checked stamped within ``vm_checktime``
plus one check-loop delay, so one read sees it; waiting a few seconds more could not tell a
Ruby manager stopped a minute ago from one still running (each VM is stamped once a
``vm_checktime``).

Limits (docs/architecture.md §13): a Ruby manager whose pools have no ready VM checked yet
(just started, or every clone failing) is not seen; neither is one started after ours; a
Ruby manager with a ``vm_checktime`` longer than ours may be missed between its stamps; our
own managers older than ``check_by`` look foreign; hosts' clocks must agree to well within
the window.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis

from vmpooler.actors.config import Config
from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.check_stamps import CheckStamp, read_ready_stamps
from vmpooler.actors.storage.replies import text_set

__all__ = ["ForeignManagerError", "ForeignStamp", "foreign_window",
           "refuse_beside_foreign_manager", "youngest_foreign"]

log = logging.getLogger(__name__)

RUBY_LOOP_DELAY_MAX = 60.0
"""vmpooler's pool threads wait up to this many seconds between checks unless the pool sets
``check_loop_delay_max`` (they ignore the global value, reference §4.1)."""


@dataclass(frozen=True, slots=True)
class ForeignStamp:
    """The youngest recent ``check`` stamp none of our managers wrote."""

    pool: str
    vm: str
    check: str
    age: float
    """Seconds between the stamp and now (negative: the writer's clock is ahead)."""


class ForeignManagerError(RuntimeError):
    """Another (vmpooler's Ruby) manager is checking ready VMs on this Redis.

    ``str()`` is one line naming the pool, the VM, the stamp's age and what to do; ``stamp``
    and ``window`` (seconds) say the same as data."""

    def __init__(self, stamp: ForeignStamp, window: float) -> None:
        self.stamp = stamp
        self.window = window
        age = max(0.0, stamp.age)
        wait = max(1, round(window - age))
        super().__init__(
            f"a Ruby vmpooler manager appears to be running on this Redis: ready VM "
            f"'{stamp.vm}' of pool '{stamp.pool}' was checked {age:.0f}s ago "
            f"(check '{stamp.check}') by a manager that is not one of ours; this manager "
            f"will not run beside it (it would destroy our VMs as strays and zero the shared "
            f"clone counters). Stop the Ruby manager, or wait until its check stamps are "
            f"older than {window:.0f}s (about {wait}s more)")


def foreign_window(config: Config) -> float:
    """Seconds within which a foreign ``check`` stamp counts as a running manager's: twice
    ``vm_checktime`` plus the longest check-loop delay (vmpooler's 60 s default, the global
    or any pool's ``check_loop_delay_max``, whichever is longest)."""
    settings = config.settings
    delays = [RUBY_LOOP_DELAY_MAX, settings.check_loop_delay_max]
    delays += [pool.loop_delays(settings)[1] for pool in config.pools]
    return 2 * settings.vm_checktime * 60.0 + max(delays)


def youngest_foreign(stamps: list[CheckStamp], now: float, window: float) -> ForeignStamp | None:
    """The foreign stamp of ``stamps`` nearest ``now``, among those less than ``window``
    seconds from it (either side); None when there is none. Unreadable stamps are ignored."""
    found: ForeignStamp | None = None
    for stamp in stamps:
        if stamp.check is None or stamp.ours:
            continue
        at = timefmt.parse_epoch(stamp.check)
        if at is None or abs(now - at) >= window:
            continue
        if found is None or abs(now - at) < abs(found.age):
            found = ForeignStamp(stamp.pool, stamp.vm, stamp.check, now - at)
    return found


def refuse_beside_foreign_manager(client: redis.Redis, config: Config, now: float) -> int:
    """Raise :class:`ForeignManagerError` when a ready VM of a configured or published pool
    carries a recent ``check`` none of our managers wrote; else return how many ready VMs
    were looked at. Reads only (three pipelined round trips); ``now`` is epoch seconds (the
    manager's clock). Raises ``redis.RedisError`` when Redis cannot be read."""
    pools = [pool.name for pool in config.pools]
    pools += sorted(text_set(client.smembers(schema.pools())) - set(pools))
    stamps = read_ready_stamps(client, pools)
    window = foreign_window(config)
    foreign = youngest_foreign(stamps, now, window)
    if foreign is not None:
        raise ForeignManagerError(foreign, window)
    log.debug("[*] [manager] no foreign check stamp on %d ready VM(s) of %d pool(s)",
              len(stamps), len(pools))
    return len(stamps)
