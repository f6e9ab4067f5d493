"""The manager's probe listener: one event-loop thread and a few worker threads.

Few legitimate clients (the kubelet, Prometheus), but anyone who reaches the port may open
connections and send nothing. So no thread waits for a client
(:class:`~vmpooler.web.cli.probe_loop.HeadReader`): a connection reaches one of
:data:`WORKERS` threads only once its request line and headers are whole, in
:data:`MAX_REQUEST` bytes and :data:`READ_TIMEOUT` s; up to :data:`MAX_CONNECTIONS`
connections may wait for their head at once, the one waiting longest closed to make room.
One request per connection, answered by the standard library's ``BaseHTTPRequestHandler``
with what :class:`~vmpooler.web.cli.probes.ManagerProbes` says.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import socket
import socketserver
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any

from vmpooler.actors.config import Config
from vmpooler.web.cli.probe_loop import Head, HeadReader
from vmpooler.web.cli.probes import ManagerProbes, json_answer

__all__ = ["BIND_ENV", "MAX_BUSY", "MAX_CONNECTIONS", "MAX_REQUEST", "READ_TIMEOUT", "WORKERS",
           "ProbeServer", "add_bind_argument", "listen", "parse_bind", "show_address"]

log = logging.getLogger(__name__)

READ_TIMEOUT = 5.0
"""Seconds a client has to send its request line and headers (and to take the answer)."""
MAX_REQUEST = 8192
"""Bytes a request's line and headers may take."""
MAX_CONNECTIONS = 1000
"""Connections that may wait for their request head at once; beyond, the one waiting
longest is closed."""
WORKERS = 4
"""Threads answering whole requests."""
MAX_BUSY = 64
"""Whole requests that may wait for a worker; beyond, a new one is closed unanswered."""

BIND_ENV = "VMPOOLER_MANAGER_BIND"
"""The environment variable naming the listen address when ``--bind`` is not given."""


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:4567`` for IPv6) as ``(host, port)``; an argparse type."""
    host, sep, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        host = ""
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT (e.g. 0.0.0.0:4567; also ${BIND_ENV}), got {text!r}")
    return host, int(port)


def show_address(address: tuple[str, int]) -> str:
    """``host:port``, an IPv6 host in brackets."""
    host, port = address[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def add_bind_argument(parser: argparse.ArgumentParser) -> None:
    """``--bind HOST:PORT`` (``args.probe_address``, None when neither it nor
    :data:`BIND_ENV` is given)."""
    parser.add_argument("--bind", dest="probe_address", metavar="HOST:PORT", type=parse_bind,
                        default=os.environ.get(BIND_ENV) or None,
                        help="serve /healthcheck, /ready and Prometheus metrics on this "
                             f"address (default: ${BIND_ENV}; none when unset)")


def listen(config: Config, address: tuple[str, int]) -> ProbeServer:
    """The started listener of a manager of ``config`` (logged); ``OSError`` when
    ``address`` cannot be bound. Attach the system once started:
    ``server.probes.attach(system)``."""
    server = ProbeServer(ManagerProbes(config), address).start()
    log.info("[*] [manager] probes on %s", show_address(server.address))
    return server


class ProbeServer:
    """The listener, answering from a :class:`ManagerProbes`.

    Callers may rely on: :meth:`start` has bound the address when it returns, or raised
    ``OSError`` (port in use, an address not of this host, a name that does not resolve);
    one request per connection, whose line and headers must arrive within
    ``read_timeout`` s in :data:`MAX_REQUEST` bytes (else the connection is closed, or
    answered 431); a connection holds no thread until its head is whole, and
    ``max_connections`` may wait at once (the oldest closed beyond); requests are logged
    at debug only; :meth:`stop` is idempotent and waits for no client.
    """

    def __init__(self, probes: ManagerProbes, address: tuple[str, int], *,
                 read_timeout: float = READ_TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.probes = probes
        self.requested = address
        self.read_timeout = read_timeout
        self.max_connections = max_connections
        self._listener: socket.socket | None = None
        self._reader: HeadReader | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound address (the port chosen when 0 was asked for)."""
        assert self._listener is not None, "not started"
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def waiting(self) -> int:
        """Connections open whose request head is not whole yet."""
        return self._reader.waiting if self._reader is not None else 0

    def start(self) -> ProbeServer:
        """Bind and serve in the background; returns self."""
        family = socket.AF_INET6 if ":" in self.requested[0] else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(self.requested)
            listener.listen(128)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        self._reader = HeadReader(listener, self._answer, read_timeout=self.read_timeout,
                                  max_head=MAX_REQUEST, max_open=self.max_connections,
                                  max_busy=MAX_BUSY, workers=WORKERS)
        threading.Thread(target=self._reader.serve, name="vmpooler-probes",
                         daemon=True).start()
        return self

    def __enter__(self) -> ProbeServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop listening and release the probes' Redis connections."""
        reader, self._reader = self._reader, None
        listener, self._listener = self._listener, None
        if reader is not None:
            reader.stop()
        if listener is not None:
            listener.close()
        self.probes.close()

    def _answer(self, head: Head) -> None:
        _Handler(head, self)


class _Handler(BaseHTTPRequestHandler):
    """One request whose head :class:`HeadReader` read; answers on the connection, which
    the caller closes."""

    def __init__(self, head: Head, server: ProbeServer) -> None:
        self.head = head
        peer = head.peer if isinstance(head.peer, tuple) else ("", 0)
        super().__init__(head.sock, peer, server)  # type: ignore[arg-type]

    def setup(self) -> None:
        self.connection = self.request
        self.rfile = io.BytesIO(self.head.data or b"")
        self.wfile = socketserver._SocketWriter(self.connection)  # type: ignore[attr-defined]

    def version_string(self) -> str:
        return "vmpooler"

    def handle(self) -> None:
        if self.head.data is None:
            self.command, self.request_version, self.requestline = "", "HTTP/1.0", ""
            self._send(*json_answer(431, {"ok": False, "error": "request too large"}))
            return
        self.handle_one_request()

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.command not in ("GET", "HEAD"):
            self._send(*json_answer(405, {"ok": False, "error": "method not allowed"}))
            return False
        return True

    def do_GET(self) -> None:
        probes: ManagerProbes = self.server.probes  # type: ignore[attr-defined]
        try:
            answer = probes.answer(self.path, str(self.client_address[0]), self.headers.get)
        except Exception as exc:  # a probe answers, whatever went wrong
            log.warning("[!] [manager] probe %s failed: %s", self.path, exc)
            answer = json_answer(500, {"ok": False, "error": type(exc).__name__})
        self._send(*answer)

    do_HEAD = do_GET  # noqa: N815 - http.server's naming; _send writes no body for HEAD

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        self._send(*json_answer(code, {"ok": False, "error": message or HTTPStatus(code).phrase}))

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if status == 405:
            self.send_header("Allow", "GET, HEAD")
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("[manager] probe from %s: %s", self.address_string(), format % args)
