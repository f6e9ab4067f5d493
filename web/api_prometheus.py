"""The API's Prometheus side: vmpooler's HTTP collector middleware and the scrape endpoint.

Active only when the API's metrics backend is :class:`PrometheusMetrics` (``:prometheus:``);
otherwise :func:`observers` is empty and :func:`register` adds nothing. The durations come
from the API's one request timer (:class:`vmpooler.web.middleware.RequestTimer`).

* ``<ns>_http_requests_total{code,method,path}`` and
  ``<ns>_http_request_duration_seconds{method,path}`` for every response, the method in
  lower case (``other`` for a method not in
  :data:`~vmpooler.actors.metrics.bounded.HTTP_METHODS`) and the path given by
  :func:`path_label`: one value per route, never text of the client's own;
* ``<ns>_http_exceptions_total{exception}`` for every exception no handler turned into an
  HTTP answer (the class name; the response is still the usual JSON 500);
* ``GET <prometheus_endpoint>`` (default ``/prometheus``): the text exposition of every
  process sharing the multiprocess directory.
"""

from __future__ import annotations

import re
from typing import Any

import falcon
from falcon.routing import CompiledRouter

from vmpooler.actors.metrics.bounded import LabelRule
from vmpooler.actors.metrics.prometheus import PrometheusMetrics
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ErrorHandler
from vmpooler.web.metric_labels import unbounded
from vmpooler.web.middleware import RequestObserver

__all__ = ["UNMATCHED", "collapse_path", "observers", "path_label", "register"]

UNMATCHED = "unmatched"
"""The path label of every request no route matched."""

_COLLAPSE = [(re.compile(rf"/{part}/.+$"), f"/{part}")
             for part in ("vm", "ondemandvm", "token", "lib", "img")]


def collapse_path(path: str) -> str:
    """vmpooler's ``strip_hostnames_from_path``: one series per route group."""
    for pattern, replacement in _COLLAPSE:
        path = pattern.sub(replacement, path)
    return path


def path_label(router: CompiledRouter, rule: LabelRule, path: str) -> str:
    """The ``path`` label of a request for ``path``: :data:`UNMATCHED` when no route of
    ``router`` matches it, else the route's template collapsed as vmpooler collapses a
    path (``/api/v3/vm/{hostname}`` → ``/api/v3/vm``) with each field still in it filled in
    when ``rule`` lists the value (``/api/v3/summary/boot/duration``,
    ``/api/v3/config/poolsize/<configured pool>``) and left as ``{field}`` otherwise.

    For every request of a well-behaved client this is vmpooler's label (the path
    collapsed), except that a trailing slash is dropped.
    """
    found = router.find(path)
    if found is None or found[3] is None:
        return UNMATCHED
    params, template = found[2], found[3]
    return rule.template(collapse_path(template), params or {})


def _backend(ctx: ApiContext) -> PrometheusMetrics | None:
    metrics = unbounded(ctx.metrics)
    return metrics if isinstance(metrics, PrometheusMetrics) else None


class _Exposition:
    """``GET <prometheus_endpoint>``."""

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self._metrics = metrics

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        body, content_type = self._metrics.exposition()
        resp.status = falcon.HTTP_200
        resp.content_type = content_type
        resp.data = body


def observers(ctx: ApiContext, router: CompiledRouter,
              rule: LabelRule) -> list[RequestObserver]:
    """The HTTP families' observer of each finished request when ``ctx.metrics`` is
    Prometheus (the method bounded by ``rule`` and in lower case, the path label of
    :func:`path_label` over the app's ``router``); else nothing."""
    metrics = _backend(ctx)
    if metrics is None:
        return []

    def observe(req: falcon.Request, resp: falcon.Response, seconds: float) -> None:
        metrics.observe_request(rule.method(req.method).lower(),
                                path_label(router, rule, req.path), resp.status_code, seconds)

    return [observe]


def register(app: falcon.App, ctx: ApiContext, unexpected: ErrorHandler) -> None:
    """Route the scrape endpoint and count unexpected exceptions (after the error handlers
    of :mod:`vmpooler.web.api_errors` are installed; ``unexpected`` is the one they installed
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
