"""Errors of the REST API, rendered as vmpooler's JSON bodies.

Resources raise :class:`ApiError` with the exact status and body vmpooler answers; one
handler renders it. Anything else that escapes a resource becomes a JSON 500 (never HTML,
never a traceback to the client) and is logged.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import falcon
import orjson

__all__ = ["ApiError", "install_error_handlers", "json_body", "unauthorized"]

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
    for name, value in (ex.headers or {}).items():
        resp.set_header(name, value)


def _unexpected(req: falcon.Request, resp: falcon.Response, ex: Exception,
                params: dict[str, Any]) -> None:
    log.exception("[!] [api] %s %s failed", req.method, req.path)
    json_body(resp, 500, {"ok": False, "error": "internal error"})


def install_error_handlers(app: falcon.App) -> None:
    """Map errors to JSON: the most specific handler wins (falcon walks the MRO)."""
    app.add_error_handler(Exception, _unexpected)
    app.add_error_handler(falcon.HTTPError, _http_error)
    app.add_error_handler(ApiError, _api_error)
