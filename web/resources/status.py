"""``GET /status``, ``/poolstat`` and ``/totalrunning``; registers ``/summary`` too
(:mod:`vmpooler.web.resources.summary`).

Shapes, key order and messages follow vmpooler 3.9.1 (reference §1.3). Each request costs
at most one Redis round trip (:class:`~vmpooler.actors.storage.status_store.StatusStore`: one
EVALSHA of a read-only script, encoded once per distinct request), whatever the number of
pools; nothing is cached. What a set of sections reads is worked out once per configuration
(:mod:`vmpooler.web.resources.status_plan`), the sections are built by
:mod:`vmpooler.web.resources.status_sections`. Concurrent ``/status`` and ``/poolstat``
requests of one process asking for the same reading may share one round trip that began
after each of them arrived (:class:`~vmpooler.actors.storage.status_store.SharedReads`), and
``/status`` requests that shared a reading share the sections built from it (each gets its
own ``uptime``).

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
* A pool configured with an empty alias list shows no ``alias`` key (vmpooler showed ``[]``).

Addition: ``/status?view=providers`` (alone or in a list) adds a ``providers`` section (each
provider's circuit breaker and sessions); without a ``view`` naming it the body has exactly
vmpooler's sections. In ``pools``, a pool with ``max_unhealthy`` has a ``brake`` entry, one
in the configuration-error state (a clone failed permanently) a ``config_error`` entry, and
one with ``failover: true`` a ``failover`` entry
(:func:`vmpooler.web.alias_failover.failover_section`), one with a standby tier a ``standby``
entry (``count`` of its standby set, configured ``target``, ``state``; also in ``/poolstat``)
(ours all: a pool without them shows exactly vmpooler's entry). When ``:quotas:`` sets a
limit, the ``users_summary`` and ``users`` sections (ours;
:mod:`vmpooler.web.resources.status_users`) come with the default sections or a ``view``
naming ``users``: a snapshot at most 5 s old, shared by every API process, so they cost no
Redis work most of the time and never a scan of every user per request.
"""

from __future__ import annotations

from typing import Any

import falcon

from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.config_error_store import parse_config_error
from vmpooler.actors.storage.queues import Queue
from vmpooler.actors.storage.status_store import StatusReading, StatusStore
from vmpooler.web import stats
from vmpooler.web.alias_failover import failover_section
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import json_body
from vmpooler.web.resources.query_params import query_params
from vmpooler.web.resources.status_plan import StatusPlan, StatusPlans
from vmpooler.web.resources.status_sections import (
    alias_of,
    brake_section,
    config_error_section,
    configured_size,
    pool_size,
    provider_section,
    queue_section,
    sizing_section,
    standby_section,
)
from vmpooler.web.resources.status_users import UsersView, wants_users
from vmpooler.web.resources.summary import Summary, SummaryRoute

__all__ = ["DEFAULT_SECTIONS", "SECTIONS", "PoolStat", "Status", "TotalRunning", "register",
           "status_sections"]

SECTIONS = ("boot", "capacity", "clone", "pools", "providers", "queue")
"""Optional top-level sections of ``/status``; ``status`` is always present."""
DEFAULT_SECTIONS = ("boot", "capacity", "clone", "pools", "queue")
"""The sections without a ``view`` (or a bare ``view``): vmpooler 3.9.1's, exactly. Our
``providers`` section is only sent when a ``view`` names it."""

_OK_MESSAGE = "Battle station fully armed and operational."
_ALL = frozenset(SECTIONS)
_DEFAULT = frozenset(DEFAULT_SECTIONS)


def status_sections(view: str | None) -> frozenset[str]:
    """The optional sections a ``view`` query value asks for, as vmpooler reads it: absent or
    bare (None) → :data:`DEFAULT_SECTIONS`; else the comma-separated names of
    :data:`SECTIONS` it lists, unknown names ignored (``view=`` → none, only ``status``)."""
    if view is None:
        return _DEFAULT
    return frozenset(view.split(",")) & _ALL


class Status:
    """``GET /status?view=a,b``: service overview, one Redis round trip (which concurrent
    requests may share, see :class:`~vmpooler.actors.storage.status_store.SharedReads`)."""

    def __init__(self, ctx: ApiContext, store: StatusStore) -> None:
        self._ctx = ctx
        self._store = store
        self._plans = StatusPlans()
        self._users = UsersView(ctx)
        # the sections last built: (reading, plan, sections, status without uptime)
        self._built: tuple[StatusReading, StatusPlan, dict[str, Any], dict[str, Any]] | None \
            = None

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        view = query_params(req).get("view")
        plan = self._plans.get(self._ctx.config, status_sections(view))
        with self._ctx.tracer.start("redis status", kind="client"):
            reading = self._store.status(
                plan.names, queues=plan.queues, last_boot=plan.last_boot,
                queue_totals=plan.queue_totals, durations=plan.durations,
                date=timefmt.date_bucket(self._ctx.clock.now()), providers=plan.providers,
                brakes=plan.brakes, config_errors=plan.config_errors, failovers=plan.failovers,
                sizings=plan.sizings, standby=plan.standby)
        # Requests that shared one reading get the same sections: build them once.
        built = self._built
        if built is None or built[0] is not reading or built[1] is not plan:
            built = self._built = (reading, plan, *_sections(plan, reading))
        status = dict(built[3])
        status["uptime"] = stats.round1(self._ctx.clock.now() - self._ctx.started_at)
        users = self._users.sections(req) if wants_users(self._ctx, view) else {}
        json_body(resp, 200, {**built[2], **users, "status": status})


def _sections(plan: StatusPlan, reading: StatusReading) -> tuple[dict[str, Any], dict[str, Any]]:
    """The body's sections from ``reading`` but ``status``, in body order, and the ``status``
    section without its ``uptime``. Callers must not change them: they are shared by the
    requests that shared ``reading``."""
    wanted = plan.wanted
    sizes = [pool_size(pool, cap, override, reading.sizings.get(pool.name))
             for pool, cap, override in zip(plan.pools, plan.caps,
                                            plan.overrides(reading.size_overrides), strict=True)]
    ready = reading.counts[Queue.READY]
    result: dict[str, Any] = {}
    if "boot" in wanted:
        result["boot"] = stats.duration_metrics(reading.durations["boot"])
    if "capacity" in wanted:
        result["capacity"] = stats.capacity(sum(ready.values()), sum(sizes))
    if "clone" in wanted:
        result["clone"] = stats.duration_metrics(reading.durations["clone"])
    if "pools" in wanted:
        result["pools"] = _pools(plan, sizes, reading)
    if "providers" in wanted:
        result["providers"] = {name: provider_section(reading.providers.get(name))
                               for name in plan.providers}
    if "queue" in wanted:
        result["queue"] = queue_section(reading)
    status: dict[str, Any] = {"ok": True, "message": _OK_MESSAGE}
    empty = [name for name, size in zip(plan.names, sizes, strict=True)
             if ready[name] == 0 and size != 0]
    if empty:
        status.update(ok=False, message=f"Found {len(empty)} empty pools.", empty=empty)
    return result, status


def _pools(plan: StatusPlan, sizes: list[int], reading: StatusReading) -> dict[str, Any]:
    """The ``pools`` section; a pool with a mass-failure brake gets its ``brake`` entry, one
    in the configuration-error state its ``config_error`` entry, one with ``failover: true``
    its ``failover`` entry, one sized by demand its ``sizing`` entry, one with a standby tier
    its ``standby`` entry (all ours)."""
    body: dict[str, Any] = {}
    ready, running = reading.counts[Queue.READY], reading.counts[Queue.RUNNING]
    pending, last_boot = reading.counts[Queue.PENDING], reading.last_boot
    errors, braked, failing_over = reading.config_errors, plan.braked, plan.failing_over
    for pool, aka, size in zip(plan.pools, plan.aliases, sizes, strict=True):
        name = pool.name
        entry: dict[str, Any] = {
            "ready": ready[name],
            "running": running[name],
            "pending": pending[name],
            "max": size,
            "lastBoot": last_boot[name],
        }
        if aka is not None:
            entry["alias"] = aka
        if name in braked:
            entry["brake"] = brake_section(reading.brakes.get(name))
        if name in errors:
            error = parse_config_error(errors[name])
            if error is not None:
                entry["config_error"] = config_error_section(error)
        if name in failing_over:
            entry["failover"] = failover_section(name, size, reading.failovers.get(name))
        if pool.demand is not None:
            entry["sizing"] = sizing_section(pool, reading.sizings.get(name))
        if pool.standby is not None:
            entry["standby"] = standby_section(pool, reading.standby.get(name, 0))
        body[name] = entry
    return body


class PoolStat:
    """``GET /poolstat?pool=a,b``: ``max``, ``alias`` and ``ready`` of pools named or aliased
    (vmpooler's), and ``standby`` for a pool with a standby tier (ours)."""

    def __init__(self, ctx: ApiContext, store: StatusStore) -> None:
        self._ctx = ctx
        self._store = store

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        asked = set((query_params(req).get("pool") or "").split(","))
        config = self._ctx.config
        chosen = [pool for pool in config.pools
                  if pool.name in asked or asked.intersection(pool.alias)]
        demand = [pool.name for pool in chosen if pool.demand is not None]
        tiered = [pool.name for pool in chosen if pool.standby is not None]
        reading = self._store.status([pool.name for pool in chosen], queues=(Queue.READY,),
                                     sizings=demand, standby=tiered)
        ready, overrides = reading.counts[Queue.READY], reading.size_overrides
        body: dict[str, Any] = {}
        for pool in chosen:
            entry: dict[str, Any] = {"max": configured_size(config, pool, overrides,
                                                            reading.sizings.get(pool.name))}
            aka = alias_of(pool)
            if aka is not None:
                entry["alias"] = aka
            entry["ready"] = ready[pool.name]
            if pool.standby is not None:
                entry["standby"] = standby_section(pool, reading.standby.get(pool.name, 0))
            body[pool.name] = entry
        json_body(resp, 200, {"pools": body})


class TotalRunning:
    """``GET /totalrunning``: ``{"running": n}`` over every configured pool."""

    def __init__(self, ctx: ApiContext, store: StatusStore) -> None:
        self._ctx = ctx
        self._store = store

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        running = self._store.total_running(list(self._ctx.config.pool_names))
        json_body(resp, 200, {"running": running})


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
