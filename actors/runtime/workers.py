"""A bounded pool of daemon worker threads for blocking provider calls.

``concurrent.futures.ThreadPoolExecutor`` joins its threads at interpreter exit, so one
provider call hung on a dead hypervisor would keep ``vmpooler manager`` from exiting on
SIGTERM. These workers are daemon threads: shutdown stops taking work, and a call still
stuck when the process exits is abandoned (it holds no Redis state — the caller already
got its timeout answer).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

__all__ = ["WorkerPool"]

log = logging.getLogger(__name__)

_STOP = object()


class WorkerPool:
    """``size`` threads taking jobs from one unbounded FIFO queue.

    Jobs run in submission order as workers free up; a job's exception is logged and does
    not kill its worker. Threads start lazily, up to ``size``.
    """

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = max(1, size)
        self._jobs: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, job: Callable[[], None]) -> None:
        """Queue ``job``. Raises RuntimeError after :meth:`shutdown`."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"worker pool {self.name} is shut down")
            if self._idle == 0 and len(self._threads) < self.size:
                thread = threading.Thread(
                    target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
            else:
                self._idle = max(0, self._idle - 1)
        self._jobs.put(job)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            try:
                job()  # type: ignore[operator]
            except BaseException:
                log.exception("worker job failed in %s", self.name)
            with self._lock:
                self._idle += 1

    def shutdown(self) -> int:
        """Stop taking jobs and drop queued ones (returned: how many); idle workers exit,
        busy ones after their current job."""
        with self._lock:
            self._closed = True
            count = len(self._threads)
        dropped = 0
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
            dropped += 1
        for _ in range(count):
            self._jobs.put(_STOP)
        return dropped
