"""What tracing offers the rest of vmpooler, and its no-op form: :class:`Span`,
:class:`Tracer`, :data:`NULL_TRACER` and :func:`current_span`.

Nothing here imports OpenTelemetry: with tracing off every call is a method of the no-op
classes below and returns at once (BENCHMARKS.md, "Tracing"). The OpenTelemetry-backed
classes (:mod:`vmpooler.actors.tracing.otel`) override every method.

A trace crosses actors and processes as a W3C ``traceparent`` string
(``00-<trace id>-<span id>-<flags>``; '' for none): messages carry it, :meth:`Tracer.start`
takes it as ``parent``.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from types import TracebackType
from typing import Any

__all__ = ["NULL_SPAN", "NULL_TRACER", "Attributes", "Span", "Tracer", "current_span"]

Attributes = Mapping[str, str | int | float | bool]
"""A span's or an event's attributes (never tokens nor passwords)."""


class Span:
    """One span; this base class records nothing. Methods never raise; a span may be
    ended from any thread, once (later calls do nothing). Used as a context manager it is
    the :func:`current_span` of the block (its children made by providers hang under it),
    and is ended at the block's end, marked failed by an exception that leaves it."""

    __slots__ = ()

    @property
    def recording(self) -> bool:
        """False for a span that records nothing (tracing off, or not sampled)."""
        return False

    @property
    def traceparent(self) -> str:
        """The span's W3C ``traceparent`` ('' for a span of no trace)."""
        return ""

    def set(self, key: str, value: str | int | float | bool) -> None:
        """Set an attribute."""

    def rename(self, name: str) -> None:
        """Give the span another name (one known only once it ran)."""

    def event(self, name: str, attributes: Attributes | None = None,
              at: float | None = None) -> None:
        """Add an event at ``at`` (epoch seconds; now when None)."""

    def child(self, name: str, *, attributes: Attributes | None = None,
              start: float | None = None, end: float | None = None) -> Span:
        """A child span starting at ``start`` (epoch seconds; now when None), ended at
        ``end`` when that is given."""
        return self

    def fail(self, message: str) -> None:
        """Mark the span failed, saying why."""

    def end(self, at: float | None = None) -> None:
        """End the span at ``at`` (epoch seconds; now when None)."""

    def __enter__(self) -> Span:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        return None


class Tracer:
    """Makes spans; this base class makes only :data:`NULL_SPAN`. Thread-safe."""

    __slots__ = ()

    @property
    def enabled(self) -> bool:
        """False when nothing is ever recorded: callers may skip building attributes."""
        return False

    def start(self, name: str, *, parent: str = "", attributes: Attributes | None = None,
              kind: str = "internal", at: float | None = None) -> Span:
        """A span started at ``at`` (epoch seconds; now when None), child of ``parent`` (a
        ``traceparent``) or, without one, of :func:`current_span`; ``kind`` is
        ``internal``, ``server``, ``client``, ``producer`` or ``consumer``. The caller ends
        it (or uses it as a context manager)."""
        return NULL_SPAN

    def shutdown(self, timeout: float = 5.0) -> None:
        """Send the spans not yet sent (waiting up to ``timeout`` seconds) and stop."""


NULL_SPAN = Span()
"""The span that records nothing."""

NULL_TRACER = Tracer()
"""The tracer of tracing off."""

_CURRENT: ContextVar[Span] = ContextVar("vmpooler_current_span", default=NULL_SPAN)


def current_span() -> Span:
    """The span of the block running now in this thread (or context), :data:`NULL_SPAN`
    outside every span: a provider hangs its own spans and events on it."""
    return _CURRENT.get()


def _enter(span: Span) -> Any:
    """Make ``span`` current; the token :func:`_leave` takes (for the OpenTelemetry spans)."""
    return _CURRENT.set(span)


def _leave(token: Any) -> None:
    _CURRENT.reset(token)
