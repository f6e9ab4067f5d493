"""One HTTP request as the tests send it, and its answer, over plain ``http.client`` (no
redirects followed, no compression asked for, the body kept as bytes)."""

from __future__ import annotations

import base64
import http.client
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Answer", "send"]


@dataclass(frozen=True)
class Answer:
    """An HTTP answer. ``json`` is the parsed body, or None when it is not JSON; ``headers``
    holds every response header by lower-case name, ``received_at`` the epoch time (client
    clock) at which the answer's headers arrived."""

    status: int
    content_type: str
    location: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    received_at: float = 0.0

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    @property
    def is_json(self) -> bool:
        try:
            json.loads(self.body)
        except ValueError:
            return False
        return True


def send(port: int, method: str, path: str, *, body: bytes | None = None,
         token: str | None = None, basic: tuple[str, str] | None = None,
         content_type: str = "application/json", timeout: float = 15) -> Answer:
    """Send one request to ``127.0.0.1:port``; ``token`` goes in ``X-AUTH-TOKEN``, ``basic``
    as HTTP Basic credentials."""
    headers = {"Connection": "close"}
    if body is not None:
        headers["Content-Type"] = content_type
    if token is not None:
        headers["X-AUTH-TOKEN"] = token
    if basic is not None:
        pair = f"{basic[0]}:{basic[1]}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        received_at = time.time()
        headers = {name.lower(): value for name, value in response.getheaders()}
        return Answer(response.status, response.getheader("Content-Type", ""),
                      response.getheader("Location", ""), response.read(), headers,
                      received_at)
    finally:
        connection.close()
