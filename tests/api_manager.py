"""vmpooler's processes for the process tests: ``vmpooler manager`` and a 2-worker
``vmpooler api`` as real processes on one configuration, each stopped after its test, and
their HTTP client (a token or Basic credentials; the status, headers and JSON body).

* :func:`stopped_after`: a list to start processes into (:func:`spawn` for a ``vmpooler``
  command); every one of them is stopped on exit.
* :func:`start_api`: ``vmpooler api`` on a free loopback port, and its base URL.
* :func:`api_and_manager_stack`: both, once the API answers; :func:`api_and_manager` its URL.
"""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness import wait_until
from tests.test_manager_process import spawn
from vmpooler.actors.storage.embedded_redis import free_port

__all__ = ["Stack", "api_and_manager", "api_and_manager_stack", "exchange", "http", "spawn",
           "start_api", "status_code", "stopped_after"]

DEBUG = {"VMPOOLER_DEBUG": "1"}
"""The environment that lets a configuration use the dummy auth provider."""


def exchange(method: str, url: str, body: Any = None, *, token: str | None = None,
             basic: str | None = None, timeout: float = 10) -> tuple[int, dict[str, str], Any]:
    """The status, headers (names in lower case) and JSON body of one request
    (``X-AUTH-TOKEN`` ``token``, or Basic ``user:password`` ``basic``); ``OSError`` when
    nothing answers within ``timeout`` seconds."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["X-AUTH-TOKEN"] = token
    if basic:
        headers["Authorization"] = "Basic " + base64.b64encode(basic.encode()).decode()
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, _lower(answer.headers.items()), json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, _lower(error.headers.items()), json.load(error)


def _lower(headers: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in headers}


def http(method: str, url: str, body: Any = None, token: str | None = None,
         basic: str | None = None, *, timeout: float = 10) -> tuple[int, Any]:
    """The status and JSON body of one request (see :func:`exchange`)."""
    status, _, answer = exchange(method, url, body, token=token, basic=basic, timeout=timeout)
    return status, answer


def status_code(url: str, *, timeout: float = 20) -> int:
    """The status of ``GET url``, 0 when nothing answers."""
    try:
        return exchange("GET", url, timeout=timeout)[0]
    except OSError:
        return 0


@contextmanager
def stopped_after() -> Iterator[list[subprocess.Popen[Any]]]:
    """A list to start processes into (:func:`spawn`, or any ``Popen``); on exit each one
    still running gets SIGTERM, then up to 20 s to exit before SIGKILL."""
    started: list[subprocess.Popen[Any]] = []
    try:
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                process.terminate()
        for process in started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def start_api(started: list[subprocess.Popen[Any]], config: Path, *, log: Path,
              env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """``vmpooler api`` with 2 workers on a free loopback port, its output in ``log``, put
    in ``started``; the process and its base URL (``.../api/v3``). It may not answer yet."""
    port = free_port()
    api = spawn(started, "api", "--config", str(config), "--bind", f"127.0.0.1:{port}",
                "--workers", "2", log=log, env=env)
    return api, f"http://127.0.0.1:{port}/api/v3"


@dataclass(frozen=True)
class Stack:
    """A running manager and API: the API's base URL (``.../api/v3``), its root (where
    ``/prometheus`` is) and both processes."""

    url: str
    root: str
    manager: subprocess.Popen[str]
    api: subprocess.Popen[str]


@contextmanager
def api_and_manager_stack(tmp_path: Path, config: Path, *, debug: bool = True,
                          env: dict[str, str] | None = None) -> Iterator[Stack]:
    """``vmpooler manager``, then a 2-worker ``vmpooler api``, both on ``config`` (and
    ``env`` added to the environment), given once the API answers ``GET /vm``; both are
    stopped after. With ``debug``, run with ``VMPOOLER_DEBUG`` (the dummy auth provider is
    refused without it); logs in ``tmp_path`` (``manager.log``, ``api.log``)."""
    env = {**(DEBUG if debug else {}), **(env or {})} or None
    with stopped_after() as started:
        manager = spawn(started, "manager", "--config", str(config),
                        log=tmp_path / "manager.log", env=env)
        api, url = start_api(started, config, log=tmp_path / "api.log", env=env)

        def answering() -> bool:
            try:
                return http("GET", f"{url}/vm")[0] == 200
            except OSError:
                return False

        wait_until(answering, 30, "the API to answer")
        yield Stack(url=url, root=url.removesuffix("/api/v3"), manager=manager, api=api)


@contextmanager
def api_and_manager(tmp_path: Path, config: Path) -> Iterator[str]:
    """The API's base URL of :func:`api_and_manager_stack` (with ``VMPOOLER_DEBUG``)."""
    with api_and_manager_stack(tmp_path, config) as stack:
        yield stack.url
