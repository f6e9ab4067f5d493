"""Where spans go and which traces are kept: :func:`plan`, pure (the configuration and
the environment in, an :class:`ExportPlan` out).

Where spans go, first found wins: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (as given),
``OTEL_EXPORTER_OTLP_ENDPOINT`` (``/v1/traces`` appended, as the OpenTelemetry
specification says), then ``:tracing:`` (``otlp_endpoint``, else ``jaeger_host`` mapped to
OTLP: :mod:`vmpooler.actors.config._tracing`). Headers, timeout and compression are the
exporter's own ``OTEL_EXPORTER_OTLP_(TRACES_)*`` variables.

Which traces are kept: ``OTEL_TRACES_SAMPLER`` (with ``OTEL_TRACES_SAMPLER_ARG``) when set,
else ``:tracing: sample_ratio`` as ``parentbased_traceidratio``, else every trace
(``parentbased_always_on``). A parent-based sampler follows the decision the API made: a
request's trace is kept whole or not at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vmpooler.actors.config.model import TracingSettings

__all__ = ["INSTALL_HINT", "SAMPLERS", "ExportPlan", "TracingError", "plan", "service_name"]

SAMPLERS = frozenset({"always_on", "always_off", "traceidratio", "parentbased_always_on",
                      "parentbased_always_off", "parentbased_traceidratio"})
"""The values of ``OTEL_TRACES_SAMPLER`` understood."""

INSTALL_HINT = "pip install 'vmpooler[tracing]'"

_ROLES = {"api": "vmpooler-api", "manager": "vmpooler-manager", "run": "vmpooler"}


class TracingError(Exception):
    """Tracing cannot start as configured; ``str()`` is one line for the operator."""


@dataclass(frozen=True, slots=True)
class ExportPlan:
    """Where spans go and which traces are kept. ``source`` names what chose the endpoint
    (a variable or a ``:tracing:`` key); ``sampler`` is a name of :data:`SAMPLERS` and
    ``ratio`` its argument (the ratio samplers only)."""

    endpoint: str
    source: str
    sampler: str = "parentbased_always_on"
    ratio: float | None = None


def service_name(role: str, prefix: str = "") -> str:
    """vmpooler's ``service.name``: ``vmpooler-api``, ``vmpooler-manager`` or ``vmpooler``
    (``run``), suffixed ``-<prefix>`` when ``:config: prefix`` is set."""
    base = _ROLES[role]
    return f"{base}-{prefix}" if prefix else base


def _get(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name, "").strip()
    return value or None


def plan(settings: TracingSettings, environ: Mapping[str, str]) -> ExportPlan:
    """The :class:`ExportPlan` of ``settings`` under ``environ``. Raises
    :class:`TracingError` naming the variable for a bad ``OTEL_*`` value."""
    if (url := _get(environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) is not None:
        endpoint, source = url, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    elif (url := _get(environ, "OTEL_EXPORTER_OTLP_ENDPOINT")) is not None:
        endpoint, source = url.rstrip("/") + "/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT"
    else:
        endpoint = settings.endpoint
        source = "tracing.jaeger_host" if settings.mapped or settings.endpoint == \
            settings.jaeger_host else "tracing.otlp_endpoint"
    if not endpoint.startswith(("http://", "https://")):
        raise TracingError(f"{source}: expected an http:// or https:// URL, got {endpoint!r}")
    sampler = _get(environ, "OTEL_TRACES_SAMPLER")
    if sampler is None:
        if settings.sample_ratio is None:
            return ExportPlan(endpoint, source)
        return ExportPlan(endpoint, source, "parentbased_traceidratio", settings.sample_ratio)
    sampler = sampler.lower()
    if sampler not in SAMPLERS:
        raise TracingError(f"OTEL_TRACES_SAMPLER: expected one of {', '.join(sorted(SAMPLERS))}"
                           f", got {sampler!r}")
    if not sampler.endswith("traceidratio"):
        return ExportPlan(endpoint, source, sampler)
    text = _get(environ, "OTEL_TRACES_SAMPLER_ARG") or "1.0"
    try:
        ratio = float(text)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise TracingError(f"OTEL_TRACES_SAMPLER_ARG: expected a number between 0 and 1, "
                           f"got {text!r}")
    return ExportPlan(endpoint, source, sampler, ratio)
