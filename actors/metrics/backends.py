"""The metrics interface every actor calls, and the backends that hold no socket
(reference §6). The network backends are in :mod:`vmpooler.actors.metrics.push` and
:mod:`vmpooler.actors.metrics.prometheus`; :func:`vmpooler.actors.metrics.factory.create_metrics`
builds the configured one.

Convention for every caller: pass vmpooler's metric name *without* the pool (or other
variable) suffix and the variable parts as tags, e.g. ``metrics.gauge("ready", 3,
tags={"pool": "debian"})`` for vmpooler's ``ready.debian``, or
``metrics.increment("vmpooler_errors.markedasfailed", tags={"pool": p})``.

What callers may rely on, for every backend:

* no method ever raises into the caller because of the network (errors are logged at
  debug level and the sample is dropped), and no call blocks for more than a short socket
  timeout;
* every backend is safe to share between threads (actors);
* ``timing`` takes **seconds**;
* ``close()`` is idempotent; network backends silently drop later calls.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

__all__ = ["Backend", "Metrics", "NullMetrics", "Record", "RecordingMetrics", "dotted_name",
           "format_number"]

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


def format_number(value: float) -> str:
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
