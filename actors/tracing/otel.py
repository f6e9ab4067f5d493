"""The OpenTelemetry-backed tracer (the ``tracing`` extra): imported by
:func:`~vmpooler.actors.tracing.setup.build_tracer` only when tracing is on.

Spans go through a batch processor (its thread sends every few seconds, or
``OTEL_BSP_SCHEDULE_DELAY`` ms) to the OTLP/HTTP protobuf exporter. The tracer provider is
this object's own, never installed as OpenTelemetry's global one.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from vmpooler.actors.tracing.plan import ExportPlan
from vmpooler.actors.tracing.spans import Attributes, Span, Tracer, _enter, _leave, current_span

__all__ = ["OtelSpan", "OtelTracer", "sampler_of"]

_KINDS = {"internal": trace.SpanKind.INTERNAL, "server": trace.SpanKind.SERVER,
          "client": trace.SpanKind.CLIENT, "producer": trace.SpanKind.PRODUCER,
          "consumer": trace.SpanKind.CONSUMER}
_PROPAGATOR = TraceContextTextMapPropagator()


def sampler_of(chosen: ExportPlan) -> Sampler:
    """The SDK sampler of ``chosen.sampler`` (and its ratio)."""
    name = chosen.sampler
    if name.endswith("traceidratio"):
        root: Sampler = TraceIdRatioBased(1.0 if chosen.ratio is None else chosen.ratio)
    else:
        root = ALWAYS_OFF if name.endswith("always_off") else ALWAYS_ON
    return ParentBased(root) if name.startswith("parentbased_") else root


def _ns(at: float | None) -> int | None:
    return None if at is None else int(at * 1e9)


class OtelSpan(Span):
    """A :class:`~vmpooler.actors.tracing.spans.Span` over an SDK span."""

    __slots__ = ("_ended", "_span", "_token", "_tracer")

    def __init__(self, span: trace.Span, tracer: trace.Tracer) -> None:
        self._span, self._tracer = span, tracer
        self._ended = False
        self._token: Any = None

    @property
    def recording(self) -> bool:
        return self._span.is_recording()

    @property
    def traceparent(self) -> str:
        ctx = self._span.get_span_context()
        if not ctx.is_valid:
            return ""
        return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"

    def set(self, key: str, value: str | int | float | bool) -> None:
        self._span.set_attribute(key, value)

    def rename(self, name: str) -> None:
        self._span.update_name(name)

    def event(self, name: str, attributes: Attributes | None = None,
              at: float | None = None) -> None:
        self._span.add_event(name, dict(attributes or {}), _ns(at))

    def child(self, name: str, *, attributes: Attributes | None = None,
              start: float | None = None, end: float | None = None) -> Span:
        span = self._tracer.start_span(name, context=trace.set_span_in_context(self._span),
                                       attributes=dict(attributes or {}), start_time=_ns(start))
        child = OtelSpan(span, self._tracer)
        if end is not None:
            child.end(end)
        return child

    def fail(self, message: str) -> None:
        self._span.set_status(Status(StatusCode.ERROR, message))

    def end(self, at: float | None = None) -> None:
        if not self._ended:
            self._ended = True
            self._span.end(_ns(at))

    def __enter__(self) -> Span:
        self._token = _enter(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if value is not None:
            self.fail(f"{type(value).__name__}: {value}")
        self.end()
        if self._token is not None:
            _leave(self._token)
            self._token = None


class OtelTracer(Tracer):
    """A :class:`~vmpooler.actors.tracing.spans.Tracer` exporting to ``chosen.endpoint``
    as ``service``."""

    __slots__ = ("_provider", "_tracer")

    def __init__(self, chosen: ExportPlan, service: str) -> None:
        # no exit hook of the SDK's own: the process shuts it down (build_tracer's caller)
        self._provider = TracerProvider(resource=Resource.create({"service.name": service}),
                                        sampler=sampler_of(chosen), shutdown_on_exit=False)
        self._provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=chosen.endpoint)))
        self._tracer = self._provider.get_tracer("vmpooler")

    @property
    def enabled(self) -> bool:
        return True

    def start(self, name: str, *, parent: str = "", attributes: Attributes | None = None,
              kind: str = "internal", at: float | None = None) -> Span:
        context: Context | None
        if parent:
            context = _PROPAGATOR.extract({"traceparent": parent})
        else:
            here = current_span()
            context = (trace.set_span_in_context(here._span)
                       if isinstance(here, OtelSpan) else None)
        span = self._tracer.start_span(name, context=context, kind=_KINDS[kind],
                                       attributes=dict(attributes or {}), start_time=_ns(at))
        return OtelSpan(span, self._tracer)

    def shutdown(self, timeout: float = 5.0) -> None:
        self._provider.force_flush(int(timeout * 1000))
        self._provider.shutdown()
