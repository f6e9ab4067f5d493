"""Query parameters of the status and summary routes, read as Rack reads them."""

from __future__ import annotations

from urllib.parse import unquote_plus

import falcon

__all__ = ["query_params"]


def query_params(req: falcon.Request) -> dict[str, str | None]:
    """Query parameters as Rack sees them: ``name`` alone is None, ``name=`` is ``""``.

    The last occurrence of a name wins.
    """
    params: dict[str, str | None] = {}
    for part in req.query_string.split("&"):
        if not part:
            continue
        name, sep, value = part.partition("=")
        params[unquote_plus(name)] = unquote_plus(value) if sep else None
    return params
