"""Validation of ``:tracing:`` (vmpooler 3.x: ``enabled``, ``jaeger_host``; ours:
``otlp_endpoint``, ``sample_ratio``) into :class:`~vmpooler.actors.config.model.TracingSettings`.

vmpooler sent spans to Jaeger's Thrift collector (``http://H:14268/api/traces``). Jaeger
takes OTLP too, on ``http://H:4318/v1/traces``: :func:`otlp_traces_url` maps the one to the
other, and leaves a URL that is already an OTLP one (any other port or path) as given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from vmpooler.actors.config._check import Checker
from vmpooler.actors.config.model import DEFAULT_JAEGER_HOST, TracingSettings

__all__ = ["otlp_traces_url", "tracing_settings"]

_THRIFT_PORT, _THRIFT_PATH = 14268, "/api/traces"
_OTLP_PORT, _OTLP_PATH = 4318, "/v1/traces"


def otlp_traces_url(url: str) -> tuple[str, bool]:
    """``(OTLP/HTTP traces URL, mapped)`` for a ``jaeger_host`` value: Jaeger's Thrift
    collector URL (port 14268 or path ``/api/traces``) becomes the same host's OTLP
    receiver, port 4318, path ``/v1/traces`` (``mapped`` True); any other URL is kept.
    Raises ``ValueError`` for what is not an http(s) URL with a host."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http:// or https:// URL, got {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"bad port in {url!r}") from None
    if port != _THRIFT_PORT and parts.path.rstrip("/") != _THRIFT_PATH:
        return url.strip(), False
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = f"{host}:{_OTLP_PORT}"
    if parts.username:
        netloc = f"{parts.username}{':' + parts.password if parts.password else ''}@{netloc}"
    return urlunsplit((parts.scheme, netloc, _OTLP_PATH, "", "")), True


def tracing_settings(section: Mapping[str, Any], chk: Checker) -> TracingSettings:
    """``:tracing:`` validated; each problem recorded in ``chk`` under its key."""
    path = ("tracing",)
    enabled = chk.get(section, "enabled", path, "bool", False)
    jaeger = chk.get(section, "jaeger_host", path, "str", DEFAULT_JAEGER_HOST)
    own = chk.get(section, "otlp_endpoint", path, "str", None)
    ratio = chk.get(section, "sample_ratio", path, "number", None, minimum=0, maximum=1)
    try:
        endpoint, mapped = otlp_traces_url(jaeger)
    except ValueError as exc:
        chk.fail((*path, "jaeger_host"), str(exc))
        endpoint, mapped = otlp_traces_url(DEFAULT_JAEGER_HOST)
    if own is not None:
        try:
            endpoint, _ = otlp_traces_url(own)
            mapped = False
        except ValueError as exc:
            chk.fail((*path, "otlp_endpoint"), str(exc))
    return TracingSettings(enabled=bool(enabled), jaeger_host=jaeger, endpoint=endpoint,
                           mapped=mapped, sample_ratio=None if ratio is None else float(ratio))
