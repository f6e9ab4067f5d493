"""Validation of the metrics sections: which backend is active (``:datadog:``,
``:statsd:``, ``:graphite:``, ``:prometheus:``, in that precedence) and its settings."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from vmpooler.actors.config._check import Checker
from vmpooler.actors.config.model import MetricsSettings, PrometheusSettings

__all__ = ["metrics_settings"]


def metrics_settings(doc: Mapping[str, Any], chk: Checker, data_dir: str) -> MetricsSettings:
    """The active metrics backend of ``doc`` and its settings (``none`` without one); each
    problem recorded in ``chk``, each section ignored for precedence noted."""
    chosen = [name for name in ("datadog", "statsd", "graphite", "prometheus")
              if name in doc and (name in ("datadog", "prometheus") or doc[name] is not None)]
    for name in chosen[1:]:
        chk.note(f":{name}: is ignored because :{chosen[0]}: takes precedence")
    if not chosen:
        return MetricsSettings()
    backend = chosen[0]
    path = (backend,)
    section = chk.mapping(doc[backend], path)
    if backend == "prometheus":
        return _prometheus(section, chk, data_dir)
    port_limits = {"minimum": 1, "maximum": 65535}
    if backend == "datadog":
        prefix = chk.get(section, "prefix", path, "str") or chk.get(
            section, "namespace", path, "str", "vmpooler")
        tags = section.get("tags")
        if isinstance(tags, Mapping):
            tags = [f"{key}:{value}" for key, value in tags.items()]
        return MetricsSettings(
            backend=backend,
            host=chk.get(section, "host", path, "str", "127.0.0.1"),
            port=chk.get(section, "port", path, "int", 8125, **port_limits),
            prefix=prefix,
            tags=chk.get({"tags": tags}, "tags", path, "strs", ()),
        )
    host = chk.require(section, "server", path, "str")
    return MetricsSettings(
        backend=backend,
        host=host if isinstance(host, str) else None,
        port=chk.get(section, "port", path, "int", 8125 if backend == "statsd" else 2003,
                     **port_limits),
        prefix=chk.get(section, "prefix", path, "str", "vmpooler"),
    )


def _prometheus(section: Mapping[str, Any], chk: Checker, data_dir: str) -> MetricsSettings:
    """``:prometheus:``: ``prefix`` (the ``vmpooler_instance`` label), ``prometheus_prefix``
    (the metric name prefix), ``prometheus_endpoint``, and ours, ``multiprocess_dir``."""
    path = ("prometheus",)
    instance = chk.get(section, "prefix", path, "str", "vmpooler")
    namespace = chk.get(section, "prometheus_prefix", path, "str", "vmpooler")
    if isinstance(namespace, str) and not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", namespace):
        chk.fail((*path, "prometheus_prefix"),
                 f"{namespace!r} is not a Prometheus metric name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*)")
    endpoint = chk.get(section, "prometheus_endpoint", path, "str", "/prometheus")
    if isinstance(endpoint, str) and not endpoint.startswith("/"):
        chk.fail((*path, "prometheus_endpoint"),
                 f"expected a path starting with /, got {endpoint!r}")
    directory = chk.get(section, "multiprocess_dir", path, "str",
                        str(PurePath(data_dir) / "prometheus"))
    return MetricsSettings(
        backend="prometheus", prefix=namespace, tags=(f"vmpooler_instance:{instance}",),
        prometheus=PrometheusSettings(endpoint=endpoint, multiprocess_dir=directory),
    )
