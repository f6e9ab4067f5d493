"""``vmpooler manager`` and a 2-worker ``vmpooler api`` as real processes on one
configuration, for the process tests of several users (quotas, fair shares), and their HTTP
client with a token or Basic credentials."""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.harness import wait_until
from tests.test_manager_process import spawn
from vmpooler.actors.storage.embedded_redis import free_port

__all__ = ["api_and_manager", "http"]


def http(method: str, url: str, body: Any = None, token: str | None = None,
         basic: str | None = None) -> tuple[int, Any]:
    """The status and JSON body of one request (``X-AUTH-TOKEN`` ``token``, or Basic
    ``user:password`` ``basic``)."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["X-AUTH-TOKEN"] = token
    if basic:
        headers["Authorization"] = "Basic " + base64.b64encode(basic.encode()).decode()
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


@contextmanager
def api_and_manager(tmp_path: Path, config: Path) -> Iterator[str]:
    """The API's base URL once it answers; both processes are stopped after. Run with
    ``VMPOOLER_DEBUG`` (the dummy auth provider is refused without it); logs in
    ``tmp_path`` (``manager.log``, ``api.log``)."""
    port = free_port()
    started: list[subprocess.Popen[str]] = []
    debug = {"VMPOOLER_DEBUG": "1"}
    spawn(started, "manager", "--config", str(config), log=tmp_path / "manager.log", env=debug)
    spawn(started, "api", "--config", str(config), "--bind", f"127.0.0.1:{port}",
          "--workers", "2", log=tmp_path / "api.log", env=debug)
    url = f"http://127.0.0.1:{port}/api/v3"

    def answering() -> bool:
        try:
            return http("GET", f"{url}/vm")[0] == 200
        except OSError:
            return False

    try:
        wait_until(answering, 30, "the API to answer")
        yield url
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
