"""Bounded label values for the metrics a request feeds (reference §6 families).

A client chooses its path, method, pool names, user name and tag values. A metric that took
them as they came would grow one series per distinct value — a Prometheus file entry, a
statsd/graphite name, a DogStatsD context — without end. :class:`LabelRule` is the one rule
every value of request origin goes through before it becomes part of a metric, whatever the
backend:

* a **pool** (tag ``pool``, label ``poolname``) is kept when it names a known pool or alias
  (or such a name with ``.`` written ``_``, the usage metrics' form), else it is
  :data:`UNKNOWN`;
* a **method** is kept (in the case given) when it is one of :data:`HTTP_METHODS`, else it is
  :data:`OTHER_METHOD`;
* a **route parameter** left in a path label (see :mod:`vmpooler.web.api_prometheus`) is kept
  when it is one of the values listed for that parameter, else it stays ``{name}``;
* **any other tag value** (user names, the parts of a Jenkins URL, ...) is kept while the
  metric has fewer than ``series_per_metric`` distinct combinations of such values in this
  process and the value is at most :data:`MAX_VALUE` characters; otherwise every one of them
  is :data:`OTHER`. Values that code chooses (operations, status codes) never come near
  the budget, so they are unaffected.

:class:`BoundedMetrics` applies the rule to the tags of every call of a ``Metrics``. A
well-behaved client's series keep vmpooler's names: only values a configuration does not
know (or the budget's overflow) are replaced.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Iterable, Mapping

from vmpooler.actors.metrics.backends import Backend, Metrics

__all__ = [
    "HTTP_METHODS",
    "MAX_VALUE",
    "OTHER",
    "OTHER_METHOD",
    "SERIES_PER_METRIC",
    "UNKNOWN",
    "BoundedMetrics",
    "LabelRule",
]

UNKNOWN = "unknown"
"""A pool no configuration knows (vmpooler's value for an empty checkout body)."""
OTHER = "other"
"""Any other free tag value beyond the budget or too long."""
OTHER_METHOD = "OTHER"
"""A method not in :data:`HTTP_METHODS` (``other`` in the Prometheus ``method`` label)."""
HTTP_METHODS: frozenset[str] = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT"})
"""RFC 9110's methods and PATCH; any other token is a valid method to gunicorn."""
SERIES_PER_METRIC = 1000
"""Distinct combinations of free tag values a metric may have per process."""
MAX_VALUE = 128
"""Longest free tag value kept, in characters."""

_FIELD = re.compile(r"\{(\w+)(?::[^}]*)?\}")


class LabelRule:
    """The rule (see the module docstring). Thread-safe; the free-value budget is this
    object's, so share one per process."""

    def __init__(self, pools: Iterable[str], *,
                 params: Mapping[str, Collection[str]] | None = None,
                 series_per_metric: int = SERIES_PER_METRIC) -> None:
        names = set(pools)
        self._pools = frozenset(names | {name.replace(".", "_") for name in names})
        self._params = {key: frozenset(values) for key, values in (params or {}).items()}
        self._budget = series_per_metric
        self._lock = threading.Lock()
        self._admitted: set[tuple[str, tuple[str, ...]]] = set()
        self._used: dict[str, int] = {}

    def pool(self, name: object) -> str:
        """``name`` if it is a known pool or alias, else :data:`UNKNOWN`."""
        return name if isinstance(name, str) and name in self._pools else UNKNOWN

    def method(self, method: str) -> str:
        """``method`` if it is one of :data:`HTTP_METHODS` (in any case: vmpooler's
        ``http_requests_vm_total`` says ``post``), else :data:`OTHER_METHOD`."""
        return method if method.upper() in HTTP_METHODS else OTHER_METHOD

    def template(self, template: str, params: Mapping[str, str]) -> str:
        """``template`` (a route's, ``/summary/{route}``) with each field whose value in
        ``params`` is listed for it filled in; any other field stays ``{name}``."""
        def fill(match: re.Match[str]) -> str:
            value = params.get(match[1])
            return value if value is not None and value in self._params.get(
                match[1], ()) else f"{{{match[1]}}}"
        return _FIELD.sub(fill, template)

    def tags(self, name: str, tags: Mapping[str, object]) -> dict[str, str]:
        """The tags of one call of the metric ``name``, bounded."""
        out: dict[str, str] = {}
        free: list[str] = []
        for key, value in tags.items():
            if key == "pool":
                out[key] = self.pool(value)
            elif key == "method":
                out[key] = self.method(str(value))
            else:
                out[key] = str(value)
                free.append(key)
        if free and not self._admit(name, tuple(out[key] for key in free)):
            for key in free:
                out[key] = OTHER
        return out

    def _admit(self, name: str, values: tuple[str, ...]) -> bool:
        if any(len(value) > MAX_VALUE for value in values):
            return False
        combination = (name, values)
        if combination in self._admitted:  # the usual case: no lock taken
            return True
        with self._lock:
            if combination in self._admitted:
                return True
            used = self._used.get(name, 0)
            if used >= self._budget:
                return False
            self._admitted.add(combination)
            self._used[name] = used + 1
            return True


class BoundedMetrics(Backend):
    """``inner`` with every call's tags passed through ``rule`` first (names unchanged).

    ``close()`` closes ``inner``.
    """

    def __init__(self, inner: Metrics, rule: LabelRule) -> None:
        self.inner = inner
        self.rule = rule

    def _emit(self, kind: str, name: str, value: float,
              tags: Mapping[str, str] | None) -> None:
        bounded = self.rule.tags(name, tags) if tags else tags
        if kind == "increment":
            self.inner.increment(name, tags=bounded, value=int(value))
        elif kind == "gauge":
            self.inner.gauge(name, value, tags=bounded)
        else:
            self.inner.timing(name, value, tags=bounded)

    def close(self) -> None:
        self.inner.close()
