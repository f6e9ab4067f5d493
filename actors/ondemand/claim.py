"""The checks and reads that follow a request actor's claim of its request (reference §2.4):
whether the request can be met here at all, and what a predecessor left of it.

The claim itself is ``RequestStore.claim`` (the ``CLAIM`` script); the hand-over of ready
VMs to a request claimed for the first time is :mod:`.from_ready`. Used by the request's
actor only, inside its mailbox.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from vmpooler.actors.ondemand.impossible import over_ceiling
from vmpooler.actors.ondemand.ledger import Ledger
from vmpooler.actors.storage.request_store import Entry, RequestStore

__all__ = ["recover", "refusal"]


def refusal(entries: Sequence[Entry], pools: Collection[str],
            ceilings: Mapping[str, int]) -> str | None:
    """Why a request asking ``entries`` can never be met by a manager configuring ``pools``
    (``ceilings``: pool -> ``max_pool_size``): an entry above its pool's ceiling
    (:func:`.impossible.over_ceiling`, named first), else a pool not configured
    (``Configuration error``); None when it can. Pure."""
    unknown = sorted({e.pool for e in entries} - set(pools))
    impossible = over_ceiling(entries, ceilings)
    if unknown or impossible:
        return impossible or (f"Configuration error: pool '{', '.join(unknown)}' is not "
                              "configured")
    return None


def recover(store: RequestStore, request_id: str, vms: Ledger) -> None:
    """Read into ``vms`` what a predecessor (an actor before a restart) left: the VMs
    delivered to each entry, and its pending VMs whose entry the request still asks for.
    Two round trips (``delivered``, then ``IN_FLIGHT``); raises what the store raises
    (``redis.RedisError``), ``vms`` then partly filled."""
    vms.delivered.update(store.delivered(request_id, list(vms.entries.values())))
    pools = [e.pool for e in vms.entries.values()]
    for vm, key in store.in_flight(request_id, pools).items():
        if key in vms.entries:
            vms.in_flight[vm] = key
