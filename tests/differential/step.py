"""One request of the differential sequence, sent alike to both APIs.

``path`` and ``token`` may name values captured earlier from the same side's answers as
``{name}`` (a token the API generated, a request id, ...). ``seed``
runs on both Redis servers before the request and is not part of what the request changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

__all__ = ["Seed", "Step", "delete", "get", "post", "put"]

Seed = Callable[[redis.Redis], None]


@dataclass(frozen=True)
class Step:
    """A request. ``body`` is sent as JSON, ``raw`` as is (``raw`` wins); ``capture`` maps a
    name to the dotted path of a value in the JSON answer (``token``, ``{vm}.snapshot``);
    ``either`` lists answers of a random choice that count as the same (each reads
    ``<either>``); ``compare_body=False`` compares the status alone (HTML pages); ``headers``
    names response headers to compare too (case-insensitive; an absent one reads
    ``<absent>``, times are compared as :mod:`tests.differential.runner` describes)."""

    id: str
    method: str
    path: str
    body: Any = None
    raw: bytes | None = None
    token: str | None = None
    basic: tuple[str, str] | None = None
    seed: Seed | None = None
    capture: Mapping[str, str] = field(default_factory=dict)
    either: tuple[str, ...] = ()
    compare_body: bool = True
    headers: tuple[str, ...] = ()

    def payload(self) -> bytes | None:
        """The body to send."""
        if self.raw is not None:
            return self.raw
        if self.body is None:
            return None
        return json.dumps(self.body).encode()

    def resolved_path(self, captured: Mapping[str, str]) -> str:
        return self.path.format_map(captured)

    def resolved_token(self, captured: Mapping[str, str]) -> str | None:
        return None if self.token is None else self.token.format_map(captured)


def get(id: str, path: str, **kw: Any) -> Step:
    return Step(id, "GET", path, **kw)


def post(id: str, path: str, body: Any = None, **kw: Any) -> Step:
    return Step(id, "POST", path, body, **kw)


def put(id: str, path: str, body: Any = None, **kw: Any) -> Step:
    return Step(id, "PUT", path, body, **kw)


def delete(id: str, path: str, **kw: Any) -> Step:
    return Step(id, "DELETE", path, **kw)
