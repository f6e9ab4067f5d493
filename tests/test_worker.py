"""The API's gunicorn worker (web/worker.py) under slow, idle, stalled and oversized clients.

Each test serves :mod:`tests.worker_app` with :class:`GuardedThreadWorker` in a real
gunicorn process (one worker, few threads) and speaks raw HTTP to it over loopback. "Within
a second" is a client socket timeout, not a measurement: the answer either comes or the
test fails.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.harness import wait_until
from vmpooler.actors.storage.embedded_redis import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def served(tmp_path: Path, **options: object) -> Iterator[int]:
    """Serve the test app; yields its port."""
    port = free_port()
    args = [sys.executable, "-m", "tests.worker_app", str(port),
            "--release", str(tmp_path / "release")]
    for name, value in options.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    log = open(tmp_path / "worker.log", "a")  # noqa: SIM115 - closed below
    process = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _answers(port) or process.poll() is not None, 20, "the app")
        assert process.poll() is None, (tmp_path / "worker.log").read_text()
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
    assert "Traceback" not in (tmp_path / "worker.log").read_text()


def _answers(port: int) -> bool:
    """Whether ``GET /`` is answered within a second (on a connection the server closes,
    so that none is left waiting in it)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            return closed_by_server(sock, timeout=1).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def exchange(port: int, data: bytes, *, timeout: float = 1.0) -> bytes:
    """Send ``data`` on a new connection and read the first answer whole."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_answer(sock)


def read_answer(sock: socket.socket) -> bytes:
    """One answer (head and ``Content-Length`` body), or what came before the peer closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


class AnswerReader:
    """Answers read one at a time from a connection whose answers may arrive together (a
    pipelined exchange): bytes past one answer are kept for the next."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def next(self) -> bytes:
        while b"\r\n\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                data, self.buffer = self.buffer, b""
                return data
            self.buffer += chunk
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        self.buffer = rest[length:]
        return head + b"\r\n\r\n" + rest[:length]


def open_many(port: int, count: int, payload: bytes) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        if payload:
            sock.sendall(payload)
        sockets.append(sock)
    return sockets


def counts(port: int) -> dict[str, int]:
    answer = exchange(port, b"GET /counts HTTP/1.1\r\nHost: t\r\n\r\n", timeout=5)
    return json.loads(answer.partition(b"\r\n\r\n")[2])


def closed_by_server(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Everything the server sends until it closes ``sock`` (fails if it does not). A
    server closing a connection whose input it did not read makes the kernel reset it:
    that is a close too."""
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def close_all(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        sock.close()


STALLED = {
    "silent": b"",
    "half a head": b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: 1\r\n",
    "half a body": b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n{",
    "half a chunked body": b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked"
                           b"\r\n\r\n10\r\nabc",
}


@pytest.mark.parametrize("kind", list(STALLED))
def test_stalled_clients_hold_no_thread(tmp_path: Path, kind: str) -> None:
    with served(tmp_path, threads=1) as port:
        held = open_many(port, 50, STALLED[kind])
        try:
            for _ in range(3):
                assert exchange(port, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").startswith(
                    b"HTTP/1.1 200")
        finally:
            close_all(held)


def test_a_late_request_is_answered_408_and_counted(tmp_path: Path) -> None:
    with served(tmp_path, read_timeout=0.5) as port:
        late = open_many(port, 1, STALLED["half a head"])[0]
        silent = open_many(port, 1, b"")[0]
        answer = closed_by_server(late)
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        assert json.loads(answer.partition(b"\r\n\r\n")[2]) == {
            "ok": False, "error": "Request Timeout: the request did not arrive within 0.5 s"}
        assert closed_by_server(silent) == b""
        wait_until(lambda: counts(port) == {"read_timeout": 1, "idle_timeout": 1}, 5,
                   "both to be counted")


def test_a_kept_alive_connection_idles_for_the_keepalive_timeout(tmp_path: Path) -> None:
    with served(tmp_path, keepalive_timeout=0.5, read_timeout=30) as port, \
            socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        for _ in range(2):
            sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            assert read_answer(sock).endswith(b"\r\n\r\nok")
        assert closed_by_server(sock) == b""
        assert counts(port) == {}  # an idle kept-alive connection is no refusal


def test_at_the_cap_the_longest_waiting_connection_makes_room(tmp_path: Path) -> None:
    with served(tmp_path, max_connections=5) as port:
        held = open_many(port, 5, b"")
        try:
            assert exchange(port, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").startswith(
                b"HTTP/1.1 200")
            assert closed_by_server(held[0]) == b""
            assert counts(port)["evicted"] >= 1
        finally:
            close_all(held)


def test_over_capacity_with_every_connection_busy_is_answered_503(tmp_path: Path) -> None:
    with served(tmp_path, max_connections=2, threads=2) as port:
        busy = open_many(port, 2, b"GET /hold HTTP/1.1\r\nHost: t\r\n\r\n")
        try:
            refused = exchange(port, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n", timeout=5)
            assert refused.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
            assert b"too many connections" in refused
            (tmp_path / "release").touch()
            for sock in busy:
                assert read_answer(sock).startswith(b"HTTP/1.1 200")
            assert counts(port)["over_capacity"] == 1
        finally:
            close_all(busy)


def test_a_client_that_takes_no_response_frees_its_thread(tmp_path: Path) -> None:
    with served(tmp_path, threads=1, write_timeout=1) as port:
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.connect(("127.0.0.1", port))
        try:
            reader.sendall(b"GET /big?mb=64 HTTP/1.1\r\nHost: t\r\n\r\n")
            wait_until(lambda: _answers(port), 10, "the thread to be free again")
            assert counts(port) == {"write_timeout": 1}
        finally:
            reader.close()


def test_connections_closing_never_block_the_loop(tmp_path: Path) -> None:
    with served(tmp_path, threads=1) as port:
        closing = open_many(port, 20, b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        try:
            assert exchange(port, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").startswith(
                b"HTTP/1.1 200")
        finally:
            close_all(closing)


def test_framing_over_the_wire(tmp_path: Path) -> None:
    with served(tmp_path, threads=1, max_body=1000) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                         b"Expect: 100-continue\r\n\r\n")
            assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
            sock.sendall(b"hello")
            answer = read_answer(sock)
            assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello")
            assert b"100 Continue" not in answer
        chunked = exchange(port, b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: "
                                 b"chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: 1\r\n\r\n")
        assert chunked.endswith(b"\r\n\r\nabcde")
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\none"
                         b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\ntwo"
                         b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nth")
            answers = AnswerReader(sock)  # the two answers may come in one read
            assert answers.next().endswith(b"one")
            assert answers.next().endswith(b"two")
            # the third is incomplete: it waits in the loop, the only thread stays free
            assert _answers(port)
            sock.sendall(b"ree")
            assert answers.next().endswith(b"three")
        for payload, status in [
            (b"POST /echo HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", b"413"),
            (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", b"414"),
            (b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * 10000, b"431"),
            (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"400"),
            (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", b"400"),
        ]:
            answer = exchange(port, payload, timeout=5)
            assert answer.startswith(b"HTTP/1.1 " + status), (payload[:40], answer[:80])
            assert json.loads(answer.partition(b"\r\n\r\n")[2])["ok"] is False
        assert counts(port) == {"too_large": 3, "malformed": 2}


def test_unfinished_requests_are_bounded_in_memory(tmp_path: Path) -> None:
    with served(tmp_path, max_buffered=1_000_000, max_body=600_000) as port:
        head = b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 600000\r\n\r\n"
        first = open_many(port, 1, head + b"x" * 400_000)[0]
        wait_until(lambda: counts(port) == {}, 5)  # the first is read
        second = open_many(port, 1, head + b"x" * 400_000)[0]
        third = open_many(port, 1, head + b"x" * 400_000)[0]
        try:
            assert closed_by_server(first) == b""
            wait_until(lambda: counts(port).get("evicted") == 1, 5, "one eviction")
            second.sendall(b"y" * 200_000)
            assert read_answer(second).startswith(b"HTTP/1.1 200")
        finally:
            close_all([first, second, third])
