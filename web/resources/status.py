"""``GET /status``, ``/poolstat``, ``/totalrunning``, ``/summary`` and ``/summary/{route}[/{key}]``.

Shapes, key order and messages follow vmpooler 3.9.1 (reference §1.3). Each request costs
at most one Redis round trip (:class:`~vmpooler.actors.storage.status_store.StatusStore`: one
EVALSHA of a read-only script for ``/status``, ``/poolstat`` and ``/totalrunning``, one
pipeline for ``/summary``), whatever the number of pools or days; nothing is cached.
Concurrent ``/status`` and ``/poolstat`` requests of one process asking for the same
reading may share one round trip that began after each of them arrived
(:class:`~vmpooler.actors.storage.status_store.SharedReads`), and ``/status`` requests that shared
a reading share the sections built from it (each gets its own ``uptime``).

Divergences from vmpooler 3.9.1 (bugs fixed, on purpose):

* ``/status`` is never cached. vmpooler cached each ``view`` for 30 s and so showed stale
  numbers to the very clients that had just changed them; ours reads Redis on every request,
  in one round trip (one script call) for any number of pools.
* ``queue.requested`` counts the VMs asked for on demand whose clone has not started: the
  counts of the ``vmpooler__odcreate__task`` members (``name:pool:count:id``), which the
  request actors write as vmpooler's manager does. vmpooler SCARDed per-pool keys that do not
  exist (always 0).
* ``queue`` numbers are read from their own commands: vmpooler read its pipelined results in
  the wrong order with several pools (2 ready + 1 running in one pool, the other empty, gave
  ``requested: 3, ready: 0, running: 0``); ours gives ``requested: 0, ready: 2, running: 1``.
* ``status.ok`` / ``status.empty`` / ``status.message`` report empty pools whatever ``view``
  asks for; vmpooler only checked for empty pools when the ``pools`` section was included,
  so ``view=capacity`` always said "fully armed" even with empty pools.
* ``/poolstat`` ``max`` always applies the size override of ``vmpooler__config__poolsize``;
  vmpooler applied it only once some other request had synced the sizes. A size override
  that is not an integer is ignored (vmpooler's ``to_i`` made it 0 or a digit prefix).
* ``/summary`` errors are JSON ``{"ok": false, "error": "<message>"}`` with status 400;
  vmpooler sent the same message as plain text under a JSON content type.
* A well-formed but impossible date (``2024-02-30``) is a 400 with the usual
  ``Invalid date format`` message; vmpooler answered 500.
* A ``from``..``to`` range of more than 366 days is a 400
  (``Date range is too large, it may span at most 366 days.``); vmpooler read every day.
* The range-level ``boot``/``clone`` statistics of ``/summary`` carry the ``average``,
  ``min`` and ``max`` vmpooler documented but never produced: ``duration`` over every sample
  of the range (average = total / count, 1 dp), ``count`` over the per-day counts. The
  per-pool ``average`` is the true mean of the pool's samples (vmpooler averaged the daily
  minimums and maximums together).
* A pool configured with an empty alias list shows no ``alias`` key (vmpooler showed ``[]``).

Addition: ``/status?view=providers`` (alone or in a list) adds a ``providers`` section (each
provider's circuit breaker and sessions); without a ``view`` naming it the body has exactly
vmpooler's sections. In ``pools``, a pool with ``max_unhealthy`` has a ``brake`` entry, one
in the configuration-error state (a clone failed permanently) a ``config_error`` entry, and
one with ``failover: true`` a ``failover`` entry
(:func:`vmpooler.web.alias_failover.failover_section`) (ours all). When ``:quotas:`` sets a
limit, a ``users`` section (ours; :mod:`vmpooler.web.resources.status_users`) comes with the
default sections or a ``view`` naming ``users``, at the cost of one more script call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import unquote_plus

import falcon

from vmpooler.actors.config import Config, PoolConfig
from vmpooler.actors.config.overrides import effective_size
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.config_error_store import parse_config_error
from vmpooler.actors.storage.queues import Queue
from vmpooler.actors.storage.status_store import StatusReading, StatusStore
from vmpooler.web import stats
from vmpooler.web.alias_failover import failover_pools, failover_section
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError, json_body
from vmpooler.web.resources import status_users

__all__ = ["DEFAULT_SECTIONS", "MAX_SUMMARY_DAYS", "SECTIONS", "SUMMARY_KEYS", "SUMMARY_ROUTES",
           "config_error_section", "register", "status_sections", "summary_dates"]

SECTIONS = ("boot", "capacity", "clone", "pools", "providers", "queue")
"""Optional top-level sections of ``/status``; ``status`` is always present."""
DEFAULT_SECTIONS = ("boot", "capacity", "clone", "pools", "queue")
"""The sections without a ``view`` (or a bare ``view``): vmpooler 3.9.1's, exactly. Our
``providers`` section is only sent when a ``view`` names it."""

MAX_SUMMARY_DAYS = 366
"""Longest ``/summary`` range, in days (both ends included)."""
SUMMARY_ROUTES = ("boot", "clone", "tag")
"""The sections ``/summary/{route}`` serves (any other is a 404)."""
SUMMARY_KEYS = ("duration", "count")
"""The sub-keys of the ``boot`` and ``clone`` sections (``/summary/{route}/{key}``; for
``tag`` the key is a tag name)."""

_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_OK_MESSAGE = "Battle station fully armed and operational."


def _query(req: falcon.Request) -> dict[str, str | None]:
    """Query parameters as Rack sees them: ``name`` alone is None, ``name=`` is ``""``.

    The last occurrence of a name wins.
    """
    params: dict[str, str | None] = {}
    for part in req.query_string.split("&"):
        if not part:
            continue
        name, sep, value = part.partition("=")
        params[unquote_plus(name)] = unquote_plus(value) if sep else None
    return params


def _size(config: Config, pool: PoolConfig, overrides: Mapping[str, str],
          sizing: Mapping[str, str] | None = None) -> int:
    """The pool's size with its Redis override applied (:mod:`vmpooler.actors.config.overrides`),
    at most its ``max_pool_size``: the size the manager keeps. A pool sized by demand keeps
    the target its owner published (``sizing``), its ``size_min`` before that."""
    if pool.demand is not None:
        return _number(sizing.get("target")) if sizing else pool.demand.size_min
    return effective_size(pool.size, overrides.get(pool.name), config.max_pool_size(pool))


def _alias(pool: PoolConfig) -> Any:
    """The pool's alias as configured (list or string), or None when it has none."""
    aka = pool.raw.get("alias", list(pool.alias) or None)
    if aka is None or (not isinstance(aka, str) and len(aka) == 0):
        return None
    return aka if isinstance(aka, str) else list(aka)


def status_sections(view: str | None) -> frozenset[str]:
    """The optional sections a ``view`` query value asks for, as vmpooler reads it: absent or
    bare (None) → :data:`DEFAULT_SECTIONS`; else the comma-separated names of
    :data:`SECTIONS` it lists, unknown names ignored (``view=`` → none, only ``status``)."""
    if view is None:
        return frozenset(DEFAULT_SECTIONS)
    return frozenset(view.split(",")) & frozenset(SECTIONS)


class _Resource:
    """A resource reading through ``store``; ``ctx`` gives configuration and clock."""

    def __init__(self, ctx: ApiContext, store: StatusStore) -> None:
        self._ctx = ctx
        self._store = store
        self._aliases: tuple[Config, list[Any]] | None = None

    def _alias_list(self) -> list[Any]:
        """:func:`_alias` of each of ``ctx.config.pools``, in order; worked out once per
        configuration (a ``Config`` is immutable; a reload replaces it)."""
        config = self._ctx.config
        cached = self._aliases
        if cached is None or cached[0] is not config:
            cached = self._aliases = (config, [_alias(pool) for pool in config.pools])
        return cached[1]


class Status(_Resource):
    """``GET /status?view=a,b``: service overview, one Redis round trip (which concurrent
    requests may share, see :class:`~vmpooler.actors.storage.status_store.SharedReads`)."""

    def __init__(self, ctx: ApiContext, store: StatusStore) -> None:
        super().__init__(ctx, store)
        # the sections last built: (reading, config, wanted, sections, status without uptime)
        self._built: tuple[StatusReading, Config, frozenset[str], dict[str, Any],
                           dict[str, Any]] | None = None

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        view = _query(req).get("view")
        wanted = status_sections(view)
        config = self._ctx.config
        pools = config.pools
        names = [pool.name for pool in pools]
        queues = [Queue.READY]
        if wanted & {"pools", "queue"}:
            queues += [Queue.RUNNING, Queue.PENDING]
        if "queue" in wanted:
            queues.append(Queue.COMPLETED)
        today = timefmt.date_bucket(self._ctx.clock.now())
        reading = self._store.status(
            names, queues=queues, last_boot="pools" in wanted, queue_totals="queue" in wanted,
            durations=[kind for kind in ("clone", "boot") if kind in wanted], date=today,
            providers=self._providers_used() if "providers" in wanted else (),
            brakes=self._braked() if "pools" in wanted else (),
            config_errors="pools" in wanted,
            failovers=failover_pools(config) if "pools" in wanted else (),
            sizings=demand_pools(config) if "pools" in wanted else ())
        # Requests that shared one reading get the same sections: build them once.
        built = self._built
        if (built is None or built[0] is not reading or built[1] is not config
                or built[2] != wanted):
            built = self._built = (reading, config, wanted,
                                   *self._sections(pools, names, wanted, reading))
        status = dict(built[4])
        status["uptime"] = stats.round1(self._ctx.clock.now() - self._ctx.started_at)
        users = ({status_users.SECTION: status_users.users_section(req, self._ctx)}
                 if status_users.wants_users(self._ctx, view) else {})
        json_body(resp, 200, {**built[3], **users, "status": status})

    def _sections(self, pools: tuple[PoolConfig, ...], names: list[str],
                  wanted: frozenset[str], reading: StatusReading,
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The body's sections from ``reading`` but ``status``, in body order, and the
        ``status`` section without its ``uptime``. Callers must not change them: they are
        shared by the requests that shared ``reading``."""
        sizes = {pool.name: _size(self._ctx.config, pool, reading.size_overrides,
                                  reading.sizings.get(pool.name))
                 for pool in pools}
        ready = reading.counts[Queue.READY]
        result: dict[str, Any] = {}
        if "boot" in wanted:
            result["boot"] = stats.duration_metrics(reading.durations["boot"])
        if "capacity" in wanted:
            result["capacity"] = stats.capacity(sum(ready.values()), sum(sizes.values()))
        if "clone" in wanted:
            result["clone"] = stats.duration_metrics(reading.durations["clone"])
        if "pools" in wanted:
            result["pools"] = self._pools(pools, sizes, reading, self._alias_list(),
                                          frozenset(self._braked()),
                                          frozenset(failover_pools(self._ctx.config)))
        if "providers" in wanted:
            result["providers"] = {name: provider_section(reading.providers.get(name))
                                   for name in self._providers_used()}
        if "queue" in wanted:
            result["queue"] = _queue(reading)
        return result, self._status(names, sizes, ready)

    @staticmethod
    def _pools(pools: tuple[PoolConfig, ...], sizes: dict[str, int],
               reading: StatusReading, aliases: list[Any],
               braked: frozenset[str] = frozenset(),
               failovers: frozenset[str] = frozenset()) -> dict[str, Any]:
        """The ``pools`` section; ``aliases[i]`` is :func:`_alias` of ``pools[i]``; a pool of
        ``braked`` has a mass-failure brake and gets its ``brake`` entry, one of
        ``failovers`` has ``failover: true`` and gets its ``failover`` entry (both ours)."""
        body: dict[str, Any] = {}
        ready, running = reading.counts[Queue.READY], reading.counts[Queue.RUNNING]
        pending, last_boot = reading.counts[Queue.PENDING], reading.last_boot
        for pool, aka in zip(pools, aliases, strict=True):
            name = pool.name
            entry: dict[str, Any] = {
                "ready": ready[name],
                "running": running[name],
                "pending": pending[name],
                "max": sizes[name],
                "lastBoot": last_boot[name],
            }
            if aka is not None:
                entry["alias"] = aka
            if name in braked:
                entry["brake"] = brake_section(reading.brakes.get(name))
            error = parse_config_error(reading.config_errors.get(name))
            if error is not None:
                entry["config_error"] = config_error_section(error)
            if name in failovers:
                entry["failover"] = failover_section(name, sizes[name],
                                                     reading.failovers.get(name))
            if pool.demand is not None:
                entry["sizing"] = sizing_section(pool, reading.sizings.get(name))
            body[name] = entry
        return body

    def _braked(self) -> list[str]:
        """The pools whose mass-failure brake is on (``max_unhealthy`` below 100%)."""
        config = self._ctx.config
        return [pool.name for pool in config.pools
                if pool.brake(config.settings)[0] is not None]

    def _providers_used(self) -> list[str]:
        return sorted({pool.provider for pool in self._ctx.config.pools})

    def _status(self, names: list[str], sizes: dict[str, int],
                ready: Mapping[str, int]) -> dict[str, Any]:
        """The ``status`` section but its ``uptime``."""
        status: dict[str, Any] = {"ok": True, "message": _OK_MESSAGE}
        empty = [name for name in names if ready[name] == 0 and sizes[name] != 0]
        if empty:
            status.update(ok=False, message=f"Found {len(empty)} empty pools.", empty=empty)
        return status


def demand_pools(config: Config) -> list[str]:
    """The pools sized by demand (``sizing: demand``)."""
    return [pool.name for pool in config.pools if pool.demand is not None]


def sizing_section(pool: PoolConfig, published: Mapping[str, str] | None) -> dict[str, Any]:
    """A demand-sized pool's ``sizing`` entry (ours): the target its owner published and
    why (``reason``: forecast, schedule, floor, minimum or ceiling), the forecast, the floor
    and ceiling in force, ``held`` (True while a shrink waits out its hold time, the target
    being above what ``reason`` wants), the clone time it plans with, the share of the last day's
    checkouts served warm (None before any) and when it was computed; before the owner
    published anything, the configured bounds with ``target`` None."""
    demand = pool.demand
    assert demand is not None
    section: dict[str, Any] = {"policy": "demand", "size_min": demand.size_min,
                               "size_max": demand.size_max,
                               "target_warm_hit": demand.target_warm_hit}
    if not published:
        return {**section, "target": None, "reason": None}
    warm = published.get("warm_hit") or ""
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


def _queue(reading: StatusReading) -> dict[str, int]:
    """The ``queue`` section from per-pool counts, clone counters and on-demand queues."""
    requested = stats.ondemand_requested(reading.ondemand_tasks)
    return stats.queue(
        {queue.value: sum(counts.values()) for queue, counts in reading.counts.items()},
        reading.clones_in_flight + reading.ondemand_clones_in_flight, requested)


class PoolStat(_Resource):
    """``GET /poolstat?pool=a,b``: ``max``, ``alias`` and ``ready`` of pools named or aliased."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        asked = set((_query(req).get("pool") or "").split(","))
        chosen = [pool for pool in self._ctx.config.pools
                  if pool.name in asked or asked.intersection(pool.alias)]
        demand = [pool.name for pool in chosen if pool.demand is not None]
        reading = self._store.status([pool.name for pool in chosen], queues=(Queue.READY,),
                                     sizings=demand)
        ready, overrides = reading.counts[Queue.READY], reading.size_overrides
        body: dict[str, Any] = {}
        for pool in chosen:
            entry: dict[str, Any] = {"max": _size(self._ctx.config, pool, overrides,
                                                  reading.sizings.get(pool.name))}
            aka = _alias(pool)
            if aka is not None:
                entry["alias"] = aka
            entry["ready"] = ready[pool.name]
            body[pool.name] = entry
        json_body(resp, 200, {"pools": body})


class TotalRunning(_Resource):
    """``GET /totalrunning``: ``{"running": n}`` over every configured pool."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        running = self._store.total_running(list(self._ctx.config.pool_names))
        json_body(resp, 200, {"running": running})


def _bad_request(message: str) -> ApiError:
    return ApiError(400, {"ok": False, "error": message})


def _parse_date(text: str) -> date:
    invalid = _bad_request(f"Invalid date format '{text}', must match YYYY-MM-DD.")
    if not _DATE_RE.fullmatch(text):
        raise invalid
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise invalid from None


def summary_dates(req: falcon.Request, today: str) -> list[str]:
    """The ``from``..``to`` dates (``YYYY-MM-DD``, both included) asked for; default today.

    Raises :class:`ApiError` 400 with vmpooler's messages, checked in vmpooler's order, then
    for a range longer than :data:`MAX_SUMMARY_DAYS`.
    """
    query = _query(req)
    raw_from, raw_to = query.get("from"), query.get("to")
    first = _parse_date(today if raw_from is None else raw_from)
    last = _parse_date(today if raw_to is None else raw_to)
    if last < first:
        raise _bad_request("Date range is invalid, 'to' cannot come before 'from'.")
    if first > date.fromisoformat(today):
        raise _bad_request("Date range is invalid, 'from' must be in the past.")
    span = (last - first).days + 1
    if span > MAX_SUMMARY_DAYS:
        raise _bad_request(
            f"Date range is too large, it may span at most {MAX_SUMMARY_DAYS} days.")
    return [(first + timedelta(days=n)).isoformat() for n in range(span)]


class Summary(_Resource):
    """``GET /summary?from=&to=``: daily and range-level boot, clone and tag statistics."""

    def _dates(self, req: falcon.Request) -> list[str]:
        return summary_dates(req, timefmt.date_bucket(self._ctx.clock.now()))

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        dates = self._dates(req)
        raw = self._store.daily(("boot", "clone", "tag"), dates)
        boot = stats.task_summary("boot", list(zip(dates, raw["boot"], strict=True)))
        clone = stats.task_summary("clone", list(zip(dates, raw["clone"], strict=True)))
        tag = stats.tag_summary(list(zip(dates, raw["tag"], strict=True)))
        daily = [
            {"date": day, "boot": b["boot"], "clone": c["clone"], "tag": t["tag"]}
            for day, b, c, t in zip(dates, boot["daily"], clone["daily"], tag["daily"],
                                    strict=True)
        ]
        json_body(resp, 200, {"daily": daily, "boot": boot["boot"], "clone": clone["clone"],
                              "tag": tag["tag"]})


class SummaryRoute(Summary):
    """``GET /summary/{boot|clone|tag}[/{key}]``: one section, optionally one sub-key."""

    def on_get(self, req: falcon.Request, resp: falcon.Response,  # type: ignore[override]
               route: str, key: str | None = None) -> None:
        dates = self._dates(req)
        if route not in SUMMARY_ROUTES:
            raise ApiError(404)
        days = list(zip(dates, self._store.daily((route,), dates)[route], strict=True))
        if route == "tag":
            body = stats.tag_summary(days, only=key)
        else:
            body = stats.task_summary(route, days, only=key)
        json_body(resp, 200, body)


def register(app: falcon.App, ctx: ApiContext, prefix: str) -> None:
    """Add the status and summary routes under ``prefix``."""
    store = StatusStore(ctx.redis)
    app.add_route(f"{prefix}/status", Status(ctx, store))
    app.add_route(f"{prefix}/poolstat", PoolStat(ctx, store))
    app.add_route(f"{prefix}/totalrunning", TotalRunning(ctx, store))
    app.add_route(f"{prefix}/summary", Summary(ctx, store))
    route = SummaryRoute(ctx, store)
    app.add_route(f"{prefix}/summary/{{route}}", route)
    app.add_route(f"{prefix}/summary/{{route}}/{{key}}", route)
