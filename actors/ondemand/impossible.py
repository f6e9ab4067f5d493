"""Requests that can never be met, failed at once with their reason instead of waiting for
their TTL (docs/fairness.md, "Honest waits"). Pure functions; the request's actor decides
with them and fails the request through its ``FAIL`` script.

* **Above the ceiling.** A request asking more VMs of one pool than the pool's
  ``max_pool_size`` (its provider's, else the global one) could ever hold.
  ``ondemand_clone_limit`` is no ceiling: it bounds clones at a time, not VMs.
* **A provider away past the deadline.** A pool's clone is refused because its provider's
  circuit breaker is open until after the request's deadline (its TTL from its creation).
  Each VM of a request has its pool, and the request needs every one: one such pool is
  enough. A breaker that closes before the deadline keeps the request waiting.
* Pools no manager configures already fail at the claim (``Configuration error``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from vmpooler.actors.messages import RequestPoolBlocked
from vmpooler.actors.storage.request_store import Entry
from vmpooler.actors.storage.timefmt import rfc3339

__all__ = ["blocked_past_deadline", "over_ceiling"]


def _at(epoch: float) -> str:
    return rfc3339(datetime.fromtimestamp(round(epoch), UTC))


def over_ceiling(entries: Iterable[Entry], ceilings: Mapping[str, int]) -> str | None:
    """Why the request asks more VMs of a pool than the pool's ceiling (``ceilings``: pool
    -> ``max_pool_size``; a pool not in it has none); None when it does not."""
    wanted: dict[str, int] = {}
    for entry in entries:
        wanted[entry.pool] = wanted.get(entry.pool, 0) + entry.count
    for pool, count in sorted(wanted.items()):
        ceiling = ceilings.get(pool)
        if ceiling is not None and count > ceiling:
            return (f"Impossible request: {count} VMs of pool '{pool}' asked for, more than "
                    f"it can ever hold (max_pool_size {ceiling})")
    return None


def blocked_past_deadline(message: RequestPoolBlocked, deadline: float) -> str | None:
    """Why the request cannot be met by ``deadline`` (epoch) when no clone of
    ``message.pool`` starts before ``message.until``; None when one may still start in
    time."""
    if message.until < deadline:
        return None
    return (f"Impossible request: pool '{message.pool}' cannot clone before "
            f"{_at(message.until)}, after the request's deadline {_at(deadline)}: "
            f"{message.reason}")
