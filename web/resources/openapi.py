"""``GET /api/v3/openapi.json``: the OpenAPI 3.0.3 document of the API.

The document ships as package data (``vmpooler/web/openapi.json``); it is read and parsed
once, at import, and served pretty-printed like every other vmpooler body.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import falcon

from vmpooler.web.api_context import ApiContext

__all__ = ["document", "register"]


@cache
def _text() -> str:
    raw = resources.files("vmpooler.web").joinpath("openapi.json").read_text(encoding="utf-8")
    return json.dumps(json.loads(raw), indent=2, ensure_ascii=False)


def document() -> dict[str, Any]:
    """A fresh copy of the OpenAPI document (callers may change it)."""
    value: dict[str, Any] = json.loads(_text())
    return value


class OpenApi:
    """Serves the document."""

    def __init__(self) -> None:
        self._body = _text()

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.status = falcon.HTTP_200
        resp.content_type = "application/json"
        resp.text = self._body


def register(app: falcon.App, ctx: ApiContext, prefix: str) -> None:
    """Add ``<prefix>/openapi.json``."""
    app.add_route(f"{prefix}/openapi.json", OpenApi())
