"""The queue health check's figures and verdict (reference §4.11), free of Redis and actors.

:func:`health_metrics` builds the document vmpooler stores as JSON in the ``metrics`` field
of ``vmpooler__health``, with vmpooler's keys and nesting::

    {"queues": {<pool>: {"pending": {"size", "oldest_age", "avg_age", "stuck_count"},
                         "ready": {"size", "oldest_age", "avg_age"},
                         "completed": {"size"}}, ...,
                "dlq": {<queue>: {"size"}}},            # only with dlq_enabled
     "tasks": {"clone": {"active"}, "ondemand": {"active", "pending"}},
     "errors": {"dlq_total_size", "stuck_vm_count", "orphaned_metadata_count"}}

Ages are whole seconds. :func:`health_status` applies vmpooler's thresholds in vmpooler's
order; :func:`emit_gauges` sends the ``vmpooler_health.*`` gauges.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.storage.upkeep_store import QueueAges

__all__ = ["STATUS_GAUGE", "emit_gauges", "health_metrics", "health_status", "metrics_json",
           "summary"]

STATUS_GAUGE = {"healthy": 0, "degraded": 1, "unhealthy": 2}
"""Value of the ``vmpooler_health.status`` gauge for each verdict."""


def _ages(now: float, stamps: Sequence[float]) -> list[int]:
    return [int(now - stamp) for stamp in stamps]


def health_metrics(
    *, now: float, pools: Sequence[str], ages: Mapping[str, QueueAges],
    thresholds: Mapping[str, float], tasks: tuple[int, int, int],
    dlq_sizes: Mapping[str, int] | None, orphaned: int,
) -> dict[str, Any]:
    """The health document for ``pools`` (in this order); ``dlq_sizes`` None leaves the
    ``dlq`` entry out, as vmpooler does when the DLQ is disabled."""
    queues: dict[str, Any] = {}
    stuck_total = 0
    for pool in pools:
        figures = ages[pool]
        pending = _ages(now, figures.pending_times)
        ready = _ages(now, figures.ready_times)
        stuck = sum(1 for age in pending if age > thresholds["stuck_vm_age_threshold"])
        stuck_total += stuck
        queues[pool] = {
            "pending": {"size": figures.pending, "oldest_age": max(pending, default=0),
                        "avg_age": sum(pending) // len(pending) if pending else 0,
                        "stuck_count": stuck},
            "ready": {"size": figures.ready, "oldest_age": max(ready, default=0),
                      "avg_age": sum(ready) // len(ready) if ready else 0},
            "completed": {"size": figures.completed},
        }
    dlq_total = 0
    if dlq_sizes is not None:
        for queue, size in dlq_sizes.items():
            queues.setdefault("dlq", {})[queue] = {"size": size}
            dlq_total += size
    clone, ondemand, waiting = tasks
    return {
        "queues": queues,
        "tasks": {"clone": {"active": clone},
                  "ondemand": {"active": ondemand, "pending": waiting}},
        "errors": {"dlq_total_size": dlq_total, "stuck_vm_count": stuck_total,
                   "orphaned_metadata_count": orphaned},
    }


def _pool_sizes(metrics: Mapping[str, Any]) -> list[tuple[int, int]]:
    return [(q["pending"]["size"], q["ready"]["size"])
            for name, q in metrics["queues"].items() if name != "dlq"]


def health_status(metrics: Mapping[str, Any], thresholds: Mapping[str, float]) -> str:
    """``unhealthy``, ``degraded`` or ``healthy``, by vmpooler's rules: a DLQ over
    ``dlq_max_critical``, stuck VMs over ``stuck_vm_max_critical``, or a pool's pending or
    ready set over twice its maximum is unhealthy; the warning levels and the plain maxima
    are degraded."""
    dlq = metrics["errors"]["dlq_total_size"]
    stuck = metrics["errors"]["stuck_vm_count"]
    sizes = _pool_sizes(metrics)
    t = thresholds
    if dlq > t["dlq_max_critical"] or stuck > t["stuck_vm_max_critical"]:
        return "unhealthy"
    if any(p > t["pending_queue_max"] * 2 or r > t["ready_queue_max"] * 2 for p, r in sizes):
        return "unhealthy"
    if dlq > t["dlq_max_warning"] or stuck > t["stuck_vm_max_warning"]:
        return "degraded"
    if any(p > t["pending_queue_max"] or r > t["ready_queue_max"] for p, r in sizes):
        return "degraded"
    return "healthy"


def metrics_json(metrics: Mapping[str, Any]) -> str:
    """The document as Ruby's ``to_json`` writes it (compact)."""
    return json.dumps(metrics, separators=(",", ":"))


def summary(metrics: Mapping[str, Any], status: str) -> str:
    """vmpooler's one-line log summary of a check."""
    totals = [0, 0, 0]
    for name, q in metrics["queues"].items():
        if name != "dlq":
            totals[0] += q["pending"]["size"]
            totals[1] += q["ready"]["size"]
            totals[2] += q["completed"]["size"]
    errors = metrics["errors"]
    return (f"[*] [health] Status: {status.upper()} | Queues: P={totals[0]} R={totals[1]} "
            f"C={totals[2]} | DLQ={errors['dlq_total_size']} | "
            f"Stuck={errors['stuck_vm_count']} | Orphaned={errors['orphaned_metadata_count']}")


def emit_gauges(metrics: Mapping[str, Any], status: str, sink: Metrics) -> None:
    """vmpooler's ``vmpooler_health.*`` gauges; the pool and the DLQ queue are tags
    (``pool``, ``queue``), the status last (0 healthy, 1 degraded, 2 unhealthy)."""
    errors = metrics["errors"]
    sink.gauge("vmpooler_health.dlq.total_size", errors["dlq_total_size"])
    sink.gauge("vmpooler_health.stuck_vms.count", errors["stuck_vm_count"])
    sink.gauge("vmpooler_health.orphaned_metadata.count", errors["orphaned_metadata_count"])
    for name, q in metrics["queues"].items():
        if name == "dlq":
            continue
        tags = {"pool": name}
        sink.gauge("vmpooler_health.queue.pending.size", q["pending"]["size"], tags=tags)
        sink.gauge("vmpooler_health.queue.pending.oldest_age", q["pending"]["oldest_age"],
                   tags=tags)
        sink.gauge("vmpooler_health.queue.pending.stuck_count", q["pending"]["stuck_count"],
                   tags=tags)
        sink.gauge("vmpooler_health.queue.ready.size", q["ready"]["size"], tags=tags)
        sink.gauge("vmpooler_health.queue.ready.oldest_age", q["ready"]["oldest_age"],
                   tags=tags)
        sink.gauge("vmpooler_health.queue.completed.size", q["completed"]["size"], tags=tags)
    for queue, figures in metrics["queues"].get("dlq", {}).items():
        sink.gauge("vmpooler_health.dlq.size", figures["size"], tags={"queue": queue})
    tasks = metrics["tasks"]
    sink.gauge("vmpooler_health.tasks.clone.active", tasks["clone"]["active"])
    sink.gauge("vmpooler_health.tasks.ondemand.active", tasks["ondemand"]["active"])
    sink.gauge("vmpooler_health.tasks.ondemand.pending", tasks["ondemand"]["pending"])
    sink.gauge("vmpooler_health.status", STATUS_GAUGE.get(status, 2))
