"""The Prometheus backend of ``Metrics`` (reference §6), on ``prometheus_client``.

Calls are mapped onto vmpooler's families by :mod:`vmpooler.actors.metrics.prometheus_families`;
every series also carries the constant labels (``vmpooler_instance=<prefix>``). What callers
may rely on, beyond the ``Metrics`` contract:

* counters ``increment``, gauges ``set`` (not truncated to integers, unlike vmpooler),
  histograms ``observe`` seconds; a call of the wrong kind for its family (a ``timing`` on a
  counter family) is dropped and logged once, as is an unknown name;
* **multiprocess mode**: after :func:`prepare_multiprocess` (the CLI calls it before any
  backend exists, gunicorn forks after it), every process writes its samples to files in one
  directory and :meth:`PrometheusMetrics.exposition` aggregates all of them: counters and
  histograms summed, gauges the newest value of a live process (``livesum`` for the gauge
  families that also take increments). Without it a backend exposes only its own process;
* ``close()`` marks this process dead for the live gauges and drops later calls.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from vmpooler.actors.metrics.backends import Backend
from vmpooler.actors.metrics.prometheus_families import (
    FAMILIES,
    HTTP_BUCKETS,
    IGNORED,
    Family,
    GaugeMode,
    resolve,
)

__all__ = [
    "MULTIPROC_ENV",
    "PrometheusMetrics",
    "mark_process_dead",
    "multiprocess_dir",
    "prepare_multiprocess",
]

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_Metric = Counter | Gauge | Histogram
_M = TypeVar("_M", Counter, Gauge, Histogram)



def multiprocess_dir() -> str | None:
    """The multiprocess directory this process writes to, or None."""
    return os.environ.get(MULTIPROC_ENV) or None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prepare_multiprocess(directory: str | Path) -> Path:
    """Make ``directory`` this process's (and its children's) multiprocess directory.

    Creates it, removes the sample files of processes no longer running (so a restart
    starts the counters afresh while a running `vmpooler manager` or API sharing the
    directory keeps its own), sets ``PROMETHEUS_MULTIPROC_DIR`` and switches
    ``prometheus_client`` to file-backed values. Call it before any backend is built.
    """
    path = Path(directory).resolve()
    path.mkdir(parents=True, exist_ok=True)
    for db in path.glob("*.db"):
        pid = db.stem.rsplit("_", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                db.unlink()
    os.environ[MULTIPROC_ENV] = str(path)
    values.ValueClass = values.MultiProcessValue()
    return path


def _labels(tags: Sequence[str]) -> dict[str, str]:
    """``key:value`` strings as a label mapping."""
    return dict(tag.split(":", 1) for tag in tags if ":" in tag)


class PrometheusMetrics(Backend):
    """vmpooler's families under ``<namespace>_``, labelled with ``constant_labels`` too.

    Thread-safe. Families are created on first use, in this backend's own registry (two
    backends in one process do not clash).
    """

    def __init__(self, namespace: str = "vmpooler",
                 constant_labels: Mapping[str, str] | Sequence[str] = ()) -> None:
        self.namespace = namespace
        if isinstance(constant_labels, Mapping):
            self._constant = dict(constant_labels)
        else:
            self._constant = _labels(constant_labels)
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._metrics: dict[str, _Metric] = {}
        self._reported: set[str] = set()
        self._closed = False

    # -- Metrics protocol (increment, gauge, timing: Backend routes them to _emit) ----------
    def close(self) -> None:
        """Drop later calls; in multiprocess mode, mark this process dead."""
        self._closed = True
        directory = multiprocess_dir()
        if directory is not None:
            with contextlib.suppress(OSError):
                mark_process_dead(os.getpid(), directory)

    # -- HTTP middleware families ------------------------------------------------------------
    def observe_request(self, method: str, path: str, code: int, seconds: float) -> None:
        """``<ns>_http_requests_total{code,method,path}`` and
        ``<ns>_http_request_duration_seconds{method,path}``."""
        if self._closed:
            return
        try:
            requests = self._metric("http_requests_total", Counter, ("code", "method", "path"),
                                    "The total number of HTTP requests handled by the API.")
            requests.labels(str(code), method, path, *self._constant.values()).inc()
            durations = self._metric("http_request_duration_seconds", Histogram,
                                     ("method", "path"), "The HTTP response duration of the API.",
                                     buckets=HTTP_BUCKETS)
            durations.labels(method, path, *self._constant.values()).observe(seconds)
        except Exception as exc:  # metrics never break a request
            self._report("http_requests", exc)

    def count_exception(self, exception: str) -> None:
        """``<ns>_http_exceptions_total{exception}``."""
        if self._closed:
            return
        try:
            exceptions = self._metric("http_exceptions_total", Counter, ("exception",),
                                      "The total number of exceptions raised by the API.")
            exceptions.labels(exception, *self._constant.values()).inc()
        except Exception as exc:
            self._report("http_exceptions", exc)

    # -- exposition ----------------------------------------------------------------------------
    def exposition(self) -> tuple[bytes, str]:
        """The text format body and its content type: every process of the multiprocess
        directory when there is one, this backend's registry otherwise."""
        directory = multiprocess_dir()
        if directory is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=directory)
        return generate_latest(registry), CONTENT_TYPE_LATEST

    # -- internals -------------------------------------------------------------------------------
    def _emit(self, kind: str, name: str, value: float,
              tags: Mapping[str, str] | None) -> None:
        """A counter adds ``value`` (for vmpooler's counted gauges, to the gauge); a gauge
        is set (and observed in its family's ``also`` histogram); a timing is observed."""
        if self._closed:
            return
        try:
            found = resolve(name, tags)
            if found is None:
                if name not in IGNORED:
                    self._report(name, "unknown metric name")
                return
            family = found.family
            metric = self._family_metric(found.name, family)
            labels = (*found.labels, *self._constant.values())
            if kind == "increment" and isinstance(metric, Counter | Gauge):
                metric.labels(*labels).inc(value)
            elif kind == "gauge" and isinstance(metric, Gauge):
                metric.labels(*labels).set(value)
                if family.also is not None:
                    also = FAMILIES[family.also]
                    twin = self._metric(family.also, Histogram, also.labels, also.help,
                                        buckets=also.buckets)
                    twin.labels(*labels).observe(value)
            elif kind == "timing" and isinstance(metric, Histogram):
                metric.labels(*labels).observe(value)
            else:
                self._report(name, f"a {kind} on the {family.kind} family {found.key}")
        except Exception as exc:  # never let metrics break the caller
            self._report(name, exc)

    def _family_metric(self, exposed: str, family: Family) -> _Metric:
        if family.kind == "counter":
            return self._metric(exposed, Counter, family.labels, family.help)
        if family.kind == "gauge":
            return self._metric(exposed, Gauge, family.labels, family.help, mode=family.mode)
        return self._metric(exposed, Histogram, family.labels, family.help,
                            buckets=family.buckets)

    def _metric(self, exposed: str, kind: type[_M], labels: tuple[str, ...], help_text: str, *,
                buckets: tuple[float, ...] = (), mode: GaugeMode = "livemostrecent") -> _M:
        """The registered metric ``exposed`` (namespaced), made a ``kind`` on first use.
        ``TypeError`` if it was first made another kind."""
        full = f"{self.namespace}_{exposed}" if self.namespace else exposed
        with self._lock:
            metric = self._metrics.get(full)
            if metric is None:
                names = (*labels, *self._constant)
                if kind is Counter:
                    metric = Counter(full, help_text, names, registry=self.registry)
                elif kind is Gauge:
                    metric = Gauge(full, help_text, names, multiprocess_mode=mode,
                                   registry=self.registry)
                else:
                    metric = Histogram(full, help_text, names,
                                       buckets=buckets or HTTP_BUCKETS, registry=self.registry)
                self._metrics[full] = metric
        if not isinstance(metric, kind):
            raise TypeError(f"{full} is a {type(metric).__name__}, not a {kind.__name__}")
        return metric

    def _report(self, name: str, problem: object) -> None:
        """Log a dropped sample once per name (vmpooler logged every one)."""
        with self._lock:
            if name in self._reported:
                return
            self._reported.add(name)
        log.warning("[!] prometheus: %s dropped: %s", name, problem)
