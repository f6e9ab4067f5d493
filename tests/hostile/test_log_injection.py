"""Log injection over TCP: a request cannot forge a log line of a real ``vmpooler run`` or
``vmpooler api``, and a token in a path never reaches the log.

The shared services log every request (``request_logger``) to their log files; the request
logger writes its line before the answer leaves the worker, so the line is in the file when
the answer arrives.
"""

from __future__ import annotations

import base64
import secrets
import socket

import pytest

from tests.harness import wait_until
from tests.hostile.service import Service

pytestmark = pytest.mark.integration

FORGED = "[2026-01-01 00:00:00] forged"
BASIC = {"Authorization": "Basic " + base64.b64encode(b"loguser:pw").decode()}


def forged(text: str) -> list[str]:
    """Lines of ``text`` (split at every Unicode line boundary) that start with the forgery."""
    return [line for line in text.splitlines() if line.startswith(FORGED)]


@pytest.mark.parametrize("separator", ["%0A", "%0D", "%0D%0A", "%E2%80%A8", "%C2%85", "%0B"])
def test_a_line_break_in_the_path_cannot_forge_a_line(service: Service, separator: str) -> None:
    marker = f"inject{secrets.token_hex(4)}"
    path = f"/api/v3/vm/{marker}{separator}{FORGED.replace(' ', '%20')}"
    assert service.request("GET", path).status in (400, 404)
    wait_until(lambda: marker in service.log_text(), 10, "the request's log line")
    text = service.log_text()
    assert forged(text) == []
    line = next(line for line in text.splitlines() if marker in line)
    assert line.startswith("[") and line.endswith(" bytes") and FORGED in line


def test_an_escape_sequence_in_the_path_is_escaped(service: Service) -> None:
    marker = f"escape{secrets.token_hex(4)}"
    service.request("GET", f"/api/v3/{marker}%1B%5B2J%1B%5B31m")
    wait_until(lambda: marker in service.log_text(), 10, "the request's log line")
    assert "\x1b" not in service.log_text()
    assert f"/api/v3/{marker}\\x1b[2J\\x1b[31m, Body:" in service.log_text()


def test_a_token_in_a_path_is_not_logged(service: Service) -> None:
    created = service.request("POST", "/api/v3/token", headers=BASIC)
    assert created.status == 200, created.body
    token = created.json["token"]
    assert service.request("GET", f"/api/v3/token/{token}").status == 200
    assert service.request("GET", f"/api/v3/token/{token}/").status == 200
    assert service.request("DELETE", f"/api/v3/token/{token}", headers=BASIC).status == 200
    wait_until(lambda: service.log_text().count("Path: /api/v3/token/********,") >= 3, 10,
               "the token requests' log lines")
    assert token not in service.log_text()


def test_gunicorns_own_lines_are_escaped_too(service: Service) -> None:
    """A request line gunicorn refuses is logged by gunicorn itself."""
    marker = f"raw{secrets.token_hex(4)}"
    with socket.create_connection((service.host, service.port), timeout=10) as sock:
        sock.sendall(f"GET /{marker}\x1b[2J HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert sock.recv(64).startswith(b"HTTP/1.1 400")
    wait_until(lambda: marker in service.log_text(), 10, "gunicorn's line")
    line = next(line for line in service.log_text().splitlines() if marker in line)
    assert "\x1b" not in line and "\\x1b[2J" in line
