"""The dashboard's history and activity: what ``/dashboard/`` draws beside ``/status``.

* ``GET /dashboard/stats/history?minutes=N`` (default 60, at most 1440) — every pool's
  recorded points (:mod:`vmpooler.actors.storage.history_store`) of the last ``N`` minutes as
  ``{"now", "since", "pools": {pool: {"t", "ready", "running", "pending", "checkouts",
  "clones", "target"}}}``, each an array oldest first; ``checkouts`` and ``clones`` are per
  point (the increment since the point before, 0 for the first); ``target`` is a demand-sized
  pool's target then (null for other pools). One round trip.
* ``GET /dashboard/stats/activity`` — ``{"now", "requests", "errors"}``: the on-demand
  requests in flight (waiting or being provisioned, newest 50) with ``id``, ``created``
  (epoch), ``age`` and ``deadline`` (``created + ondemand_request_ttl`` minutes, epoch),
  ``status``, ``user`` (who asked), ``priority``, ``requested``, and once the on-demand manager
  placed it in its clone queue ``queue_position`` and ``estimated_ready_at`` (epoch; both
  null before: docs/fairness.md "Honest waits"); and the 10 newest dead-letter entries of every
  queue (``vmpooler__dlq__*``), newest first, with ``queue``, ``vm``, ``pool``,
  ``error_class``, ``error_message`` and ``at`` (epoch). Three round trips. With ``:auth:``
  configured, ``id`` and ``user`` are only given to a request presenting a valid
  ``X-AUTH-TOKEN`` (one round trip more): a request id names the request's VMs through
  ``GET /ondemandvm/<id>``. Anyone else (the dashboard page in a browser) gets each request
  without them, and ``"requesters": false`` (``true`` when they are shown).

:func:`vmpooler_history` gives the ``history`` array of vmpooler's two stats endpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import falcon
import redis

from vmpooler.actors.storage.activity_store import ActivityStore
from vmpooler.actors.storage.history_store import RETENTION, HistoryStore, Point, rates
from vmpooler.actors.storage.wait_store import WaitStore
from vmpooler.web.api_errors import json_body

__all__ = ["REPEAT", "Activity", "History", "vmpooler_history"]

REPEAT = 8
"""vmpooler emitted each Graphite datapoint this many times in ``history``."""

_REQUESTS = 50
_ERRORS = 10


def vmpooler_history(points: Sequence[int], current: int) -> list[int]:
    """vmpooler's ``history``: each point :data:`REPEAT` times, or ``[current]`` when there is
    no point yet (as vmpooler without a graph server)."""
    if not points:
        return [current]
    return [value for value in points for _ in range(REPEAT)]


def _minutes(req: falcon.Request) -> int:
    raw = req.get_param("minutes") or ""
    try:
        value = int(raw)
    except ValueError:
        return 60
    return max(1, min(RETENTION // 60, value))


def series(points: Sequence[Point]) -> dict[str, Sequence[int | None]]:
    """One pool's points as parallel arrays, the counters turned into per-point rates."""
    return {
        "t": [p.t for p in points],
        "ready": [p.ready for p in points],
        "running": [p.running for p in points],
        "pending": [p.pending for p in points],
        "checkouts": rates([p.checkouts for p in points]),
        "clones": rates([p.clones for p in points]),
        "target": [p.target for p in points],
    }


class History:
    """``GET /dashboard/stats/history``."""

    def __init__(self, pools: Sequence[str], store: HistoryStore,
                 now: Callable[[], float]) -> None:
        self._pools = tuple(pools)
        self._store = store
        self._now = now

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        now = int(self._now())
        since = now - _minutes(req) * 60
        read = self._store.read(self._pools, since)
        json_body(resp, 200, {"now": now, "since": since,
                              "pools": {pool: series(read[pool]) for pool in self._pools}})


class Activity:
    """``GET /dashboard/stats/activity``; ``shows_requesters(req)`` says whether ``req`` may
    see request ids and users."""

    def __init__(self, client: redis.Redis, ttl_minutes: int, now: Callable[[], float],
                 shows_requesters: Callable[[falcon.Request], bool]) -> None:
        self._store = ActivityStore(client)
        self._waits = WaitStore(client)
        self._ttl = max(0, int(ttl_minutes)) * 60
        self._now = now
        self._shows_requesters = shows_requesters

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        now = self._now()
        in_flight, letters = self._store.read(_REQUESTS, _ERRORS)
        shown = self._shows_requesters(req)
        waits = self._waits.waits([r.request_id for r in in_flight])
        requests = []
        for r in in_flight:
            who = {"id": r.request_id} if shown else {}
            wait = waits.get(r.request_id)
            requests.append({
                **who, "created": int(r.created), "age": max(0, int(now - r.created)),
                "deadline": int(r.created) + self._ttl, "status": r.status or "pending",
                **({"user": r.user or ""} if shown else {}), "requested": r.requested or "",
                "priority": r.priority or "normal",
                "queue_position": None if wait is None else wait.position,
                "estimated_ready_at": None if wait is None else round(wait.ready_at),
            })
        errors = [{"queue": e.queue, "vm": e.vm, "pool": e.pool, "error_class": e.error_class,
                   "error_message": e.error_message, "at": e.epoch}
                  for e in sorted(letters, key=lambda e: -e.epoch)]
        json_body(resp, 200, {"now": int(now), "requesters": shown, "requests": requests,
                              "errors": errors[:_ERRORS]})
