"""The API's gunicorn worker: requests are read whole before a thread takes them.

gunicorn's ``gthread`` worker gives each new connection to a thread, which then reads the
request with blocking reads that have no deadline once a first byte came: a handful of
clients sending one header line every few seconds held every thread and the API stopped
answering. :class:`GuardedThreadWorker` keeps gthread's thread pool and request handling
but reads in its event loop, as Puma does (see docs/security.md):

* a new or kept-alive connection waits in the selector; its bytes go to a
  :class:`~vmpooler.web.intake.RequestIntake` until the request (head and body) is whole,
  and only then is it handed to a thread, its bytes already read;
* every request must arrive within ``read_timeout`` seconds of its first byte (a new
  connection: of its opening); late ones are answered 408 and closed;
* a kept-alive connection may idle ``keepalive_timeout`` seconds between requests;
* a thread's blocking sends and receives time out after ``write_timeout`` seconds without
  progress (kernel ``SO_SNDTIMEO``/``SO_RCVTIMEO``), so a client that does not take its
  response frees the thread;
* at most ``max_connections`` connections per worker, and at most ``max_buffered`` bytes of
  unfinished requests: beyond, the connection waiting longest is closed to make room (503
  when every connection is busy in a thread);
* a connection is closed gracefully (FIN, then its unread bytes drained) from the event
  loop, never by blocking it.

Everything refused is counted through the application's ``connection_observer`` (see
:mod:`vmpooler.web.connections`), under one of its ``REASONS``, and summed in one log line a
minute. The worker serves HTTP/1.x without TLS, as ``vmpooler run`` and ``api`` configure
gunicorn; it relies on gunicorn 27's ``gthread`` internals (pinned in pyproject.toml).
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import itertools
import selectors
import socket
import ssl
import struct
import time
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn.workers.gthread import TConn, ThreadWorker

from vmpooler.web.connections import ConnectionLimits, RefusalReport, error_response
from vmpooler.web.intake import Refusal, RequestIntake, Verdict

__all__ = ["GuardedThreadWorker"]

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_READ_SIZE = 65536
_LINGER_SECONDS = 2.0
_LINGER_BYTES = 65536


class _Conn(TConn):  # type: ignore[misc]
    """A client connection and where it stands in the event loop."""

    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any) -> None:
        super().__init__(cfg, sock, client, server)
        self.intake: RequestIntake | None = None
        self.prebuffer = b""
        self.deadline = 0.0
        self.timer = -1  # the sequence number of its live timer, -1 for none
        self.served = 0  # requests answered on this connection
        self.lingering = False
        self.drain_left = 0  # bytes a lingering connection may still send


class GuardedThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gunicorn's threaded worker with whole-request reading in the event loop.

    The application object may carry ``connection_limits``
    (:class:`~vmpooler.web.connections.ConnectionLimits`) and ``connection_observer``
    (:class:`~vmpooler.web.connections.ConnectionObserver`); both are optional.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits = getattr(self.app, "connection_limits", None)
        self.limits: ConnectionLimits = limits or ConnectionLimits()
        self.worker_connections = self.limits.max_connections
        self._waiting: dict[_Conn, None] = {}  # reading or lingering; oldest first
        self._timers: list[tuple[float, int, _Conn]] = []
        self._sequence = itertools.count()
        self._buffered = 0
        self._report = RefusalReport(getattr(self.app, "connection_observer", None),
                                     time.monotonic())

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> None:
        self.poller.register(self.method_queue.fileno(), selectors.EVENT_READ,
                             self.method_queue.run_callbacks)
        self.set_accept_enabled(True)
        while self.alive:
            self.notify()
            self.wait_for_and_dispatch_events(timeout=self._wait_time())
            if not self.is_parent_alive():
                break
            self._expire(time.monotonic())
            self._tick(time.monotonic())
        self._stop()

    def _wait_time(self) -> float:
        if not self._timers:
            return 1.0
        return max(0.0, min(1.0, self._timers[0][0] - time.monotonic()))

    def _stop(self) -> None:
        """Stop accepting; close idle connections now; give requests under way and those
        in threads up to ``graceful_timeout``."""
        self.set_accept_enabled(False)
        for conn in list(self._waiting):
            if conn.lingering or conn.intake is None or not conn.intake.started:
                self._close(conn)
        deadline = time.monotonic() + self.cfg.graceful_timeout
        while self.nr_conns > 0 and time.monotonic() < deadline:
            self.notify()
            self.wait_for_and_dispatch_events(timeout=self._wait_time())
            self._expire(time.monotonic())
        for conn in list(self._waiting):
            self._close(conn)
        self._tick(time.monotonic(), force=True)
        self.tpool.shutdown(wait=False)
        self.poller.close()
        self.method_queue.close()
        for listener in self.sockets:
            listener.close()

    # -- accepting -----------------------------------------------------------------------
    def accept(self, listener: socket.socket) -> None:
        """Accept one connection; at the cap, make room or refuse it with a 503."""
        try:
            sock, client = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        if not self._make_room():
            self._count("over_capacity")
            _send_quietly(sock, error_response(503, "Service Unavailable",
                                               "too many connections"))
            _close_quietly(sock)
            return
        self.nr_conns += 1
        _bound_blocking_calls(sock, self.limits.write_timeout)
        conn = _Conn(self.cfg, sock, client, listener.getsockname())
        self._read(conn, b"", time.monotonic() + self.limits.read_timeout)

    def _make_room(self) -> bool:
        """Below the cap again, closing the connection that has been waiting longest if
        need be; False if every connection is busy in a thread.

        A connection whose request is waiting unread in the kernel is read first: if that
        completes it, it goes to a thread and the next one is considered."""
        while self.nr_conns >= self.worker_connections:
            if not self._waiting:
                return False
            conn = next(iter(self._waiting))
            if not conn.lingering:
                self._readable(conn, None)
                if conn not in self._waiting or conn.lingering:
                    continue  # dispatched, gone or refused: look again
                self._count("evicted")
            self._close(conn)
        return True

    def _evict_oldest(self) -> None:
        """Close the connection that has been waiting longest (unfinished requests hold
        more than ``max_buffered`` bytes)."""
        conn = next(iter(self._waiting))
        if not conn.lingering:
            self._count("evicted")
        self._close(conn)

    # -- reading -------------------------------------------------------------------------
    def _read(self, conn: _Conn, initial: bytes, deadline: float) -> None:
        """Wait for ``conn``'s next request (``initial``: bytes of it already read)."""
        conn.intake = RequestIntake(self.limits.intake)
        conn.lingering = False
        self._waiting[conn] = None
        try:
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._readable, conn))
        except (OSError, ValueError, KeyError):
            self._close(conn)
            return
        self._arm(conn, deadline)
        if initial:
            self._take(conn, initial, time.monotonic())

    def _readable(self, conn: _Conn, _sock: Any) -> None:
        if conn not in self._waiting or conn.lingering:
            return  # a stale event of this select batch: the connection moved on
        try:
            data = conn.sock.recv(_READ_SIZE, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return
        self._take(conn, data, time.monotonic())

    def _take(self, conn: _Conn, data: bytes, now: float) -> None:
        intake = conn.intake
        assert intake is not None
        first = not intake.started
        verdict = intake.feed(data)
        self._buffered += len(data)
        if verdict is Verdict.COMPLETE:
            self._dispatch(conn)
            return
        if verdict is Verdict.REFUSED:
            assert intake.refusal is not None
            self._refuse(conn, intake.refusal,
                         "too_large" if intake.refusal.status in (413, 414, 431) else "malformed")
            return
        if verdict is Verdict.CONTINUE:
            _send_quietly(conn.sock, _CONTINUE)
        if first:
            self._arm(conn, now + self.limits.read_timeout)
        while self._buffered > self.limits.max_buffered and self._waiting:
            self._evict_oldest()

    def _dispatch(self, conn: _Conn) -> None:
        """The request is whole: hand the connection to a thread."""
        assert conn.intake is not None
        self._forget(conn)
        conn.prebuffer = conn.intake.take()
        conn.intake = None
        with contextlib.suppress(OSError, ValueError, KeyError):
            self.poller.unregister(conn.sock)
        self.enqueue_req(conn)

    # -- in a thread ---------------------------------------------------------------------
    def handle(self, conn: _Conn) -> bool:
        """Serve the request read for ``conn`` (runs in a pool thread). True: keep alive."""
        req = None
        try:
            conn.init()
            if conn.prebuffer:
                conn.parser.unreader.unread(conn.prebuffer)
                conn.prebuffer = b""
            req = next(conn.parser)
            if not req:
                return False
            return bool(self._keepalive_after(conn, self.handle_request(req, conn)))
        except http.errors.NoMoreData as exc:
            self.log.debug("Ignored premature client disconnection. %s", exc)
        except StopIteration as exc:
            self.log.debug("Closing connection. %s", exc)
        except (TimeoutError, BlockingIOError):  # SO_SNDTIMEO (or SO_RCVTIMEO) ran out
            self.method_queue.defer(self._count, "write_timeout")
        except ssl.SSLError as exc:  # pragma: no cover - TLS is not configured
            self.handle_error(req, conn.sock, conn.client, exc)
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF):
                self.log.exception("Socket error processing request.")
        except Exception as exc:
            self.handle_error(req, conn.sock, conn.client, exc)
        return False

    def finish_request(self, conn: _Conn, fs: Any) -> None:
        """Back on the loop: wait for the connection's next request, or close it."""
        try:
            keep = (not fs.cancelled()) and bool(fs.result())
        except Exception:
            keep = False
        if not keep or not self.alive:
            self._linger(conn)
            return
        conn.served += 1
        try:
            leftover = conn.parser.unreader.take_buffered()
            conn.sock.setblocking(False)
        except OSError:
            self._close(conn)
            return
        deadline = time.monotonic() + (self.limits.read_timeout if leftover
                                       else self.limits.keepalive_timeout)
        self._read(conn, leftover, deadline)

    # -- refusing and closing ---------------------------------------------------------------
    def _refuse(self, conn: _Conn, refusal: Refusal, reason: str) -> None:
        self._count(reason)
        _send_quietly(conn.sock, error_response(refusal.status, refusal.reason,
                                                refusal.message))
        self._linger(conn)

    def _linger(self, conn: _Conn) -> None:
        """Close gracefully: FIN now, then drain what the client still sends (at most
        ``_LINGER_BYTES`` for ``_LINGER_SECONDS``), so it reads the answer, not a reset."""
        self._forget(conn)
        conn.intake = None
        try:
            conn.sock.setblocking(False)
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.lingering = True
        conn.drain_left = _LINGER_BYTES
        self._waiting[conn] = None
        try:
            self.poller.modify(conn.sock, selectors.EVENT_READ, partial(self._drain, conn))
        except KeyError:
            try:
                self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._drain, conn))
            except (OSError, ValueError, KeyError):
                self._close(conn)
                return
        except (OSError, ValueError):
            self._close(conn)
            return
        self._arm(conn, time.monotonic() + _LINGER_SECONDS)

    def _drain(self, conn: _Conn, _sock: Any) -> None:
        if conn not in self._waiting or not conn.lingering:
            return  # a stale event of this select batch
        try:
            data = conn.sock.recv(_READ_SIZE, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        conn.drain_left -= len(data)
        if not data or conn.drain_left <= 0:
            self._close(conn)

    def _close(self, conn: _Conn) -> None:
        """Close ``conn`` now and stop counting it."""
        self._forget(conn)
        with contextlib.suppress(OSError, ValueError, KeyError):
            self.poller.unregister(conn.sock)
        _close_quietly(conn.sock)
        self.nr_conns -= 1

    def _forget(self, conn: _Conn) -> None:
        """Take ``conn`` out of the waiting set, its timer and the buffered bytes."""
        if self._waiting.pop(conn, False) is None and conn.intake is not None:
            self._buffered -= len(conn.intake)
        conn.timer = -1

    # -- deadlines -----------------------------------------------------------------------
    def _arm(self, conn: _Conn, deadline: float) -> None:
        conn.deadline = deadline
        conn.timer = next(self._sequence)
        heapq.heappush(self._timers, (deadline, conn.timer, conn))

    def _expire(self, now: float) -> None:
        while self._timers and self._timers[0][0] <= now:
            _, timer, conn = heapq.heappop(self._timers)
            if timer != conn.timer or conn not in self._waiting:
                continue  # dispatched, re-armed or closed since
            if conn.lingering:
                self._close(conn)
            elif conn.intake is not None and conn.intake.started:
                self._refuse(conn, Refusal(408, "Request Timeout",
                                           f"the request did not arrive within "
                                           f"{self.limits.read_timeout:g} s"), "read_timeout")
            else:
                if conn.served == 0:
                    self._count("idle_timeout")
                self._close(conn)

    # -- reporting -----------------------------------------------------------------------
    def _count(self, reason: str) -> None:
        self._report.count(reason)

    def _tick(self, now: float, *, force: bool = False) -> None:
        self._report.tick(now, self.nr_conns, force=force)


def _bound_blocking_calls(sock: socket.socket, seconds: float) -> None:
    """Give each blocking send and receive on ``sock`` a kernel timeout (``SO_SNDTIMEO``,
    ``SO_RCVTIMEO``): a thread writing to a client that takes nothing gets ``EAGAIN`` after
    ``seconds`` instead of waiting for ever. Unlike ``settimeout``, this adds no ``poll``
    before every call (that cost 7 % of the throughput of a small app)."""
    whole = int(seconds)
    value = struct.pack("ll", whole, int((seconds - whole) * 1_000_000))
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    """Send what the socket takes now, never blocking; a client gone is no error."""
    with contextlib.suppress(OSError):
        sock.send(data, socket.MSG_DONTWAIT)


def _close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()
