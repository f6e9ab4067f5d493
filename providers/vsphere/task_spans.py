"""A finished vCenter task as spans (docs/tracing.md): under the span of the provider call
that waited for it (:func:`~vmpooler.actors.tracing.current_span`), ``vcenter.task.queued``
from the task's ``queueTime`` to its ``startTime`` and ``vcenter.task.run`` from its
``startTime`` to its ``completeTime``: vCenter's own times, not the provider's view of them.
Nothing is done when no traced call waits (tracing off, or a call outside a trace)."""

from __future__ import annotations

import datetime
import time
from typing import Any

from vmpooler.actors.tracing import current_span

__all__ = ["trace_task"]


def _epoch(value: Any) -> float | None:
    """A TaskInfo time (an aware ``datetime``) in epoch seconds; None when absent."""
    if not isinstance(value, datetime.datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return float(value.timestamp())


def trace_task(info: Any, moid: str, what: str) -> None:
    """Add the spans of the finished task ``moid`` (``info`` its TaskInfo) for ``what``
    (``clone of 'vm1'``) to the current span. Never raises."""
    span = current_span()
    if not span.recording:
        return
    queued, started, completed = (_epoch(getattr(info, name, None))
                                  for name in ("queueTime", "startTime", "completeTime"))
    attributes = {"vcenter.task": moid, "vcenter.task.state": str(getattr(info, "state", "")),
                  "vcenter.task.operation": str(getattr(info, "descriptionId", "") or ""),
                  "vmpooler.what": what}
    if queued is not None and started is not None:
        span.child("vcenter.task.queued", attributes=attributes, start=queued,
                   end=max(queued, started))
    if started is not None:
        span.child("vcenter.task.run", attributes=attributes, start=started,
                   end=max(started, completed if completed is not None else time.time()))
