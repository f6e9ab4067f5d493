"""The probe listener's connection handling: no thread ever waits for a client's request.

One event-loop thread accepts connections and reads what they send without blocking; a
connection reaches a worker thread only once its request head is whole (or too large), so
connections that send nothing, or a head a byte at a time, hold no thread and no slot:

* a connection's head must be whole within ``read_timeout`` s of its opening, else it is
  closed unanswered;
* at most ``max_open`` connections wait for their head at once; beyond, the one waiting
  longest is closed to make room (also when the process runs out of file descriptors);
* at most ``max_busy`` whole requests wait for or are in a worker thread; beyond, a new
  one is closed unanswered;
* a connection answered 431 (its head over ``max_head`` bytes) is drained by the loop
  (its unread bytes dropped for ``read_timeout`` s at most, so the client gets the answer
  rather than a reset), never by a thread.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import queue
import selectors
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Head", "HeadReader"]

log = logging.getLogger(__name__)

_READ_SIZE = 8192
_DRAIN_LIMIT = 65536


@dataclass(frozen=True, slots=True)
class Head:
    """A request handed to a worker: ``data`` holds the whole head (and whatever came with
    it), or is None when the head was over the limit (answer 431; the loop drains after)."""

    sock: socket.socket
    peer: Any
    data: bytes | None


@dataclass(slots=True)
class _Waiting:
    sock: socket.socket
    peer: Any
    deadline: float
    data: bytearray = field(default_factory=bytearray)
    draining: bool = False
    drained: int = 0


Handler = Callable[[Head], None]
"""Answers a :class:`Head` on a worker thread; may write to ``head.sock`` (blocking, with
the server's timeout) and must not close it (the caller closes, or drains for a 431)."""


class HeadReader:
    """See the module docstring. :meth:`serve` runs the loop until :meth:`stop`."""

    def __init__(self, listener: socket.socket, handler: Handler, *, read_timeout: float,
                 max_head: int, max_open: int, max_busy: int, workers: int) -> None:
        self.listener = listener
        self.handler = handler
        self.read_timeout = read_timeout
        self.max_head = max_head
        self.max_open = max_open
        self._selector = selectors.DefaultSelector()
        self._waiting: OrderedDict[socket.socket, _Waiting] = OrderedDict()  # oldest first
        self._work: queue.Queue[Head | None] = queue.Queue(maxsize=max_busy)
        self._returned: queue.SimpleQueue[socket.socket] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._stopped = threading.Event()
        self._workers = [threading.Thread(target=self._work_loop, name="vmpooler-probe",
                                          daemon=True) for _ in range(workers)]

    @property
    def waiting(self) -> int:
        """Connections open whose request is not whole yet (or being drained)."""
        return len(self._waiting)

    def serve(self) -> None:
        """Run the loop on the calling thread until :meth:`stop`; then close every
        connection still waiting."""
        for worker in self._workers:
            worker.start()
        self.listener.setblocking(False)
        self._wake_r.setblocking(False)
        self._selector.register(self.listener, selectors.EVENT_READ, self._accept)
        self._selector.register(self._wake_r, selectors.EVENT_READ, self._woken)
        try:
            while not self._stopped.is_set():
                timeout = self._expire(time.monotonic())
                for key, _ in self._selector.select(timeout):
                    key.data(key.fileobj)
        finally:
            for sock in list(self._waiting):
                self._close(sock)
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()
            for _ in self._workers:
                with contextlib.suppress(queue.Full):
                    self._work.put_nowait(None)

    def stop(self) -> None:
        """Ask :meth:`serve` to return (from any thread); idempotent."""
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    # -- the loop ----------------------------------------------------------------------
    def _expire(self, now: float) -> float | None:
        """Close connections past their deadline; the seconds until the next one."""
        while self._waiting:
            sock, waiting = next(iter(self._waiting.items()))
            if waiting.deadline > now:
                return waiting.deadline - now
            if not waiting.draining:
                log.debug("[manager] probe request from %s not received within %g s",
                          waiting.peer, self.read_timeout)
            self._close(sock)
        return None

    def _woken(self, _sock: Any) -> None:
        with contextlib.suppress(OSError):
            self._wake_r.recv(4096)
        while True:  # 431s answered by a worker, to drain here
            try:
                sock = self._returned.get_nowait()
            except queue.Empty:
                break
            self._watch(_Waiting(sock, None, time.monotonic() + self.read_timeout,
                                 draining=True))

    def _accept(self, _listener: Any) -> None:
        for _ in range(64):  # then let the others have their turn
            try:
                sock, peer = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM) \
                        and self._waiting:
                    self._close(next(iter(self._waiting)))  # make room: the oldest goes
                    continue
                log.debug("[manager] probe accept failed: %s", exc)
                return
            if len(self._waiting) >= self.max_open:
                self._close(next(iter(self._waiting)))
            sock.setblocking(False)
            self._watch(_Waiting(sock, peer, time.monotonic() + self.read_timeout))

    def _watch(self, waiting: _Waiting) -> None:
        self._waiting[waiting.sock] = waiting
        try:
            self._selector.register(waiting.sock, selectors.EVENT_READ, self._readable)
        except (OSError, ValueError):
            self._close(waiting.sock)

    def _readable(self, sock: socket.socket) -> None:
        waiting = self._waiting.get(sock)
        if waiting is None:
            return
        try:
            chunk = sock.recv(_READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if waiting.draining:
            waiting.drained += len(chunk)
            if not chunk or waiting.drained > _DRAIN_LIMIT:
                self._close(sock)
            return
        if not chunk and not waiting.data:
            self._close(sock)  # gone without a word
            return
        waiting.data += chunk
        whole = b"\r\n\r\n" in waiting.data or b"\n\n" in waiting.data
        too_large = len(waiting.data) > self.max_head and not _head_within(waiting.data,
                                                                           self.max_head)
        if whole or too_large or not chunk:  # the client is done: what came is all there is
            self._hand_over(sock, waiting, None if too_large else bytes(waiting.data))

    def _hand_over(self, sock: socket.socket, waiting: _Waiting, data: bytes | None) -> None:
        self._forget(sock)
        try:
            self._work.put_nowait(Head(sock, waiting.peer, data))
        except queue.Full:
            log.debug("[manager] probe request from %s dropped: too many at once",
                      waiting.peer)
            sock.close()

    def _forget(self, sock: socket.socket) -> None:
        self._waiting.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(sock)

    def _close(self, sock: socket.socket) -> None:
        self._forget(sock)
        sock.close()

    # -- the workers -------------------------------------------------------------------
    def _work_loop(self) -> None:
        while (head := self._work.get()) is not None:
            head.sock.setblocking(True)
            head.sock.settimeout(self.read_timeout)
            try:
                self.handler(head)
            except Exception:
                log.debug("[manager] probe connection from %s failed", head.peer,
                          exc_info=True)
            if head.data is None and not self._stopped.is_set():
                with contextlib.suppress(OSError):
                    head.sock.shutdown(socket.SHUT_WR)
                    head.sock.setblocking(False)
                    self._returned.put(head.sock)
                    self._wake_w.send(b"x")
                    continue
            with contextlib.suppress(OSError):
                head.sock.shutdown(socket.SHUT_WR)
            head.sock.close()


def _head_within(data: bytearray, limit: int) -> bool:
    """Whether the head ends within the first ``limit`` bytes of ``data``."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        end = data.find(b"\n\n")
    return 0 <= end < limit
