"""Key names of statistics and recorded history: daily clone, boot and tag hashes, each
pool's history, demand logs, sizing targets and wait times, with the demand logs' bounds.

Part of :mod:`vmpooler.actors.storage.schema`: import the names from there."""

from __future__ import annotations

from vmpooler.actors.storage.schema.prefix import PREFIX as _P

__all__ = [
    "DEMAND_MAX",
    "DEMAND_MISSES_MAX",
    "DEMAND_MISS_BUDGET",
    "DEMAND_MISS_WINDOW",
    "DEMAND_RETENTION",
    "boot_stats",
    "clone_stats",
    "demand",
    "demand_guard",
    "demand_misses",
    "history",
    "history_checkouts",
    "history_clones",
    "history_misses",
    "lastboot",
    "sizing",
    "tag_stats",
    "wait_times",
]



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


def history(pool: str) -> str:
    """Sorted set of one pool's recorded history (ours): one member per point,
    ``"<t>:<ready>:<running>:<pending>:<checkouts>:<clones>"`` scored by ``t``, the epoch start
    of the point's interval; the last two are the cumulative counters read at that time
    (:mod:`vmpooler.actors.storage.history_store`). Trimmed to 24 h and a fixed number of points."""
    return f"{_P}history__pool__{pool}"


def history_checkouts() -> str:
    """Hash pool -> checkouts ever served from it (ours; ``HINCRBY`` in the checkout script)."""
    return f"{_P}history__checkouts"


def history_misses() -> str:
    """Hash pool -> checkouts that found no ready VM (ours; ``HINCRBY`` in the checkout script
    for each miss it logs in :func:`demand_misses`: one per pool a refused request asked for
    first, bounded per requester)."""
    return f"{_P}history__misses"


def history_clones() -> str:
    """Hash pool -> clones ever finished for it (ours; ``HINCRBY`` when a clone succeeds)."""
    return f"{_P}history__clones"


def demand(pool: str) -> str:
    """Sorted set of one pool's served checkouts (ours): every checkout the API served from
    the pool (and every ready VM an on-demand request took), member ``"<epoch>:<vm>"``, scored
    by its epoch. Written by the checkout script, which keeps at most :data:`DEMAND_MAX`
    members and drops those older than :data:`DEMAND_RETENTION` seconds every 64 entries.
    Checkouts that found no VM go to :func:`demand_misses`, so they never push served ones
    out (a log written before that split may still hold misses, ``"<epoch>:-<n>"``, read as
    such). With :func:`demand_misses`, what demand sizing learns from and ``vmpooler history
    export`` writes."""
    return f"{_P}demand__{pool}"


def demand_misses(pool: str) -> str:
    """Sorted set of one pool's checkouts that found no ready VM (ours): member
    ``"<epoch>:-<n>"`` (n: the pool's misses so far, :func:`history_misses`), scored by its
    epoch. The checkout script logs at most one per pool a request names first, and at most
    :data:`DEMAND_MISS_BUDGET` per requester and pool in each :data:`DEMAND_MISS_WINDOW`
    (:func:`demand_guard`); it keeps at most :data:`DEMAND_MISSES_MAX` members and the same
    :data:`DEMAND_RETENTION` as :func:`demand`."""
    return f"{_P}demand_misses__{pool}"


def demand_guard(pool: str) -> str:
    """Hash requester -> misses it asked to log in the pool's current window (ours): the
    requester is ``u:<token user>`` or ``a:<client address>``. Expires
    :data:`DEMAND_MISS_WINDOW` seconds after it was created (a fixed window)."""
    return f"{_P}demand_guard__{pool}"


DEMAND_RETENTION = 28 * 24 * 3600
"""Seconds of checkouts :func:`demand` keeps (four weeks: weekly cycles need a few)."""

DEMAND_MAX = 50_000
"""Members :func:`demand` keeps at most per pool (about 3 MB), the oldest dropped first."""

DEMAND_MISSES_MAX = 10_000
"""Members :func:`demand_misses` keeps at most per pool, the oldest dropped first."""

DEMAND_MISS_BUDGET = 2
"""Misses one requester may add to a pool's :func:`demand_misses` per window."""

DEMAND_MISS_WINDOW = 60
"""Seconds of one window of :data:`DEMAND_MISS_BUDGET` (:func:`demand_guard`'s expiry)."""


def sizing(pool: str) -> str:
    """Hash of a demand-sized pool's current target and why (ours): ``target``, ``reason``,
    ``forecast``, ``floor``, ``ceiling``, ``clone_time`` (seconds), ``warm_hit`` (the share
    of the last day's checkouts served warm), ``updated`` (epoch); written by the pool's
    owner, read by ``/status``."""
    return f"{_P}sizing__{pool}"


def wait_times() -> str:
    """Hash pool -> ``"<clone> <ready>"`` (ours): the median of the pool's last clone times
    and of the times from a clone's start to its VM ready, in seconds, written by the pool's
    owner when they change; what the on-demand manager's estimates are made of. Expires
    when no manager writes it for a day."""
    return f"{_P}waits__pools"
