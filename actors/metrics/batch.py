"""Batching of metric lines for the statsd and graphite backends.

One datagram or one ``sendall`` per sample costs a system call and a packet each: a few
samples per checkout made metrics a fifth of the API's CPU. A :class:`LineBatcher` collects
lines and hands them on joined: when the next line would not fit in ``limit`` bytes, every
``interval`` seconds from its own daemon thread, and on :meth:`LineBatcher.flush` or
:meth:`LineBatcher.close`. A sample therefore leaves at most ``interval`` seconds after it
was made, as DogStatsD's own buffering does for the Datadog backend.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["FLUSH_INTERVAL", "LineBatcher"]

FLUSH_INTERVAL = 0.25
"""Seconds a sample may wait in a batch."""


class LineBatcher:
    """Lines in, joined batches out to ``deliver`` (called with no lock of ours held, one
    batch at a time). Thread-safe. The flushing thread starts with the first line, so a
    backend made before a ``fork`` and used only after it flushes in the process using it.
    """

    def __init__(self, deliver: Callable[[bytes], None], *, limit: int,
                 separator: bytes = b"", interval: float = FLUSH_INTERVAL,
                 name: str = "metrics-flush") -> None:
        self._deliver = deliver
        self._limit = max(1, limit)
        self._separator = separator
        self._interval = interval
        self._name = name
        self._lock = threading.Lock()
        self._sending = threading.Lock()
        self._lines: list[bytes] = []
        self._size = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    def add(self, line: str) -> None:
        """Queue ``line``; sends the batch first when ``line`` would not fit in it."""
        data = line.encode("utf-8")
        full: bytes | None = None
        with self._lock:
            if self._closed:
                return
            if self._lines and self._size + len(self._separator) + len(data) > self._limit:
                full = self._take()
            self._lines.append(data)
            self._size += len(data) + (len(self._separator) if len(self._lines) > 1 else 0)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        if full is not None:
            self._send(full)

    def flush(self) -> None:
        """Send what is queued now (nothing when empty)."""
        with self._lock:
            batch = self._take() if self._lines else None
        if batch is not None:
            self._send(batch)

    def close(self) -> None:
        """Send what is queued and stop; later lines are dropped. Idempotent."""
        with self._lock:
            self._closed = True
            batch = self._take() if self._lines else None
        self._stop.set()
        if batch is not None:
            self._send(batch)

    def _take(self) -> bytes:
        batch = self._separator.join(self._lines)
        self._lines, self._size = [], 0
        return batch

    def _send(self, batch: bytes) -> None:
        with self._sending:
            self._deliver(batch)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()
