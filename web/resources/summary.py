"""``GET /summary`` and ``/summary/{route}[/{key}]``: daily and range-level boot, clone and
tag statistics, in vmpooler 3.9.1's shapes and messages (reference §1.3), in one Redis round
trip (one pipeline of HGETALLs, :meth:`StatusStore.daily
<vmpooler.actors.storage.status_store.StatusStore.daily>`) whatever the number of days.

Divergences from vmpooler 3.9.1 (bugs fixed, on purpose):

* Errors are JSON ``{"ok": false, "error": "<message>"}`` with status 400; vmpooler sent the
  same message as plain text under a JSON content type.
* A well-formed but impossible date (``2024-02-30``) is a 400 with the usual
  ``Invalid date format`` message; vmpooler answered 500.
* A ``from``..``to`` range of more than 366 days is a 400
  (``Date range is too large, it may span at most 366 days.``); vmpooler read every day.
* The range-level ``boot``/``clone`` statistics carry the ``average``, ``min`` and ``max``
  vmpooler documented but never produced: ``duration`` over every sample of the range
  (average = total / count, 1 dp), ``count`` over the per-day counts. The per-pool
  ``average`` is the true mean of the pool's samples (vmpooler averaged the daily minimums
  and maximums together).
"""

from __future__ import annotations

import re
from datetime import date, timedelta

import falcon

from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.status_store import StatusStore
from vmpooler.web import stats
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError, json_body
from vmpooler.web.resources.query_params import query_params

__all__ = ["MAX_SUMMARY_DAYS", "SUMMARY_KEYS", "SUMMARY_ROUTES", "Summary", "SummaryRoute",
           "summary_dates"]

MAX_SUMMARY_DAYS = 366
"""Longest ``/summary`` range, in days (both ends included)."""
SUMMARY_ROUTES = ("boot", "clone", "tag")
"""The sections ``/summary/{route}`` serves (any other is a 404)."""
SUMMARY_KEYS = ("duration", "count")
"""The sub-keys of the ``boot`` and ``clone`` sections (``/summary/{route}/{key}``; for
``tag`` the key is a tag name)."""

_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


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
    query = query_params(req)
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


class Summary:
    """``GET /summary?from=&to=``: daily and range-level boot, clone and tag statistics."""

    def __init__(self, ctx: ApiContext, store: StatusStore) -> None:
        self._ctx = ctx
        self._store = store

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

