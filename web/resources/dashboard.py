"""The operator dashboard: ``GET /dashboard/``, its two static assets and vmpooler's two
dashboard JSON endpoints (reference §1.4).

* ``GET /dashboard`` — one HTML page (``web/static/dashboard.html``), rendered once when the
  app is built with the site name (``:config: site_name`` / ``SITE_NAME``, markup stripped
  to plain text and escaped), the clone slot limits and the asset versions. Per request only
  the application root (WSGI ``SCRIPT_NAME``, usually empty) is substituted.
* ``GET /dashboard/static/<name>`` — ``dashboard.css`` and ``dashboard.js``, read once into
  memory. A name is looked up in a fixed table of those two files; nothing is ever opened
  from a path built from the request, so no ``..`` or encoded variant can reach another
  file. Each has an ``ETag`` (``If-None-Match`` answers 304); fetched with ``?v=<that
  version>``, as the page does, it may be cached for a year (``immutable``), otherwise the
  browser must revalidate (``no-cache``).
* ``GET /dashboard/stats/vmpooler/pool`` — ``{<pool>: {"size": n, "ready": n}}`` plus
  ``"history"`` when a ``history`` query parameter is present: the last hour's recorded ready
  counts (:mod:`vmpooler.actors.storage.history_store`), each point 8 times as vmpooler emitted
  Graphite's, or ``[<ready>]`` while nothing is recorded.
* ``GET /dashboard/stats/vmpooler/running`` — ``{<major>: {"running": n}}`` (plus
  ``"history"``, the same way, of the running counts summed per point), major being the pool
  name up to its first ``-``, summed over the pools sharing it.
* ``GET /dashboard/stats/history`` and ``GET /dashboard/stats/activity`` — ours, for the page
  (:mod:`vmpooler.web.resources.dashboard_data`); with ``:auth:`` configured the activity
  names request ids and users only to a request with a valid token (never the page's).

Each of vmpooler's JSON endpoints is one Redis round trip (one EVALSHA of the ``/status``
script through :class:`~vmpooler.actors.storage.status_store.StatusStore`), whatever the number of
pools, and one more (a pipeline) with ``history``.

The page polls ``/api/v3/status?view=pools,queue,capacity,providers`` every second, the
activity every fifth poll and the history every fifteenth (every poll until two points
exist): 76 requests a minute, under the default ``global_per_ip`` limit of 100. Its pool
table shows, under a pool's ready count, the pool's standby tier when it has one (the
``standby`` entry of ``/status``: ``+2 / 3 suspended``). It is
counted by the rate limiter and logged by the request logger like any other route, as
vmpooler's dashboard was.

Divergences from vmpooler 3.9.1:

* no Graphite: ``:graphs:`` (and ``:graphite:``) are ignored; ``history`` comes from the
  history the manager records in Redis, for both endpoints (vmpooler's running endpoint gave
  no ``history`` at all without a graph server). ``?history`` without a value counts as
  present (Rack read it as absent);
* the site name is read once, from the parsed configuration (vmpooler re-read and re-parsed
  the whole configuration file on every page view when ``SITE_NAME`` was unset), and shown
  as text: its markup (``<b>vmpooler</b>``) is stripped, not inserted into the page;
* the running endpoint does not write ``major`` into the pool configuration (vmpooler did,
  and ``/api/v3/config`` then showed it); a pool name without ``-`` is its own major (vmpooler
  grouped those under ``""``);
* ``size`` applies the Redis size override (``vmpooler__config__poolsize``), as ``/status``
  does;
* the page and its assets live under ``/dashboard/`` (vmpooler served ``/dashboard.css``,
  ``/lib/*.js`` and ``/img/*`` from the root and loaded jQuery and d3 from CDNs); the page is
  ours and looks nothing like vmpooler's; ``/dashboard/weekly`` does not exist.
"""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import falcon

from vmpooler.actors.config import Config, PoolConfig
from vmpooler.actors.storage.checkout_store import CheckoutStore
from vmpooler.actors.storage.history_store import HistoryStore, Point
from vmpooler.actors.storage.queues import Queue
from vmpooler.actors.storage.status_store import StatusStore
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError, json_body
from vmpooler.web.resources.dashboard_data import Activity, History, vmpooler_history
from vmpooler.web.resources.query_params import query_params
from vmpooler.web.resources.status_sections import configured_size
from vmpooler.web.tokens import has_valid_token

__all__ = ["ASSETS", "DASHBOARD", "major", "register", "site_title"]

DASHBOARD = "/dashboard"
"""Where the page is served (``/dashboard/`` too: trailing slashes are stripped)."""

ASSETS: dict[str, str] = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
}
"""The only files ``/dashboard/static/<name>`` serves, with their Content-Type."""

_PAGE = "dashboard.html"
_ROOT_MARK = "{{ROOT}}"
_IMMUTABLE = "public, max-age=31536000, immutable"
_REVALIDATE = "no-cache"
_TAG = re.compile(r"<[^>]*>")

SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
"""Sent with the page: only our own script, styles and API; no framing."""


def _read(name: str) -> bytes:
    return resources.files("vmpooler.web").joinpath("static", name).read_bytes()


def _version(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def site_title(raw: str) -> str:
    """The site name as plain text: tags stripped, entities decoded, whitespace collapsed;
    ``vmpooler`` when nothing is left."""
    text = " ".join(html.unescape(_TAG.sub("", raw)).split())
    return text or "vmpooler"


def major(pool: str) -> str:
    """The part of a pool name before its first ``-`` (the whole name when it has none)."""
    return pool.partition("-")[0]


def _history(req: falcon.Request) -> bool:
    """Whether a ``history`` query parameter is present (with or without a value)."""
    return "history" in query_params(req)


@dataclass(frozen=True)
class _Asset:
    data: bytes
    content_type: str
    version: str

    @property
    def etag(self) -> str:
        return f'"{self.version}"'


def _not_modified(req: falcon.Request, etag: str) -> bool:
    wanted = req.get_header("If-None-Match")
    if not wanted:
        return False
    return wanted.strip() == "*" or etag in [tag.strip().removeprefix("W/")
                                             for tag in wanted.split(",")]


class Static:
    """``GET /dashboard/static/{name}``: one of :data:`ASSETS`, from memory."""

    def __init__(self, assets: dict[str, _Asset]) -> None:
        self._assets = assets

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        asset = self._assets.get(name)
        if asset is None:
            raise ApiError(404)
        resp.etag = asset.etag
        current = req.get_param("v") == asset.version
        resp.cache_control = [_IMMUTABLE if current else _REVALIDATE]
        if _not_modified(req, asset.etag):
            resp.status = falcon.HTTP_304  # no body, so no Content-Type either
            resp.content_type = None
            return
        resp.status = falcon.HTTP_200
        resp.content_type = asset.content_type
        resp.set_header("X-Content-Type-Options", "nosniff")
        resp.data = asset.data

    on_head = on_get


class Page:
    """``GET /dashboard``: the HTML page, rendered once (per application root)."""

    def __init__(self, template: str) -> None:
        self._template = template
        self._render = lru_cache(maxsize=8)(self._for_root)

    def _for_root(self, root: str) -> bytes:
        return self._template.replace(_ROOT_MARK, html.escape(root, quote=True)).encode()

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.status = falcon.HTTP_200
        resp.content_type = "text/html; charset=utf-8"
        resp.cache_control = [_REVALIDATE]
        for name, value in SECURITY_HEADERS.items():
            resp.set_header(name, value)
        resp.data = self._render(req.root_path)

    on_head = on_get


def render_page(config: Config, assets: dict[str, _Asset]) -> str:
    """The page template with everything but the application root filled in."""
    settings = config.settings
    values = {
        "{{SITE_NAME}}": html.escape(site_title(settings.site_name)),
        "{{TASK_LIMIT}}": str(int(settings.task_limit)),
        "{{ONDEMAND_CLONE_LIMIT}}": str(int(settings.ondemand_clone_limit)),
        "{{CSS_VERSION}}": assets["dashboard.css"].version,
        "{{JS_VERSION}}": assets["dashboard.js"].version,
    }
    text = _read(_PAGE).decode("utf-8")
    for mark, value in values.items():
        text = text.replace(mark, value)
    return text


_HOUR = 3600


class _Stats:
    """A dashboard JSON endpoint reading through ``store`` (and ``history``)."""

    def __init__(self, ctx: ApiContext, store: StatusStore, history: HistoryStore) -> None:
        self._config: Config = ctx.config
        self._pools: tuple[PoolConfig, ...] = ctx.config.pools
        self._store = store
        self._history = history
        self._clock = ctx.clock

    def _last_hour(self) -> dict[str, list[Point]]:
        return self._history.read([pool.name for pool in self._pools],
                                  self._clock.now() - _HOUR)


class PoolStats(_Stats):
    """``GET /dashboard/stats/vmpooler/pool``: ``{pool: {size, ready[, history]}}``."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        ready, overrides = self._store.ready_counts([pool.name for pool in self._pools])
        history = _history(req)
        points = self._last_hour() if history else {}
        body: dict[str, Any] = {}
        for pool in self._pools:
            entry: dict[str, Any] = {"size": configured_size(self._config, pool, overrides),
                                     "ready": ready[pool.name]}
            if history:
                entry["history"] = vmpooler_history([p.ready for p in points[pool.name]],
                                                    ready[pool.name])
            body[pool.name] = entry
        json_body(resp, 200, body)


class RunningStats(_Stats):
    """``GET /dashboard/stats/vmpooler/running``: ``{major: {running[, history]}}``."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        reading = self._store.status([pool.name for pool in self._pools],
                                     queues=(Queue.RUNNING,))
        running = reading.counts[Queue.RUNNING]
        body: dict[str, Any] = {}
        for pool in self._pools:
            entry = body.setdefault(major(pool.name), {"running": 0})
            entry["running"] += running[pool.name]
        if _history(req):
            sums: dict[str, dict[int, int]] = {}
            for pool_name, points in self._last_hour().items():
                per_t = sums.setdefault(major(pool_name), {})
                for p in points:
                    per_t[p.t] = per_t.get(p.t, 0) + p.running
            for name, entry in body.items():
                per_t = sums.get(name, {})
                entry["history"] = vmpooler_history([per_t[t] for t in sorted(per_t)],
                                                    entry["running"])
        json_body(resp, 200, body)


def register(app: falcon.App, ctx: ApiContext, prefix: str) -> None:
    """Add the dashboard page, its assets and its JSON endpoints (outside ``prefix``)."""
    assets = {}
    for name, content_type in ASSETS.items():
        data = _read(name)
        assets[name] = _Asset(data, content_type, _version(data))
    store, history = StatusStore(ctx.redis), HistoryStore(ctx.redis)
    app.add_route(DASHBOARD, Page(render_page(ctx.config, assets)))
    app.add_route(f"{DASHBOARD}/static/{{name}}", Static(assets))
    app.add_route(f"{DASHBOARD}/stats/vmpooler/pool", PoolStats(ctx, store, history))
    app.add_route(f"{DASHBOARD}/stats/vmpooler/running", RunningStats(ctx, store, history))
    app.add_route(f"{DASHBOARD}/stats/history",
                  History([pool.name for pool in ctx.config.pools], history, ctx.clock.now))
    tokens = CheckoutStore(ctx.redis)
    app.add_route(f"{DASHBOARD}/stats/activity",
                  Activity(ctx.redis, ctx.config.settings.ondemand_request_ttl, ctx.clock.now,
                           lambda req: not ctx.auth_configured
                           or has_valid_token(req, ctx, tokens)))
