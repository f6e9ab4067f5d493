"""Small HTTP helpers of the process tests: a request's status and parsed body (0 when
nothing answers), and waiting on a condition with a deadline, saying what was awaited."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from tests.harness import wait_until


def get(url: str, timeout: float = 3.0) -> tuple[int, Any]:
    """GET ``url``: ``(status, parsed JSON or text)``; ``(0, error)`` when nothing answers."""
    return request("GET", url, timeout=timeout)


def request(method: str, url: str, timeout: float = 3.0) -> tuple[int, Any]:
    """One request: ``(status, parsed JSON or text)``; ``(0, error text)`` when no answer."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method),
                                    timeout=timeout) as response:
            return response.status, _body(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, _body(exc.read())
    except (OSError, urllib.error.URLError) as exc:
        return 0, str(exc)


def _body(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def eventually(condition: Callable[[], Any], timeout: float, what: str,
               explain: Callable[[], str] = lambda: "") -> Any:
    """``condition()``'s first truthy value, asked every 0.2 s; fails after ``timeout`` s
    with ``what`` and ``explain()`` (say, a container's log)."""
    return wait_until(condition, timeout, what, every=0.2, explain=explain)


def pools_full(base_url: str) -> dict[str, tuple[int, int]] | None:
    """Each pool's (ready, size) when every pool of ``/api/v3/status`` is full, else None."""
    status, body = get(f"{base_url}/api/v3/status")
    if status != 200 or not isinstance(body, dict) or not body.get("pools"):
        return None
    pools = {name: (pool["ready"], pool["max"]) for name, pool in body["pools"].items()}
    return pools if all(ready >= size for ready, size in pools.values()) else None
