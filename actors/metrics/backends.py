"""Metrics interface and backends (reference §6).

Convention for every caller: pass vmpooler's metric name *without* the pool (or other
variable) suffix and the variable parts as tags, e.g. ``metrics.gauge("ready", 3,
tags={"pool": "debian"})`` for vmpooler's ``ready.debian``, or
``metrics.increment("vmpooler_errors.markedasfailed", tags={"pool": p})``.

What callers may rely on, for every backend here:

* no method ever raises into the caller because of the network (errors are logged at
  debug level and the sample is dropped), and no call blocks for more than a short socket
  timeout;
* every backend is safe to share between threads (actors);
* ``timing`` takes **seconds**;
* ``close()`` is idempotent; network backends silently drop later calls;
* the network backends batch: a sample leaves within ``FLUSH_INTERVAL`` (0.25 s), packed
  with others into one datagram or write; ``flush()`` sends at once and ``close()`` sends
  what is left.

Tag rendering: Datadog keeps the name and sends tags as ``key:value``.  Statsd and Graphite
have no tags, so the tag *values* become dotted name suffixes, in the mapping's iteration
order except that ``pool`` always goes last: ``tags={"user": u, "operation": op, "pool": p}``
on ``user`` renders vmpooler's ``user.<u>.<op>.<p>``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from datadog.dogstatsd import DogStatsd

from vmpooler.actors.metrics.batch import FLUSH_INTERVAL, LineBatcher
from vmpooler.actors.metrics.catalog import plain_unit

__all__ = [
    "Backend",
    "DatadogMetrics",
    "GraphiteMetrics",
    "Metrics",
    "NullMetrics",
    "RecordingMetrics",
    "StatsdMetrics",
    "create_metrics",
]

log = logging.getLogger(__name__)

SOCKET_TIMEOUT = 0.5
"""Longest a metrics call may block on a socket, in seconds."""
UDP_PAYLOAD = 1432
"""Largest statsd datagram: one 1500-byte Ethernet frame less the IP and UDP headers."""
TCP_BATCH = 16384
"""Largest graphite write."""

_UNSAFE = re.compile(r"[\s:|@#]")


@runtime_checkable
class Metrics(Protocol):
    """What the actors call; see the module docstring for the naming convention."""

    def increment(
        self, name: str, *, tags: Mapping[str, str] | None = None, value: int = 1
    ) -> None:
        """Add ``value`` to the counter ``name``."""

    def gauge(self, name: str, value: float, *, tags: Mapping[str, str] | None = None) -> None:
        """Set the gauge ``name`` to ``value``."""

    def timing(self, name: str, seconds: float, *, tags: Mapping[str, str] | None = None) -> None:
        """Record a duration of ``seconds``."""

    def close(self) -> None:
        """Release sockets; later calls are dropped."""


def _number(value: float) -> str:
    """``3`` for 3 and 3.0, shortest round-trip text otherwise."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def dotted_name(prefix: str, name: str, tags: Mapping[str, str] | None) -> str:
    """``prefix.name.<tag values>`` with ``pool`` last.

    Whitespace and ``: | @ #`` (unsafe on the statsd/graphite wire) become ``_``.
    """
    parts = [prefix] if prefix else []
    parts.append(name)
    if tags:
        parts.extend(str(v) for k, v in tags.items() if k != "pool")
        if "pool" in tags:
            parts.append(str(tags["pool"]))
    return _UNSAFE.sub("_", ".".join(parts))


class Backend:
    """Routes the three ``Metrics`` calls to ``_emit(kind, name, value, tags)``; a backend
    subclasses it and implements ``_emit`` (and ``close`` if it holds anything)."""

    def _emit(self, kind: str, name: str, value: float, tags: Mapping[str, str] | None) -> None:
        raise NotImplementedError

    def increment(
        self, name: str, *, tags: Mapping[str, str] | None = None, value: int = 1
    ) -> None:
        self._emit("increment", name, value, tags)

    def gauge(self, name: str, value: float, *, tags: Mapping[str, str] | None = None) -> None:
        self._emit("gauge", name, value, tags)

    def timing(self, name: str, seconds: float, *, tags: Mapping[str, str] | None = None) -> None:
        self._emit("timing", name, seconds, tags)

    def close(self) -> None:
        """Release resources; later calls are dropped."""


class NullMetrics(Backend):
    """Discards everything."""

    def _emit(self, kind: str, name: str, value: float, tags: Mapping[str, str] | None) -> None:
        return None


class DatadogMetrics(Backend):
    """DogStatsd over UDP: ``<namespace>.<name>:<value>|<type>|#key:value,...``.

    Counters ``|c``, gauges ``|g``, timings ``|ms`` in milliseconds.  ``constant_tags`` are
    ``key:value`` strings appended to every sample (after the call's own tags).  Client
    telemetry and origin detection are off, so the agent sees one datagram per call.
    """

    def __init__(
        self, host: str, port: int, namespace: str = "vmpooler", constant_tags: Sequence[str] = ()
    ) -> None:
        self._closed = False
        self._client = DogStatsd(
            host=host,
            port=port,
            namespace=namespace or None,
            constant_tags=list(constant_tags),
            disable_telemetry=True,
            origin_detection_enabled=False,
            # samples are packed into datagrams and sent every FLUSH_INTERVAL s by the
            # client's own thread: one datagram per sample cost a fifth of a checkout's CPU
            disable_buffering=False,
            disable_aggregation=False,  # counts summed, gauges last value, per flush
            flush_interval=FLUSH_INTERVAL,
            disable_background_sender=True,
            socket_timeout=SOCKET_TIMEOUT,
        )

    def _emit(self, kind: str, name: str, value: float, tags: Mapping[str, str] | None) -> None:
        if self._closed:
            return
        if kind == "timing":
            value = value * 1000.0
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        rendered = [f"{k}:{v}" for k, v in tags.items()] if tags else None
        try:
            getattr(self._client, kind)(name, value, tags=rendered)
        except Exception as exc:  # never let metrics break the caller
            log.debug("datadog metric %s dropped: %s", name, exc)

    def flush(self) -> None:
        """Send the samples buffered so far now."""
        try:
            self._client.flush()
        except Exception as exc:
            log.debug("flushing dogstatsd: %s", exc)

    def close(self) -> None:
        """Send what is buffered and close the UDP socket."""
        if not self._closed:
            self.flush()
        self._closed = True
        try:
            self._client.close_socket()
        except Exception as exc:
            log.debug("closing dogstatsd socket: %s", exc)


class StatsdMetrics(Backend):
    """Plain statsd over UDP with vmpooler's dotted names: ``vmpooler.ready.debian:3|g``.

    Counters ``|c``, gauges ``|g``, timings ``|ms`` in milliseconds (vmpooler's own statsd
    client sent some timings in seconds labelled ``ms``; this sends real milliseconds).
    The socket is non-blocking: a full buffer or an unreachable host drops the sample.
    The host name is resolved once, on the first call.
    """

    _TYPES = {"increment": "c", "gauge": "g", "timing": "ms"}

    def __init__(self, host: str, port: int, prefix: str = "vmpooler") -> None:
        self._address = (host, port)
        self._prefix = prefix
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._closed = False
        # several samples per datagram, newline-separated, within one Ethernet MTU
        self._batch = LineBatcher(self._deliver, limit=UDP_PAYLOAD, separator=b"\n",
                                  name="statsd-flush")

    def _connect(self) -> socket.socket:
        infos = socket.getaddrinfo(*self._address, 0, socket.SOCK_DGRAM)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.connect(address)
        except OSError:
            sock.close()
            raise
        return sock

    def _emit(self, kind: str, name: str, value: float, tags: Mapping[str, str] | None) -> None:
        if kind == "timing":
            value = value * 1000.0
        self._batch.add(
            f"{dotted_name(self._prefix, name, tags)}:{_number(value)}|{self._TYPES[kind]}")

    def _deliver(self, datagram: bytes) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                if self._sock is None:
                    self._sock = self._connect()
                self._sock.send(datagram)
            except OSError as exc:
                log.debug("statsd datagram dropped (%s): %s", exc, datagram[:200])

    def flush(self) -> None:
        """Send the samples batched so far now."""
        self._batch.flush()

    def close(self) -> None:
        """Send what is batched and close the UDP socket."""
        self._batch.close()
        with self._lock:
            self._closed = True
            if self._sock is not None:
                self._sock.close()
                self._sock = None


class GraphiteMetrics(Backend):
    """Graphite plaintext protocol over one persistent TCP connection.

    Each call writes ``<prefix>.<name>[.<tag values>] <value> <epoch>\\n``; counters write
    the increment.  Graphite has no units, so a timing is written in the unit vmpooler wrote
    for that metric (:func:`vmpooler.actors.metrics.catalog.plain_unit`): seconds, except
    ``connection_waited`` in whole milliseconds.  The connection is opened on
    first use and reopened lazily after an error, but not more often than every
    ``retry_interval`` seconds; samples are dropped meanwhile.  Connect and send block for
    at most ``timeout`` seconds.
    """

    def __init__(
        self,
        host: str,
        port: int = 2003,
        prefix: str = "vmpooler",
        *,
        timeout: float = SOCKET_TIMEOUT,
        retry_interval: float = 5.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._address = (host, port)
        self._prefix = prefix
        self._timeout = timeout
        self._retry_interval = retry_interval
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._next_attempt = 0.0
        self._closed = False
        self._batch = LineBatcher(self._deliver, limit=TCP_BATCH, name="graphite-flush")

    def _drop_socket(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def _emit(self, kind: str, name: str, value: float, tags: Mapping[str, str] | None) -> None:
        if kind == "timing" and plain_unit(name) == "ms":
            value = int(value * 1000)
        self._batch.add(
            f"{dotted_name(self._prefix, name, tags)} {_number(value)} {int(self._clock())}\n")

    def _deliver(self, lines: bytes) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                if self._sock is None:
                    if self._monotonic() < self._next_attempt:
                        return
                    self._sock = socket.create_connection(self._address, timeout=self._timeout)
                self._sock.sendall(lines)
            except OSError as exc:
                log.debug("graphite lines dropped (%s): %s", exc, lines[:200])
                self._drop_socket()
                self._next_attempt = self._monotonic() + self._retry_interval

    def flush(self) -> None:
        """Send the lines batched so far now."""
        self._batch.flush()

    def close(self) -> None:
        """Send what is batched and close the TCP connection."""
        self._batch.close()
        with self._lock:
            self._closed = True
            self._drop_socket()


Record = tuple[str, str, float, dict[str, str]]
"""``(kind, name, value, tags)`` with kind ``increment`` | ``gauge`` | ``timing``."""


class RecordingMetrics(Backend):
    """Keeps every call in memory as a ``Record``, for tests.  Thread-safe.

    Timings are recorded in seconds, as passed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self.closed = False

    def _emit(self, kind: str, name: str, value: float, tags: Mapping[str, str] | None) -> None:
        with self._lock:
            self._records.append((kind, name, value, dict(tags or {})))

    def close(self) -> None:
        """Mark closed (recording continues)."""
        self.closed = True

    @property
    def records(self) -> list[Record]:
        """A snapshot copy of everything recorded, oldest first."""
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        """Forget everything recorded."""
        with self._lock:
            self._records.clear()

    def values(self, kind: str, name: str, **tags: str) -> list[float]:
        """Values of ``kind`` calls on ``name`` whose tags include every given ``tags`` pair."""
        return [
            value
            for k, n, value, recorded in self.records
            if k == kind and n == name and all(recorded.get(t) == v for t, v in tags.items())
        ]

    def counts(self, name: str, **tags: str) -> int:
        """Sum of increments of ``name`` matching ``tags`` (a subset match); 0 if none."""
        return int(sum(self.values("increment", name, **tags)))

    def last_gauge(self, name: str, **tags: str) -> float | None:
        """Latest gauge value of ``name`` matching ``tags``, or None if never set."""
        found = self.values("gauge", name, **tags)
        return found[-1] if found else None

    def timings(self, name: str, **tags: str) -> list[float]:
        """Recorded durations (seconds) of ``name`` matching ``tags``."""
        return self.values("timing", name, **tags)


def create_metrics(
    backend: str, host: str | None, port: int | None, prefix: str, tags: Sequence[str]
) -> Metrics:
    """Build a backend: ``none`` | ``datadog`` | ``statsd`` | ``graphite`` | ``prometheus``
    (case-insensitive).

    Defaults: host ``localhost``, port 8125 (datadog, statsd) or 2003 (graphite).  ``tags``
    (``key:value`` strings) reach Datadog as constant tags and Prometheus as constant labels
    (``vmpooler_instance``); statsd and graphite have no place for them.
    Any other backend name raises ``ValueError``.
    """
    kind = backend.strip().lower()
    if kind == "none":
        return NullMetrics()
    address = host or "localhost"
    if kind == "datadog":
        return DatadogMetrics(address, port or 8125, namespace=prefix, constant_tags=tags)
    if kind == "statsd":
        return StatsdMetrics(address, port or 8125, prefix=prefix)
    if kind == "graphite":
        return GraphiteMetrics(address, port or 2003, prefix=prefix)
    if kind == "prometheus":  # prefix: the name prefix; tags: constant labels
        from vmpooler.actors.metrics.prometheus import PrometheusMetrics

        return PrometheusMetrics(prefix, constant_labels=tags)
    raise ValueError(
        f"unknown metrics backend {backend!r} (none, datadog, statsd, graphite, prometheus)")
