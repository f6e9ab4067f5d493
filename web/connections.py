"""What the API's worker allows a connection, how it answers a refusal, what it reports.

Shared by :mod:`vmpooler.web.worker` (which enforces the limits) and
:mod:`vmpooler.web.cli.serve` (which sets them from the configuration and sends the reports to
the metrics backend).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from vmpooler.web.intake import IntakeLimits

__all__ = ["REASONS", "ConnectionLimits", "ConnectionObserver", "RefusalReport",
           "error_response"]

log = logging.getLogger("vmpooler.web.worker")

REASONS = ("read_timeout", "idle_timeout", "write_timeout", "evicted", "over_capacity",
           "too_large", "malformed")
"""Why a connection was refused or closed early (the ``reason`` of the refusal metric):
its request did not arrive in time (408); it sent nothing in time; it did not take its
response in time; it was closed to make room; it was refused at the cap (503); its request
line, head or body was too large (414, 431, 413); its request was not HTTP (400)."""

SUMMARY_EVERY = 60.0
"""Seconds between two summary log lines of refusals (none when nothing was refused)."""
GAUGE_EVERY = 5.0
"""Seconds between two reports of the open connections."""


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long and how much a client may take (seconds and bytes; per worker process)."""

    read_timeout: float = 10.0
    keepalive_timeout: float = 5.0
    write_timeout: float = 30.0
    max_connections: int = 1000
    max_buffered: int = 64 * 1024 * 1024
    intake: IntakeLimits = field(default_factory=IntakeLimits)


class ConnectionObserver(Protocol):
    """What the worker reports to; called on the worker's event-loop thread."""

    def refused(self, reason: str) -> None:
        """One connection was refused or closed early, for ``reason`` (one of REASONS)."""

    def open_connections(self, count: int) -> None:
        """The worker holds ``count`` connections (reported every few seconds)."""


def error_response(status: int, reason: str, message: str = "") -> bytes:
    """A complete ``Connection: close`` HTTP/1.1 answer with a JSON body
    ``{"ok": false, "error": "<reason>: <message>"}``."""
    body = json.dumps({"ok": False, "error": f"{reason}: {message}" if message else reason},
                      indent=2).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


class RefusalReport:
    """Counts refusals for the observer and the log: every refusal goes to the observer at
    once; the log gets one line per :data:`SUMMARY_EVERY` seconds with the counts by reason.
    An observer that raises is logged at debug level and otherwise ignored."""

    def __init__(self, observer: ConnectionObserver | None, now: float) -> None:
        self._observer = observer
        self._counts: Counter[str] = Counter()
        self._since = now
        self._gauge_at = now

    def count(self, reason: str) -> None:
        """One refusal for ``reason``."""
        self._counts[reason] += 1
        if self._observer is not None:
            try:
                self._observer.refused(reason)
            except Exception:  # a metrics backend must never stop the loop
                log.debug("[!] [api] connection observer failed", exc_info=True)

    def tick(self, now: float, open_connections: int, *, force: bool = False) -> None:
        """Report the open connections and, when due (or ``force``), the summary."""
        if now >= self._gauge_at and self._observer is not None:
            self._gauge_at = now + GAUGE_EVERY
            try:
                self._observer.open_connections(open_connections)
            except Exception:
                log.debug("[!] [api] connection observer failed", exc_info=True)
        if now - self._since >= SUMMARY_EVERY or force:
            if self._counts:
                counts = ", ".join(f"{reason} {n}" for reason, n in sorted(self._counts.items()))
                log.warning("[!] [api] connections refused or closed early in the last %.0f s: "
                            "%s", now - self._since, counts)
                self._counts.clear()
            self._since = now
