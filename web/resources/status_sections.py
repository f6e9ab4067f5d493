"""The sections and entries of ``GET /status`` built from a reading, as pure functions
(:mod:`vmpooler.web.resources.status`): vmpooler 3.9.1's shapes and ours (``brake``,
``config_error``, ``failover``, ``sizing``, ``standby`` entries of a pool, the ``providers``
section).

What callers may rely on: nothing here reads Redis or the clock; a published value that is
missing or unreadable gives the entry's documented default, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from vmpooler.actors.config import Config, PoolConfig
from vmpooler.actors.config.overrides import effective_size
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.status_store import StatusReading
from vmpooler.web import stats

__all__ = ["alias_of", "brake_section", "config_error_section", "configured_size",
           "demand_pools", "pool_size", "provider_section", "queue_section", "sizing_section",
           "standby_pools", "standby_section"]


def pool_size(pool: PoolConfig, cap: int, override: str | None,
              sizing: Mapping[str, str] | None = None) -> int:
    """The pool's size with its Redis ``override`` applied
    (:mod:`vmpooler.actors.config.overrides`), at most ``cap`` (its ``max_pool_size``,
    :meth:`Config.max_pool_size <vmpooler.actors.config.Config.max_pool_size>`): the size the
    manager keeps. A pool sized by demand keeps the target its owner published
    (``sizing``), its ``size_min`` before that."""
    if pool.demand is not None:
        return _number(sizing.get("target")) if sizing else pool.demand.size_min
    return effective_size(pool.size, override, cap)


def configured_size(config: Config, pool: PoolConfig, overrides: Mapping[str, str],
                    sizing: Mapping[str, str] | None = None) -> int:
    """:func:`pool_size` with the cap and the override looked up in ``config`` and
    ``overrides`` (pool -> raw override)."""
    return pool_size(pool, config.max_pool_size(pool), overrides.get(pool.name), sizing)


def alias_of(pool: PoolConfig) -> Any:
    """The pool's alias as configured (list or string), or None when it has none."""
    aka = pool.raw.get("alias", list(pool.alias) or None)
    if aka is None or (not isinstance(aka, str) and len(aka) == 0):
        return None
    return aka if isinstance(aka, str) else list(aka)


def demand_pools(config: Config) -> list[str]:
    """The pools sized by demand (``sizing: demand``)."""
    return [pool.name for pool in config.pools if pool.demand is not None]


def standby_pools(config: Config) -> list[str]:
    """The pools with a standby tier (``standby`` not 0), in configuration order."""
    return [pool.name for pool in config.pools if pool.standby is not None]


def standby_section(pool: PoolConfig, count: int) -> dict[str, Any]:
    """A pool's ``standby`` entry (ours; only for a pool with a standby tier): ``count``,
    the VMs in its standby set now (suspended, or on their way in or out); ``target``, the
    configured count (None for ``standby: auto``); ``state``, ``suspended`` or
    ``powered_off``, as configured."""
    tier = pool.standby
    assert tier is not None
    return {"count": count, "target": tier.count, "state": tier.state}


def sizing_section(pool: PoolConfig, published: Mapping[str, str] | None) -> dict[str, Any]:
    """A demand-sized pool's ``sizing`` entry (ours): the target its owner published and
    why (``reason``: forecast, schedule, floor, minimum or ceiling), the forecast, the floor
    and ceiling in force, ``held`` (True while a shrink waits out its hold time, the target
    being above what ``reason`` wants), the clone time it plans with, the share of the last day's
    checkouts served warm (None before any) and when it was computed; with ``standby:
    auto``, the standby VMs it keeps (``standby``) and the resume time it plans with; before
    the owner published anything, the configured bounds with ``target`` None."""
    demand = pool.demand
    assert demand is not None
    section: dict[str, Any] = {"policy": "demand", "size_min": demand.size_min,
                               "size_max": demand.size_max,
                               "target_warm_hit": demand.target_warm_hit}
    if not published:
        return {**section, "target": None, "reason": None}
    warm = published.get("warm_hit") or ""
    if "standby" in published:  # standby: auto, the sizer's second target and its input
        section["standby"] = _number(published.get("standby"))
        section["resume_time"] = _float(published.get("resume_time"))
    return {**section,
            "target": _number(published.get("target")),
            "reason": published.get("reason") or None,
            "forecast": _number(published.get("forecast")),
            "floor": _number(published.get("floor")),
            "ceiling": _number(published.get("ceiling")),
            "held": published.get("held") == "1",
            "clone_time": _float(published.get("clone_time")),
            "warm_hit": _float(warm) if warm else None,
            "updated": _float(published.get("updated"))}


def _float(text: str | None) -> float:
    try:
        return float(text or 0.0)
    except ValueError:
        return 0.0


def brake_section(published: Mapping[str, str] | None) -> dict[str, Any]:
    """One pool's ``brake`` entry of ``/status`` (ours): whether its mass-failure brake is
    engaged, how many VMs failed a check within its window and how many it holds, as its
    pool actor last published them (all zero before the first publication)."""
    published = published or {}
    return {"engaged": published.get("engaged") == "1",
            "failures": _number(published.get("failures")),
            "held": _number(published.get("held"))}


def config_error_section(published: Mapping[str, str]) -> dict[str, Any]:
    """One pool's ``config_error`` entry of ``/status`` (ours), from what its pool actor
    publishes while the pool is in the configuration-error state: the permanent failure's
    class and message, and since when (vmpooler time string)."""
    return {"error_class": published.get("error_class", ""),
            "message": published.get("message", ""),
            "since": published.get("since", "")}


def provider_section(published: Mapping[str, str] | None) -> dict[str, Any]:
    """One provider's entry of ``/status`` ``providers`` (ours): its circuit breaker's state
    (``closed``, ``open``, ``half_open``, ``disabled``, or ``unknown`` when no manager has
    published it lately), since when (ISO 8601), its consecutive failures, seconds until an
    open breaker lets a trial call through, the last error counted, and its connection pool
    (``size``, ``in_use``, ``waiting``) when the provider keeps one."""
    if not published:
        return {"circuit_breaker": "unknown"}
    since = _number(published.get("since"))
    entry: dict[str, Any] = {
        "circuit_breaker": published.get("circuit_breaker", "unknown"),
        "since": timefmt.rfc3339(datetime.fromtimestamp(since, UTC)) if since else "",
        "failures": _number(published.get("failures")),
        "retry_after": _number(published.get("retry_after")),
        "last_error": published.get("last_error") or None,
    }
    if "connections_size" in published:
        entry["connections"] = {
            "size": _number(published.get("connections_size")),
            "in_use": _number(published.get("connections_in_use")),
            "waiting": _number(published.get("connections_waiting")),
        }
    return entry


def _number(text: str | None) -> int:
    try:
        return int(float(text or 0))
    except ValueError:
        return 0


def queue_section(reading: StatusReading) -> dict[str, int]:
    """The ``queue`` section from per-pool counts, clone counters and on-demand queues."""
    requested = stats.ondemand_requested(reading.ondemand_tasks)
    return stats.queue(
        {queue.value: sum(counts.values()) for queue, counts in reading.counts.items()},
        reading.clones_in_flight + reading.ondemand_clones_in_flight, requested)

