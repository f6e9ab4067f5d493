"""The Falcon application: ``create_app`` wires resources to their collaborators.

``create_app`` only wires; it reads no environment and starts nothing, so tests build it
with whatever store, commands and clock they like. Routes accept an optional trailing
slash; an unknown route answers 404 ``{"ok": false}``.
"""

from __future__ import annotations

import falcon
from falcon.routing import CompiledRouter

from vmpooler.web import api_prometheus, metric_labels
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError, install_error_handlers
from vmpooler.web.middleware import build_middleware
from vmpooler.web.resources import (
    config,
    dashboard,
    misc,
    ondemand,
    openapi,
    readiness,
    status,
    token,
    vm,
)

__all__ = ["API_PREFIX", "create_app"]

API_PREFIX = "/api/v3"


class _NotFound:
    """Sink for every path no route matched."""

    def __call__(self, req: falcon.Request, resp: falcon.Response, **_: str) -> None:
        raise ApiError(404)


def create_app(ctx: ApiContext) -> falcon.App:
    """A WSGI application serving vmpooler's API v3 over ``ctx``.

    ``ctx.metrics`` is wrapped first (:func:`vmpooler.web.metric_labels.bound`): no value a
    client chooses reaches a metric unbounded."""
    rule = metric_labels.bound(ctx)
    router = CompiledRouter()
    app = falcon.App(media_type="application/json", router=router,
                     middleware=build_middleware(ctx, api_prometheus.observers(ctx, router, rule)))
    app.req_options.strip_url_path_trailing_slash = True
    app.req_options.auto_parse_form_urlencoded = False
    unexpected = install_error_handlers(app, metrics=ctx.metrics, clock=ctx.clock)
    for module in (misc, readiness, dashboard, vm, ondemand, status, token, config,
                   openapi):
        module.register(app, ctx, API_PREFIX)
    api_prometheus.register(app, ctx, unexpected)
    app.add_sink(_NotFound(), r"/")
    return app
