"""Errors of the REST API, rendered as vmpooler's JSON bodies.

Resources raise :class:`ApiError` with the exact status and body vmpooler answers; one
handler renders it. A request that fails because Redis cannot be reached (see
:func:`redis_unavailable`) is answered 503 ``{"ok": false, "error": "redis unavailable",
"retry_after": 5}`` with ``Retry-After: 5``, counted (``api.redis_unavailable``) and logged
at most once per :data:`OUTAGE_LOG_EVERY` seconds per process. Anything else that escapes a
resource becomes a JSON 500 (never HTML, never a traceback to the client) and is logged
(the path with its token masked, :func:`~vmpooler.web.logsafe.redact_path`).
Nothing is kept between requests but the log throttle, so the API answers again as soon as
Redis does.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import falcon
import orjson

from vmpooler.actors.metrics.backends import Metrics, NullMetrics
from vmpooler.actors.runtime.clock import Clock, RealClock
from vmpooler.actors.storage.redis_errors import redis_unavailable
from vmpooler.web.logsafe import redact_path

__all__ = ["OUTAGE_LOG_EVERY", "RETRY_AFTER", "ApiError", "ErrorHandler",
           "install_error_handlers", "json_body", "redis_unavailable", "unauthorized"]

RETRY_AFTER = 5
"""Seconds a client is told to wait (``Retry-After``) when Redis is unavailable."""
OUTAGE_LOG_EVERY = 5.0
"""At most one log line per this many seconds for requests refused because of Redis."""
UNAVAILABLE_METRIC = "api.redis_unavailable"

ErrorHandler = Callable[[falcon.Request, falcon.Response, Exception, dict[str, Any]], None]
"""A Falcon error handler: ``(req, resp, exception, params)``."""

log = logging.getLogger(__name__)


def encode_json(body: Any) -> bytes:
    """``body`` as pretty-printed UTF-8 JSON, vmpooler's 2-space indent.

    orjson writes it (``json.dumps`` with an indent runs in pure Python: 1.1 ms for a
    100-pool ``/status``, 0.02 ms with orjson, same bytes for ASCII text); what orjson
    refuses (integers beyond 64 bits, non-string keys) falls back to the standard library.
    Non-ASCII text is written as UTF-8, as Ruby's JSON generator does.
    """
    try:
        return orjson.dumps(body, option=orjson.OPT_INDENT_2)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(body, indent=2, ensure_ascii=False).encode()


def json_body(resp: falcon.Response, status: int, body: Any) -> None:
    """Set a pretty-printed JSON body (vmpooler's 2-space indent) and the status."""
    resp.status = falcon.code_to_http_status(status)
    resp.content_type = "application/json"
    resp.data = encode_json(body)


class ApiError(Exception):
    """An answer other than success: ``status`` and the JSON ``body`` to send.

    The body defaults to ``{"ok": false}``; ``headers`` are added to the response.
    """

    def __init__(self, status: int, body: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status, body)
        self.status = status
        self.body = body if body is not None else {"ok": False}
        self.headers = headers or {}


def unauthorized() -> ApiError:
    """vmpooler's 401: ``{"ok": false}`` with a Basic ``WWW-Authenticate`` challenge."""
    return ApiError(401, {"ok": False},
                    headers={"WWW-Authenticate": 'Basic realm="Authentication required"'})


def _api_error(req: falcon.Request, resp: falcon.Response, ex: ApiError,
               params: dict[str, Any]) -> None:
    json_body(resp, ex.status, ex.body)
    for name, value in ex.headers.items():
        resp.set_header(name, value)


def _http_error(req: falcon.Request, resp: falcon.Response, ex: falcon.HTTPError,
                params: dict[str, Any]) -> None:
    body: dict[str, Any] = {"ok": False}
    if ex.status_code not in (404, 405) and ex.title:
        body["error"] = ex.description or ex.title
    json_body(resp, ex.status_code, body)
    for name, value in dict(ex.headers or {}).items():
        resp.set_header(name, value)


def _unexpected(req: falcon.Request, resp: falcon.Response, ex: Exception,
                params: dict[str, Any]) -> None:
    log.exception("[!] [api] %s %s failed", req.method, redact_path(req.path))
    json_body(resp, 500, {"ok": False, "error": "internal error"})


class _Unexpected:
    """The handler of every other exception: 503 for Redis being away, else a JSON 500."""

    def __init__(self, metrics: Metrics, clock: Clock, log_every: float) -> None:
        self._metrics, self._clock, self._every = metrics, clock, log_every
        self._lock = threading.Lock()
        self._logged_at: float | None = None
        self._quiet = 0

    def __call__(self, req: falcon.Request, resp: falcon.Response, ex: Exception,
                 params: dict[str, Any]) -> None:
        if not redis_unavailable(ex):
            _unexpected(req, resp, ex, params)
            return
        json_body(resp, 503, {"ok": False, "error": "redis unavailable",
                              "retry_after": RETRY_AFTER})
        resp.set_header("Retry-After", str(RETRY_AFTER))
        try:
            self._metrics.increment(UNAVAILABLE_METRIC)
        except Exception:  # a metrics backend must never break a response
            log.debug("[!] [api] metrics backend failed", exc_info=True)
        self._log(req, ex)

    def _log(self, req: falcon.Request, ex: Exception) -> None:
        now = self._clock.monotonic()
        with self._lock:
            if self._logged_at is not None and now - self._logged_at < self._every:
                self._quiet += 1
                return
            quiet, self._quiet, self._logged_at = self._quiet, 0, now
        more = f"; {quiet} more refused since the last line" if quiet else ""
        log.warning("[!] [api] redis is unavailable, answering 503 (%s %s: %s: %s)%s",
                    req.method, redact_path(req.path), type(ex).__name__, ex, more)


def install_error_handlers(app: falcon.App, *, metrics: Metrics | None = None,
                           clock: Clock | None = None,
                           log_every: float = OUTAGE_LOG_EVERY) -> ErrorHandler:
    """Map errors to JSON: the most specific handler wins (falcon walks the MRO).

    Returns the handler of every other exception (503 when Redis is unavailable, else
    500), for a caller that wraps it (the Prometheus exception counter). ``metrics``
    counts the 503s; ``clock`` paces their log lines.
    """
    unexpected = _Unexpected(metrics or NullMetrics(), clock or RealClock(), log_every)
    app.add_error_handler(Exception, unexpected)
    app.add_error_handler(falcon.HTTPError, _http_error)
    app.add_error_handler(ApiError, _api_error)
    return unexpected
