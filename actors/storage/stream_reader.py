"""Blocking reads of Redis streams on a thread of their own: :class:`StreamReader`.

A manager reads two kinds of stream with ``XREAD``/``XREADGROUP ... BLOCK``: its inbox from
the other managers (the relay) and the API's command stream (the command consumer). Each
reads through a :class:`StreamReader`, which gives the read a thread and a connection of its
own, so a blocked read holds no connection of the shared pool and no actor's mailbox.

What a caller may rely on:

* **Prompt stop.** :meth:`StreamReader.stop` unblocks a read in progress with
  ``CLIENT UNBLOCK`` (sent on the caller's client, another connection), repeated until the
  thread ends, so a stop never waits out a ``BLOCK`` however long; then it joins the thread
  and closes the reader's connection. Idempotent.
* **One step at a time.** ``step(client)`` (the caller's read and handling of what it read)
  runs on the reader's thread only, again and again until it returns False or the reader is
  stopped. A step interrupted by ``CLIENT UNBLOCK`` sees its read return nothing.
* **No crash.** An exception of a step (a Redis error, or a bug) is logged (the first of a
  run of failures as a warning, the rest at debug, a bug with its traceback), counted in
  :attr:`StreamReader.errors`, and the step is tried again after a back-off doubling from
  ``backoff[0]`` to at most ``backoff[1]`` seconds; recovery is logged once. Before the
  first step and after each failure ``prepare(client)`` runs first (a consumer group made
  again, say).
* **No retries inside a read.** The reader's client retries nothing itself (a retried read
  would block again, unseen by ``stop``); its socket timeout outlasts ``block_ms``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from vmpooler.actors.storage.connection import sibling

__all__ = ["StreamReader"]

log = logging.getLogger(__name__)

_UNBLOCK_EVERY = 0.05
"""Seconds between two ``CLIENT UNBLOCK`` while a stopped reader's thread is still running
(a read sent just after the first one is unblocked by the next)."""


class StreamReader:
    """One reading thread over a connection of its own to ``client``'s Redis. Start it with
    :meth:`start`; ``label`` and ``what`` name it in log lines (``[label] cannot read
    what``) and ``name`` is its thread's name."""

    def __init__(
        self, client: redis.Redis, step: Callable[[redis.Redis], bool], *, name: str,
        label: str, what: str, block_ms: int, backoff: tuple[float, float] = (0.25, 10.0),
        prepare: Callable[[redis.Redis], object] | None = None,
    ) -> None:
        self.control = client
        self.step = step
        self.prepare = prepare
        self.label, self.what = label, what
        self.backoff = backoff
        timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
        self.client: redis.Redis = sibling(
            client, max_connections=1, retry=Retry(NoBackoff(), 0), health_check_interval=0,
            decode_responses=True,
            socket_timeout=None if timeout is None else max(float(timeout),
                                                            block_ms / 1000 + 5))
        """The reader's own client (one connection); use it on the reader's thread only."""
        self.errors = 0
        """Steps that failed so far (each one logged)."""
        self._conn_id: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    @property
    def alive(self) -> bool:
        """Whether the reading thread is running."""
        return self._thread.is_alive()

    def start(self) -> StreamReader:
        """Start the thread (once; later calls do nothing)."""
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop reading: unblock a read in progress, wait up to ``timeout`` s for the thread
        (unless called from it), close the reader's connection. Idempotent."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        current = threading.current_thread()
        while self._thread.is_alive() and self._thread is not current:
            conn_id = self._conn_id
            if conn_id is not None:
                with contextlib.suppress(Exception):
                    self.control.client_unblock(conn_id)
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("[!] [%s] reader of %s did not stop within %.1fs", self.label,
                            self.what, timeout)
                break
            self._thread.join(min(_UNBLOCK_EVERY, left))
        with contextlib.suppress(Exception):
            self.client.connection_pool.disconnect()

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if self._conn_id is None:
                    self._conn_id = int(self.client.client_id())
                    if self.prepare is not None:
                        self.prepare(self.client)
                if self._stop.is_set() or not self.step(self.client):
                    return
                if failures:
                    log.info("[*] [%s] reading %s again", self.label, self.what)
                failures = 0
            except Exception as exc:
                self._conn_id = None
                if self._stop.is_set():
                    return
                failures, self.errors = failures + 1, self.errors + 1
                log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                        "[!] [%s] cannot read %s: %s: %s", self.label, self.what,
                        type(exc).__name__, exc, exc_info=not isinstance(exc, redis.RedisError))
                first, most = self.backoff
                self._stop.wait(min(most, first * 2 ** min(failures - 1, 8)))
