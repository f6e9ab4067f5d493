"""The API's gunicorn worker: no thread ever waits for a client.

gunicorn's ``gthread`` worker gives each new connection to a thread, which then reads the
request with blocking reads that have no deadline once a first byte came: a handful of
clients sending one header line every few seconds held every thread and the API stopped
answering. :class:`GuardedThreadWorker` keeps gthread's thread pool and request handling,
but a thread only ever reads what has already arrived, as Puma does (see docs/security.md):

* a new or kept-alive connection waits in the selector; once bytes come, a thread reads
  them without waiting: a whole request (the usual case) it serves at once; anything less
  goes back to the event loop, which reads the rest into a
  :class:`~vmpooler.web.intake.RequestIntake` and hands the connection to a thread again
  only when the request (head and body) is whole;
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
import selectors
import socket
import ssl
import struct
import time
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn.workers.gthread import TConn, ThreadWorker

from vmpooler.web.connections import ConnectionLimits, RefusalReport, error_response
from vmpooler.web.intake import Refusal, RequestIntake, Verdict, whole_simple_request

__all__ = ["GuardedThreadWorker"]

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_READ_SIZE = 65536
_FIRST_READ = 8192  # gunicorn's own read size: recv allocates what it is asked for
_LINGER_SECONDS = 2.0
_LINGER_BYTES = 65536
_TIMER_GRAIN = 0.05


_Queue = deque[tuple[float, int, "_Conn"]]
"""Deadlines in order: (when, the connection's timer number then, the connection)."""


@dataclass(frozen=True, slots=True)
class _Unread:
    """A thread's answer when the request was not whole in the first read: the verdict on
    what was read (None: nothing was there)."""

    verdict: Verdict | None


class _Conn(TConn):  # type: ignore[misc]
    """A client connection and where it stands in the event loop."""

    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any) -> None:
        super().__init__(cfg, sock, client, server)
        self.intake: RequestIntake | None = None
        self.prebuffer: bytes | None = b""  # None: the thread reads the request itself
        self.deadline = 0.0
        self.timer = 0  # the number of its live deadline (entries with another are void)
        self.queue: _Queue | None = None  # where its live deadline is
        self.on_readable: Any = None  # the loop's callback for it
        self.served = 0  # requests answered on this connection
        self.lingering = False
        self.drain_left = 0  # bytes a lingering connection may still send


class GuardedThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gunicorn's threaded worker whose threads never wait for a client's bytes.

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
        # Deadlines, one queue per delay (a new entry's deadline is never before those
        # already queued, so each queue stays in order); stale entries stay until due.
        self._idle: _Queue = deque()  # keepalive_timeout
        self._reading: _Queue = deque()  # read_timeout
        self._closing: _Queue = deque()  # _LINGER_SECONDS
        self._buffered = 0
        self._report = RefusalReport(getattr(self.app, "connection_observer", None),
                                     time.monotonic())

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> None:
        self.poller.register(self.method_queue.fileno(), selectors.EVENT_READ,
                             self.method_queue.run_callbacks)
        self.set_accept_enabled(True)
        chores_at, wait = 0.0, 0.0
        while self.alive:
            self.wait_for_and_dispatch_events(timeout=wait)
            now = time.monotonic()
            if now < chores_at:
                continue
            chores_at = now + _TIMER_GRAIN
            self.notify()
            if not self.is_parent_alive():
                break
            self._expire(now)
            self._tick(now)
            wait = self._wait_time(now)
        self._stop()

    def _wait_time(self, now: float) -> float:
        """How long the loop may sleep: until the first deadline, but never less than
        :data:`_TIMER_GRAIN`. The loop's chores (deadlines, the arbiter's heartbeat, the
        reports) run at most that often: under load an event comes every fraction of a
        millisecond, and doing them after each cost throughput (the loop's thread takes the
        GIL from the handlers each time). Deadlines are seconds long; a few tens of
        milliseconds late is nothing."""
        first = 1.0
        for queue in (self._idle, self._reading, self._closing):
            if queue and queue[0][0] - now < first:
                first = queue[0][0] - now
        return max(_TIMER_GRAIN, first)

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
            self.wait_for_and_dispatch_events(timeout=self._wait_time(time.monotonic()))
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
        conn.on_readable = partial(self._readable, conn)
        self._read(conn, b"", self._reading, time.monotonic() + self.limits.read_timeout)

    def _make_room(self) -> bool:
        """Below the cap again, closing the connection that has been waiting longest if
        need be; False if every connection is busy in a thread.

        What a candidate has sent is read first: a whole request goes to a thread instead of
        being dropped, and the next one is considered."""
        while self.nr_conns >= self.worker_connections:
            if not self._waiting:
                return False
            conn = next(iter(self._waiting))
            if not conn.lingering:
                self._read_here(conn)  # a request already sent is served, not dropped
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
    def _read(self, conn: _Conn, initial: bytes, queue: _Queue, deadline: float) -> None:
        """Wait for ``conn``'s next request (``initial``: bytes of it already read)."""
        conn.intake = None
        conn.lingering = False
        if not self._wait(conn, queue, deadline):
            return
        if initial:
            self._take(conn, initial, time.monotonic())

    def _wait(self, conn: _Conn, queue: _Queue, deadline: float) -> bool:
        """Put ``conn`` in the selector until ``deadline``; False if it could not be."""
        self._waiting[conn] = None
        if conn.intake is not None:
            self._buffered += len(conn.intake)
        try:
            self.poller.register(conn.sock, selectors.EVENT_READ, conn.on_readable)
        except (OSError, ValueError, KeyError):
            self._close(conn)
            return False
        self._arm(conn, queue, deadline)
        return True

    def _readable(self, conn: _Conn, _sock: Any) -> None:
        """Bytes came: the first of a request go to a thread, which reads them (a whole
        request usually comes in one read, so the loop does no reading for it); the rest
        of a request that came in pieces is read here."""
        if conn not in self._waiting or conn.lingering:
            return  # a stale event of this select batch: the connection moved on
        if conn.intake is None:
            self._dispatch(conn)
        else:
            self._read_here(conn)

    def _read_here(self, conn: _Conn) -> None:
        """Read what ``conn`` sent, in the loop."""
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
        """Read ``data`` into the connection's request, in the loop."""
        first = conn.intake is None
        if conn.intake is None:
            conn.intake = RequestIntake(self.limits.intake)
        self._buffered += len(data)
        self._judge(conn, conn.intake.feed(data), first, now)

    def _judge(self, conn: _Conn, verdict: Verdict, first: bool, now: float) -> None:
        """Act on where a waiting connection's request stands."""
        intake = conn.intake
        assert intake is not None
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
            self._arm(conn, self._reading, now + self.limits.read_timeout)
        while self._buffered > self.limits.max_buffered and self._waiting:
            self._evict_oldest()

    def _dispatch(self, conn: _Conn) -> None:
        """Hand the connection to a thread: its request whole, or (no byte read yet) for
        the thread to read."""
        self._forget(conn)
        conn.prebuffer = conn.intake.take() if conn.intake is not None else None
        conn.intake = None
        with contextlib.suppress(OSError, ValueError, KeyError):
            self.poller.unregister(conn.sock)
        self.enqueue_req(conn)

    # -- in a thread ---------------------------------------------------------------------
    def handle(self, conn: _Conn) -> bool | _Unread:
        """Serve ``conn``'s request (runs in a pool thread). True: keep alive; an
        :class:`_Unread`: the request is not whole yet, the loop reads on."""
        req = None
        try:
            if conn.prebuffer is None:
                unread = self._read_at_once(conn)
                if unread is not None:
                    return unread
            conn.sock.setblocking(True)  # the loop left it non-blocking
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

    def _read_at_once(self, conn: _Conn) -> _Unread | None:
        """Read what the client sent, never waiting: None when it is a whole request (in
        ``conn.prebuffer``), else what the loop is to do."""
        try:
            data = conn.sock.recv(_FIRST_READ, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return _Unread(None)
        if not data:
            raise http.errors.NoMoreData(b"")
        if whole_simple_request(data, self.limits.intake):
            conn.prebuffer = data
            return None
        intake = RequestIntake(self.limits.intake)
        verdict = intake.feed(data)
        if verdict is Verdict.COMPLETE:
            conn.prebuffer = intake.take()
            return None
        conn.intake = intake
        return _Unread(verdict)

    def finish_request(self, conn: _Conn, fs: Any) -> None:
        """Back on the loop: wait for the connection's next request (or the rest of this
        one), or close it."""
        try:
            result = False if fs.cancelled() else fs.result()
        except Exception:
            result = False
        if isinstance(result, _Unread) and self.alive:
            self._resume(conn, result)
            return
        if result is not True or not self.alive:
            self._linger(conn)
            return
        conn.served += 1
        unreader = conn.parser.unreader
        leftover = unreader.take_buffered() if unreader.buf.tell() else b""
        try:
            conn.sock.setblocking(False)
        except OSError:
            self._close(conn)
            return
        now = time.monotonic()
        if leftover:  # pipelined: the next request has begun
            self._read(conn, leftover, self._reading, now + self.limits.read_timeout)
        else:
            self._read(conn, b"", self._idle, now + self.limits.keepalive_timeout)

    def _resume(self, conn: _Conn, unread: _Unread) -> None:
        """The thread found less than a request: the loop reads the rest."""
        now = time.monotonic()
        if unread.verdict is None:  # woken for nothing: wait on, same deadline
            self._wait(conn, conn.queue or self._reading, conn.deadline)
            return
        if self._wait(conn, self._reading, now + self.limits.read_timeout):
            self._judge(conn, unread.verdict, False, now)

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
        self._arm(conn, self._closing, time.monotonic() + _LINGER_SECONDS)

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
        conn.timer += 1  # voids its queued deadlines

    # -- deadlines -----------------------------------------------------------------------
    def _arm(self, conn: _Conn, queue: _Queue, deadline: float) -> None:
        """``conn`` is due at ``deadline`` (its earlier deadlines are void)."""
        conn.deadline = deadline
        conn.queue = queue
        conn.timer += 1
        queue.append((deadline, conn.timer, conn))

    def _expire(self, now: float) -> None:
        for queue in (self._idle, self._reading, self._closing):
            while queue and queue[0][0] <= now:
                _, timer, conn = queue.popleft()
                if timer == conn.timer and conn in self._waiting:
                    self._late(conn)

    def _late(self, conn: _Conn) -> None:
        """``conn``'s deadline passed while it waited."""
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
