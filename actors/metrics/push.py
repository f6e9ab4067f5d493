"""The push backends: DogStatsD (tagged), plain statsd and graphite (reference §6).

They batch: a sample leaves within ``FLUSH_INTERVAL`` (0.25 s), packed with others into one
datagram or write; ``flush()`` sends at once and ``close()`` sends what is left. Every call
keeps the promises of :mod:`vmpooler.actors.metrics.backends` (never raises because of the
network, blocks at most :data:`SOCKET_TIMEOUT`).

Tag rendering: Datadog keeps the name and sends tags as ``key:value``.  Statsd and Graphite
have no tags, so the tag *values* become dotted name suffixes, in the mapping's iteration
order except that ``pool`` always goes last: ``tags={"user": u, "operation": op, "pool": p}``
on ``user`` renders vmpooler's ``user.<u>.<op>.<p>``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from vmpooler.actors.metrics.backends import Backend, dotted_name, format_number
from vmpooler.actors.metrics.batch import FLUSH_INTERVAL, LineBatcher
from vmpooler.actors.metrics.catalog import plain_unit

__all__ = ["SOCKET_TIMEOUT", "TCP_BATCH", "UDP_PAYLOAD", "DatadogMetrics", "GraphiteMetrics",
           "StatsdMetrics"]

log = logging.getLogger(__name__)

SOCKET_TIMEOUT = 0.5
"""Longest a metrics call may block on a socket, in seconds."""
UDP_PAYLOAD = 1432
"""Largest statsd datagram: one 1500-byte Ethernet frame less the IP and UDP headers."""
TCP_BATCH = 16384
"""Largest graphite write."""


class DatadogMetrics(Backend):
    """DogStatsd over UDP: ``<namespace>.<name>:<value>|<type>|#key:value,...``.

    Counters ``|c``, gauges ``|g``, timings ``|ms`` in milliseconds.  ``constant_tags`` are
    ``key:value`` strings appended to every sample (after the call's own tags).  Client
    telemetry and origin detection are off, so the agent sees one datagram per call.
    """

    def __init__(
        self, host: str, port: int, namespace: str = "vmpooler", constant_tags: Sequence[str] = ()
    ) -> None:
        # imported here: the datadog package (with requests) costs a process a seventh of a
        # second to import, which every vmpooler command without a DogStatsD sink is spared
        from datadog.dogstatsd import DogStatsd

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
            f"{dotted_name(self._prefix, name, tags)}:{format_number(value)}|{self._TYPES[kind]}")

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
            f"{dotted_name(self._prefix, name, tags)} {format_number(value)} "
            f"{int(self._clock())}\n")

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
