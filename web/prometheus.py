"""The API's Prometheus side: vmpooler's HTTP collector middleware and the scrape endpoint.

Active only when the API's metrics backend is :class:`PrometheusMetrics` (``:prometheus:``);
otherwise :func:`observers` is empty and :func:`register` adds nothing. The durations come
from the API's one request timer (:class:`vmpooler.web.middleware.RequestTimer`).

* ``<ns>_http_requests_total{code,method,path}`` and
  ``<ns>_http_request_duration_seconds{method,path}`` for every response, the method in
  lower case and the path collapsed as vmpooler's ``strip_hostnames_from_path`` does
  (``/api/v3/vm/<anything>`` → ``/api/v3/vm``; likewise ``/ondemandvm/``, ``/token/``,
  ``/lib/``, ``/img/``);
* ``<ns>_http_exceptions_total{exception}`` for every exception no handler turned into an
  HTTP answer (the class name; the response is still the usual JSON 500);
* ``GET <prometheus_endpoint>`` (default ``/prometheus``): the text exposition of every
  process sharing the multiprocess directory.
"""

from __future__ import annotations

import re
from typing import Any

import falcon

from vmpooler.actors.metrics.prometheus import PrometheusMetrics
from vmpooler.web.context import ApiContext
from vmpooler.web.errors import ErrorHandler
from vmpooler.web.middleware import RequestObserver

__all__ = ["collapse_path", "observers", "register"]

_COLLAPSE = [(re.compile(rf"/{part}/.+$"), f"/{part}")
             for part in ("vm", "ondemandvm", "token", "lib", "img")]


def collapse_path(path: str) -> str:
    """vmpooler's ``strip_hostnames_from_path``: one series per route group."""
    for pattern, replacement in _COLLAPSE:
        path = pattern.sub(replacement, path)
    return path


def _backend(ctx: ApiContext) -> PrometheusMetrics | None:
    return ctx.metrics if isinstance(ctx.metrics, PrometheusMetrics) else None


class _Exposition:
    """``GET <prometheus_endpoint>``."""

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self._metrics = metrics

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        body, content_type = self._metrics.exposition()
        resp.status = falcon.HTTP_200
        resp.content_type = content_type
        resp.data = body


def observers(ctx: ApiContext) -> list[RequestObserver]:
    """The HTTP families' observer of each finished request when ``ctx.metrics`` is
    Prometheus (the method in lower case, the path collapsed); else nothing."""
    metrics = _backend(ctx)
    if metrics is None:
        return []

    def observe(req: falcon.Request, resp: falcon.Response, seconds: float) -> None:
        metrics.observe_request(req.method.lower(), collapse_path(req.path), resp.status_code,
                                seconds)

    return [observe]


def register(app: falcon.App, ctx: ApiContext, unexpected: ErrorHandler) -> None:
    """Route the scrape endpoint and count unexpected exceptions (after the error handlers
    of :mod:`vmpooler.web.errors` are installed; ``unexpected`` is the one they installed
    for every other exception, which still renders the answer)."""
    metrics = _backend(ctx)
    if metrics is None:
        return
    prometheus = ctx.config.metrics.prometheus
    app.add_route(prometheus.endpoint if prometheus else "/prometheus", _Exposition(metrics))

    def counted(req: falcon.Request, resp: falcon.Response, ex: Exception,
                params: dict[str, Any]) -> None:
        metrics.count_exception(type(ex).__name__)
        unexpected(req, resp, ex, params)

    app.add_error_handler(Exception, counted)
