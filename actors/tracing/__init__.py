"""Traces (OpenTelemetry, docs/tracing.md): the spans the API, the actors and the providers
make, and how the trace context crosses actors and processes.

The rest of vmpooler sees :class:`Tracer` and :class:`Span` (:mod:`.spans`), given a tracer
like a metrics backend, and :func:`current_span` (the providers). :func:`build_tracer`
(:mod:`.setup`) makes the process's tracer from the configuration; only when tracing is on
does it import OpenTelemetry (:mod:`.otel`), which is the ``tracing`` extra.
"""

from vmpooler.actors.tracing.plan import ExportPlan, TracingError, plan, service_name
from vmpooler.actors.tracing.setup import build_tracer, check_tracing
from vmpooler.actors.tracing.spans import NULL_SPAN, NULL_TRACER, Span, Tracer, current_span

__all__ = ["NULL_SPAN", "NULL_TRACER", "ExportPlan", "Span", "Tracer", "TracingError",
           "build_tracer", "check_tracing", "current_span", "plan", "service_name"]
