"""Reading request bodies as vmpooler does (reference §1.2), and as its clients send them.

vmfloaty posts JSON with ``Content-Type: application/x-www-form-urlencoded``; we read the raw
bytes as JSON whatever the content type says.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import falcon

from vmpooler.actors.config.overrides import bounded_int
from vmpooler.web.api_errors import ApiError

__all__ = ["MAX_BODY", "MAX_DEPTH", "InvalidJsonError", "depth", "parse_json", "read_json_object",
           "read_raw"]

MAX_BODY = 10240
MAX_DEPTH = 5


class InvalidJsonError(ValueError):
    """The text is not JSON a client could have meant; ``str()`` says why, for the 400 body."""


def read_raw(req: falcon.Request, limit: int = 1 << 20) -> bytes:
    """The request body, at most ``limit`` bytes (the rest is not read)."""
    return req.bounded_stream.read(limit) if req.content_length != 0 else b""


def _nodes(value: Any) -> Iterator[tuple[Any, int]]:
    """Every value, key and container of ``value`` with its nesting level (1 at the top),
    without recursion (a body nested a thousand deep must not exhaust the stack)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        yield item, level
        if isinstance(item, dict):
            stack.extend((k, level + 1) for k in item)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)


def depth(value: Any) -> int:
    """How deeply ``value`` nests: 1 for a scalar or an empty container, 2 for ``[1]``."""
    return max(level for _, level in _nodes(value))


def _integer(digits: str) -> int:
    """A JSON integer, saturated at ``±HUGE`` (10**18) without converting a long digit
    string (Python refuses decimal strings over 4,300 digits)."""
    sign = -1 if digits.startswith("-") else 1
    return sign * bounded_int(digits.lstrip("-"))


def parse_json(text: str) -> Any:
    """``text`` parsed as JSON; raises :class:`InvalidJsonError` for invalid JSON, nesting too deep
    for the parser, and strings (values or keys) holding a lone UTF-16 surrogate such as
    ``"\\ud800"``, which no UTF-8 text (nor Redis, nor a JSON answer) can carry. Integers of
    magnitude 10**18 and beyond read as ``±10**18``: more than any count or size accepted."""
    try:
        value = json.loads(text, parse_int=_integer)
    except RecursionError:
        raise InvalidJsonError("nested too deeply") from None
    except ValueError as exc:
        raise InvalidJsonError(str(exc)) from None
    for item, _ in _nodes(value):
        if isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidJsonError("invalid Unicode: a string holds a lone surrogate "
                                  "(\\ud800-\\udfff)") from None
    return value


def read_json_object(req: falcon.Request) -> dict[str, Any]:
    """Parse the body as a JSON object under vmpooler's rules.

    Empty body → ``{}``. Raises :class:`ApiError` 400 with ``{"ok": false, "error": ...}``
    for a body over 10240 bytes, invalid JSON (or invalid Unicode in it), a non-object, or
    nesting deeper than 5.
    """
    raw = read_raw(req, MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise ApiError(400, {"ok": False, "error": "Request body too large"})
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return {}
    try:
        value = parse_json(text)
    except InvalidJsonError as exc:
        raise ApiError(400, {"ok": False, "error": f"Invalid JSON: {exc}"}) from None
    if not isinstance(value, dict):
        raise ApiError(400, {"ok": False, "error": "Request body must be a JSON object"})
    if depth(value) > MAX_DEPTH:
        raise ApiError(400, {"ok": False, "error": "Request body too complex"})
    return value
