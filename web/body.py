"""Reading request bodies as vmpooler does (reference §1.2), and as its clients send them.

vmfloaty posts JSON with ``Content-Type: application/x-www-form-urlencoded``; we read the raw
bytes as JSON whatever the content type says.
"""

from __future__ import annotations

import json
from typing import Any

import falcon

from vmpooler.web.errors import ApiError

__all__ = ["MAX_BODY", "MAX_DEPTH", "read_json_object", "read_raw"]

MAX_BODY = 10240
MAX_DEPTH = 5


def read_raw(req: falcon.Request, limit: int = 1 << 20) -> bytes:
    """The request body, at most ``limit`` bytes (the rest is not read)."""
    return req.bounded_stream.read(limit) if req.content_length != 0 else b""


def _depth(value: Any, level: int = 1) -> int:
    if isinstance(value, dict):
        return max([level, *(_depth(v, level + 1) for v in value.values())])
    if isinstance(value, list):
        return max([level, *(_depth(v, level + 1) for v in value)])
    return level


def read_json_object(req: falcon.Request) -> dict[str, Any]:
    """Parse the body as a JSON object under vmpooler's rules.

    Empty body → ``{}``. Raises :class:`ApiError` 400 with ``{"ok": false, "error": ...}``
    for a body over 10240 bytes, invalid JSON, a non-object, or nesting deeper than 5.
    """
    raw = read_raw(req, MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise ApiError(400, {"ok": False, "error": "Request body too large"})
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ApiError(400, {"ok": False, "error": f"Invalid JSON: {exc}"}) from None
    if not isinstance(value, dict):
        raise ApiError(400, {"ok": False, "error": "Request body must be a JSON object"})
    if _depth(value) > MAX_DEPTH:
        raise ApiError(400, {"ok": False, "error": "Request body too complex"})
    return value
