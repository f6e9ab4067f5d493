"""The manager's probe listener: a small ``ThreadingHTTPServer`` on a daemon thread.

Few clients (the kubelet, Prometheus), so the standard library's server, held short: one
request per connection, its head read within :data:`READ_TIMEOUT` s and
:data:`MAX_REQUEST` bytes, at most :data:`MAX_CONNECTIONS` at once. What it answers is
:class:`~vmpooler.web.cli.probes.ManagerProbes`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import socket
import socketserver
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from vmpooler.actors.config import Config
from vmpooler.web.cli.probes import ManagerProbes, json_answer

__all__ = ["BIND_ENV", "MAX_CONNECTIONS", "MAX_REQUEST", "READ_TIMEOUT", "ProbeServer",
           "add_bind_argument", "listen", "parse_bind", "show_address"]

log = logging.getLogger(__name__)

READ_TIMEOUT = 5.0
"""Seconds a client has to send its request line and headers (and to take the answer)."""
MAX_REQUEST = 8192
"""Bytes a request's line and headers may take."""
MAX_CONNECTIONS = 16
"""Connections served at once; more are closed unanswered."""

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
    """The listener: a ``ThreadingHTTPServer`` on a daemon thread, answering from a
    :class:`ManagerProbes`.

    Callers may rely on: :meth:`start` has bound the address when it returns, or raised
    ``OSError`` (port in use, an address not of this host, a name that does not resolve);
    one request per connection, whose line and headers must arrive within
    ``read_timeout`` s in :data:`MAX_REQUEST` bytes (else the connection is closed, or
    answered 431); :data:`MAX_CONNECTIONS` at a time; requests are logged at debug only;
    :meth:`stop` is idempotent and waits for no client.
    """

    def __init__(self, probes: ManagerProbes, address: tuple[str, int], *,
                 read_timeout: float = READ_TIMEOUT) -> None:
        self.probes = probes
        self.requested = address
        self.read_timeout = read_timeout
        self._server: _Server | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound address (the port chosen when 0 was asked for)."""
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> ProbeServer:
        """Bind and serve in the background; returns self."""
        family = socket.AF_INET6 if ":" in self.requested[0] else socket.AF_INET
        self._server = _Server(self.requested, family, self.probes, self.read_timeout)
        threading.Thread(target=self._server.serve_forever, name="vmpooler-probes",
                         daemon=True).start()
        return self

    def __enter__(self) -> ProbeServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop listening and release the probes' Redis connections."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        self.probes.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # server_close() waits for no client
    request_queue_size = 64  # the listen backlog (socketserver's 5 delays a burst by seconds)

    def __init__(self, address: tuple[str, int], family: int, probes: ManagerProbes,
                 read_timeout: float) -> None:
        self.address_family = family
        self.probes = probes
        self.read_timeout = read_timeout
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, _Handler)

    def server_bind(self) -> None:  # HTTPServer's would look the host's name up in DNS
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("[manager] probe connection from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def version_string(self) -> str:
        return "vmpooler"

    def handle(self) -> None:
        try:
            head = _read_head(self.connection, MAX_REQUEST, self.server.read_timeout)
        except OSError as exc:  # TimeoutError included: a stalled or trickling client
            log.debug("[manager] probe request from %s not read: %s", self.client_address, exc)
            return
        self.connection.settimeout(self.server.read_timeout)
        if head is None:
            self.command, self.request_version, self.requestline = "", "HTTP/1.0", ""
            self._send(*json_answer(431, {"ok": False, "error": "request too large"}))
            _drain(self.connection, self.server.read_timeout)
            return
        self.rfile.close()
        self.rfile = io.BytesIO(head)
        self.handle_one_request()

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.command not in ("GET", "HEAD"):
            self._send(*json_answer(405, {"ok": False, "error": "method not allowed"}))
            return False
        return True

    def do_GET(self) -> None:
        try:
            answer = self.server.probes.answer(self.path)
        except Exception as exc:  # a probe answers, whatever went wrong
            log.warning("[!] [manager] probe %s failed: %s", self.path, exc)
            answer = json_answer(500, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
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


def _read_head(sock: socket.socket, limit: int, seconds: float) -> bytes | None:
    """The request line and headers (and whatever came with them), None when more than
    ``limit`` bytes come first; ``TimeoutError`` unless they end within ``seconds``."""
    deadline = time.monotonic() + seconds
    data = b""
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        if len(data) > limit:
            return None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"request head not received within {seconds:g} s")
        sock.settimeout(remaining)
        chunk = sock.recv(limit + 1 - len(data))
        if not chunk:  # the client is done: what came is all there is
            break
        data += chunk
    return data


def _drain(sock: socket.socket, seconds: float, limit: int = 65536) -> None:
    """Read and drop what the client still sends (``limit`` bytes, ``seconds`` at most):
    closing with unread data would reset the connection, and the client lose the answer."""
    deadline = time.monotonic() + seconds
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
        while limit > 0 and (remaining := deadline - time.monotonic()) > 0:
            sock.settimeout(remaining)
            chunk = sock.recv(min(limit, 4096))
            if not chunk:
                break
            limit -= len(chunk)
