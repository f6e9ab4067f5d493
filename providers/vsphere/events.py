"""vCenter's events for a VM that failed: why a clone failed or a VM never became ready.

``log_vm_events_on_failure`` (vmpooler PR #629, vmpooler-provider-vsphere PR #54): when a
pending VM fails, the operator sees what vCenter recorded, e.g. "Insufficient resources to
satisfy configured failover level", instead of "timeout". One ``QueryEvents`` call per
entity, bounded by ``maxCount`` (``max_vm_events``); nothing here raises.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from pyVmomi import vim

__all__ = ["event_line", "failure_events", "query_events"]

log = logging.getLogger(__name__)

_SOURCE_FACTOR = 5
"""A template's events are read ``_SOURCE_FACTOR`` times as deep as a VM's: other clones of
the same template share its event stream, and only those of our clone are kept."""


def query_events(session: Any, entity: Any, max_count: int) -> list[Any]:
    """The newest ``max_count`` events of ``entity`` (itself only, not its children),
    oldest first. One SOAP call."""
    spec = vim.event.EventFilterSpec(
        entity=vim.event.EventFilterSpec.ByEntity(entity=entity, recursion="self"),
        maxCount=max_count)
    events = list(session.content.eventManager.QueryEvents(spec) or ())
    events.sort(key=lambda e: (e.createdTime, e.key))
    return events[-max_count:]


def failure_events(session: Any, vm_ref: Any | None, source_ref: Any | None, vm: str,
                   max_count: int) -> list[Any]:
    """The events that tell why ``vm`` failed, oldest first, at most ``max_count``: the VM's
    own when it exists, and those its template recorded about cloning it (``destName``)."""
    found: list[Any] = []
    if source_ref is not None:
        found.extend(e for e in query_events(session, source_ref, max_count * _SOURCE_FACTOR)
                     if getattr(e, "destName", None) == vm)
    if vm_ref is not None:
        found.extend(query_events(session, vm_ref, max_count))
    found.sort(key=lambda e: (e.createdTime, e.key))
    return found[-max_count:]


def event_line(event: Any) -> str:
    """One event as one line: its time, its type and vCenter's message for it."""
    when = event.createdTime
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ") if hasattr(when, "strftime") else str(when)
    kind = type(event).__name__.rsplit(".", 1)[-1]
    message = " ".join(str(event.fullFormattedMessage or "").split())
    return f"{stamp} {kind}: {message}"[:500]


def log_events(pool: str, vm: str, why: str, events: Iterable[Any]) -> int:
    """Log each event at warning level under the pool's name; how many were logged."""
    count = 0
    for event in events:
        log.warning("[!] [%s] '%s' %s; vCenter event: %s", pool, vm, why, event_line(event))
        count += 1
    if count == 0:
        log.warning("[!] [%s] '%s' %s; vCenter recorded no event for it", pool, vm, why)
    return count
