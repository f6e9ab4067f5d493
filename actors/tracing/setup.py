"""The process's tracer from the configuration: :func:`check_tracing` (before a process
starts) and :func:`build_tracer` (in the process that traces); see :mod:`.plan` for where
spans go and which traces are kept."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from vmpooler.actors.config.model import Config
from vmpooler.actors.tracing.plan import (
    INSTALL_HINT,
    ExportPlan,
    TracingError,
    plan,
    service_name,
)
from vmpooler.actors.tracing.spans import NULL_TRACER, Tracer

__all__ = ["build_tracer", "check_tracing"]


def check_tracing(config: Config, role: str,
                  environ: Mapping[str, str] | None = None) -> str | None:
    """Before a ``role`` process starts (``api``, ``manager`` or ``run``): None with tracing
    off, else the line to log once (the service, where spans go, the sampler). Raises
    :class:`TracingError` when the ``tracing`` extra is not installed or an ``OTEL_*``
    value is bad. Imports OpenTelemetry only with tracing on."""
    if not config.tracing.enabled:
        return None
    chosen = plan(config.tracing, os.environ if environ is None else environ)
    _otel()
    mapped = (f" (jaeger_host {config.tracing.jaeger_host} mapped to Jaeger's OTLP receiver)"
              if chosen.source == "tracing.jaeger_host" and config.tracing.mapped else "")
    ratio = "" if chosen.ratio is None else f" {chosen.ratio:g}"
    return (f"{service_name(role, config.settings.prefix)} sends spans to {chosen.endpoint} "
            f"over OTLP/HTTP{mapped}, sampler {chosen.sampler}{ratio}")


def _otel() -> Callable[[ExportPlan, str], Tracer]:
    try:
        from vmpooler.actors.tracing.otel import OtelTracer
    except ImportError as exc:
        raise TracingError(f"tracing is enabled but OpenTelemetry is not installed ({exc.name}"
                           f" is missing): {INSTALL_HINT}") from None
    return OtelTracer


def build_tracer(config: Config, role: str,
                 environ: Mapping[str, str] | None = None) -> Tracer:
    """The tracer of a ``role`` process: :data:`~vmpooler.actors.tracing.spans.NULL_TRACER`
    unless ``:tracing: enabled``, when OpenTelemetry is imported and the exporter started
    (its thread: build it after a fork, in the process that traces). Raises as
    :func:`check_tracing`. The caller calls ``shutdown()`` at the end (it sends what is
    left)."""
    if not config.tracing.enabled:
        return NULL_TRACER
    chosen = plan(config.tracing, os.environ if environ is None else environ)
    return _otel()(chosen, service_name(role, config.settings.prefix))
