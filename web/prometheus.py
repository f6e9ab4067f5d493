"""The API's Prometheus side: vmpooler's HTTP collector middleware and the scrape endpoint.

Active only when the API's metrics backend is :class:`PrometheusMetrics` (``:prometheus:``);
otherwise :func:`middleware` is empty and :func:`register` adds nothing.

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
import time
from collections.abc import Callable
from typing import Any

import falcon

from vmpooler.actors.metrics.prometheus import PrometheusMetrics
from vmpooler.web.context import ApiContext
from vmpooler.web.errors import _unexpected

__all__ = ["PrometheusCollector", "collapse_path", "middleware", "register"]

_COLLAPSE = [(re.compile(rf"/{part}/.+$"), f"/{part}")
             for part in ("vm", "ondemandvm", "token", "lib", "img")]
_START = "vmpooler_prometheus_started"


def collapse_path(path: str) -> str:
    """vmpooler's ``strip_hostnames_from_path``: one series per route group."""
    for pattern, replacement in _COLLAPSE:
        path = pattern.sub(replacement, path)
    return path


def _backend(ctx: ApiContext) -> PrometheusMetrics | None:
    return ctx.metrics if isinstance(ctx.metrics, PrometheusMetrics) else None


class PrometheusCollector:
    """Falcon middleware recording the HTTP families; never fails a request."""

    def __init__(self, metrics: PrometheusMetrics,
                 timer: Callable[[], float] = time.perf_counter) -> None:
        self._metrics = metrics
        self._timer = timer

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Note when the request started."""
        setattr(req.context, _START, self._timer())

    def process_response(self, req: falcon.Request, resp: falcon.Response,
                         resource: object, req_succeeded: bool) -> None:
        """Count the response and observe its duration."""
        started = getattr(req.context, _START, None)
        if started is None:
            return
        self._metrics.observe_request(req.method.lower(), collapse_path(req.path),
                                      resp.status_code, max(0.0, self._timer() - started))


class _Exposition:
    """``GET <prometheus_endpoint>``."""

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self._metrics = metrics

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        body, content_type = self._metrics.exposition()
        resp.status = falcon.HTTP_200
        resp.content_type = content_type
        resp.data = body


def middleware(ctx: ApiContext) -> list[object]:
    """The collector, to run outermost, when ``ctx.metrics`` is Prometheus; else nothing."""
    metrics = _backend(ctx)
    return [PrometheusCollector(metrics)] if metrics is not None else []


def register(app: falcon.App, ctx: ApiContext) -> None:
    """Route the scrape endpoint and count unexpected exceptions (after the error handlers
    of :mod:`vmpooler.web.errors` are installed)."""
    metrics = _backend(ctx)
    if metrics is None:
        return
    prometheus = ctx.config.metrics.prometheus
    app.add_route(prometheus.endpoint if prometheus else "/prometheus", _Exposition(metrics))

    def counted(req: falcon.Request, resp: falcon.Response, ex: Exception,
                params: dict[str, Any]) -> None:
        metrics.count_exception(type(ex).__name__)
        _unexpected(req, resp, ex, params)

    app.add_error_handler(Exception, counted)
