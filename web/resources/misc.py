"""``GET /`` and ``GET /healthcheck``."""

from __future__ import annotations

import falcon

from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import json_body


class Root:
    """``GET /``: vmpooler redirects to its dashboard."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        raise falcon.HTTPFound(f"{req.prefix}/dashboard/")


class Healthcheck:
    """``GET /healthcheck``: 200 ``{"ok": true}`` while the process serves requests."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        json_body(resp, 200, {"ok": True})


def register(app: falcon.App, ctx: ApiContext, prefix: str) -> None:
    """Add ``/`` and ``/healthcheck``."""
    app.add_route("/", Root())
    app.add_route("/healthcheck", Healthcheck())
