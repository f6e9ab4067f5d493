"""Real metric sinks for process tests: a UDP listener (DogStatsD or plain statsd) and a
TCP listener (graphite plaintext), each on a free loopback port, parsing what arrives into
:class:`Sample`\\ s.

A listener runs in a daemon thread from ``start()`` until ``stop()``; ``samples()`` is a
snapshot, oldest first, safe to call from any thread.
"""

from __future__ import annotations

import re
import socket
import socketserver
import threading
from dataclasses import dataclass, field

__all__ = ["GraphiteSink", "Sample", "StatsdSink"]


@dataclass(frozen=True)
class Sample:
    """One metric line as it came over the wire.

    ``kind`` is the statsd type (``c``, ``g``, ``ms``) or ``graphite``; ``tags`` are
    DogStatsD's ``key:value`` pairs (empty for statsd and graphite); ``line`` is the raw text.
    """

    name: str
    value: float
    kind: str
    tags: dict[str, str] = field(default_factory=dict)
    line: str = ""


_STATSD = re.compile(r"^(?P<name>[^:|]+):(?P<value>[^|]+)\|(?P<kind>[a-z]+)(?P<rest>.*)$")


def parse_statsd(line: str) -> Sample:
    """A DogStatsD or statsd line; raises ValueError for anything else."""
    match = _STATSD.match(line)
    if match is None:
        raise ValueError(f"not a statsd line: {line!r}")
    tags: dict[str, str] = {}
    for section in match["rest"].split("|")[1:]:
        if section.startswith("#"):
            for tag in section[1:].split(","):
                key, _, value = tag.partition(":")
                tags[key] = value
        else:
            raise ValueError(f"unexpected section {section!r} in {line!r}")
    return Sample(match["name"], float(match["value"]), match["kind"], tags, line)


def parse_graphite(line: str) -> Sample:
    """A graphite plaintext line ``<path> <value> <epoch>``; ValueError otherwise."""
    path, value, epoch = line.split(" ")
    int(epoch)
    return Sample(path, float(value), "graphite", {}, line)


class _Collector:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: list[Sample] = []
        self.errors: list[str] = []

    def add(self, sample: Sample) -> None:
        with self._lock:
            self._samples.append(sample)

    def samples(self) -> list[Sample]:
        """Everything received so far, oldest first."""
        with self._lock:
            return list(self._samples)


class StatsdSink(_Collector):
    """UDP listener; every datagram may hold several newline-separated lines."""

    def __init__(self) -> None:
        super().__init__()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def start(self) -> StatsdSink:
        self._thread.start()
        return self

    def _serve(self) -> None:
        while True:
            try:
                data = self._sock.recv(65535)
            except OSError:
                return
            if data == b"\0stop":
                return
            for line in data.decode("utf-8").splitlines():
                try:
                    self.add(parse_statsd(line))
                except ValueError as exc:
                    self.errors.append(str(exc))

    def stop(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as poke:
            poke.sendto(b"\0stop", ("127.0.0.1", self.port))
        self._thread.join(timeout=5)
        self._sock.close()


class GraphiteSink(_Collector):
    """TCP listener accepting any number of connections, one line per sample."""

    def __init__(self) -> None:
        super().__init__()
        sink = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                for raw in self.rfile:
                    line = raw.decode("utf-8").rstrip("\n")
                    try:
                        sink.add(parse_graphite(line))
                    except ValueError as exc:
                        sink.errors.append(f"{exc}: {line!r}")

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self) -> GraphiteSink:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
