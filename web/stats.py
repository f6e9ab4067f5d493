"""Pure computations behind ``/status`` and ``/summary``: raw Redis data in, JSON shapes out.

Nothing here touches Redis or the clock. Inputs are the raw daily hashes vmpooler writes:
``vmpooler__clone__<date>`` / ``vmpooler__boot__<date>`` map ``"<pool>:<vm>"`` to seconds,
``vmpooler__tag__<date>`` maps ``"<vm>:<tag>"`` to the tag's value. Key order of every
object follows vmpooler 3.9.1 (reference §1.3), except the range-level statistics vmpooler
never produced (see :func:`task_summary`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from vmpooler.actors.storage.durations import DurationTotals, all_seconds, seconds

__all__ = [
    "capacity",
    "duration_metrics",
    "ondemand_requested",
    "queue",
    "round1",
    "seconds",
    "tag_metrics",
    "tag_summary",
    "task_metrics",
    "task_summary",
]

Json = dict[str, Any]


def round1(value: float) -> float:
    """``value`` to one decimal place, halves away from zero (Ruby's ``Float#round(1)``).

    Python's ``round`` rounds halves to even (``round(0.25, 1) == 0.2``); Ruby gives 0.3.
    """
    exact = Decimal(repr(float(value)))
    return float(exact.quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def capacity(ready: int, size: int) -> Json:
    """``{current, total, percent}``: ready VMs against the pools' sizes."""
    percent: float | int = round1(ready / size * 100.0) if size > 0 else 0
    return {"current": ready, "total": size, "percent": percent}


def ondemand_requested(tasks: Iterable[str]) -> int:
    """VMs asked for on demand whose clone has not started: the counts of the members of
    ``vmpooler__odcreate__task`` (``"<name>:<pool>:<count>:<id>"``; a malformed member or a
    cancel marker adds 0)."""
    pending_clones = 0
    for member in tasks:
        parts = member.split(":")
        if len(parts) >= 4 and parts[2].isdigit():
            pending_clones += int(parts[2])
    return pending_clones


def queue(totals: Mapping[str, int], cloning: int, requested: int) -> Json:
    """The ``/status`` ``queue`` section.

    ``totals`` maps ``pending``, ``ready``, ``running`` and ``completed`` to their sizes
    summed over the pools; ``cloning`` is the number of clones in flight, ``requested``
    the on-demand backlog (:func:`ondemand_requested`).
    """
    pending = totals["pending"]
    body = {"requested": requested, "pending": pending, "cloning": cloning,
            "booting": max(0, pending - cloning), "ready": totals["ready"],
            "running": totals["running"], "completed": totals["completed"]}
    body["total"] = requested + pending + body["ready"] + body["running"] + body["completed"]
    return body


def _pool_of(field: str) -> str:
    """The pool of a ``"<pool>:<vm>"`` field; ``unknown`` when it has no colon."""
    return field.split(":")[0] if ":" in field else "unknown"


def _durations(values: Sequence[float]) -> Json:
    """``{average, min, max, total}`` of ``values``; all 0 (ints) when there are none."""
    if not values:
        return _durations_of(DurationTotals())
    return _durations_of(DurationTotals(len(values), float(sum(values)), min(values),
                                        max(values)))


def _durations_of(totals: DurationTotals) -> Json:
    if not totals.count:
        return {"average": 0, "min": 0, "max": 0, "total": 0}
    return {"average": round1(totals.total / totals.count), "min": totals.low,
            "max": totals.high, "total": totals.total}


def duration_metrics(totals: DurationTotals, *, only: str | None = None) -> Json:
    """One day's clone or boot metrics from its totals, as :func:`task_metrics` gives them
    without ``by_pool``: ``{duration: {average, min, max, total}, count: {total}}``."""
    return _only({"duration": _durations_of(totals), "count": {"total": totals.count}}, only)


def _by_pool(raw: Mapping[str, str]) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {}
    for field, value in raw.items():
        samples.setdefault(_pool_of(field), []).append(seconds(value))
    return samples


def _only(task: Json, only: str | None) -> Json:
    """``task`` restricted to the sub-key ``only`` (``duration`` or ``count``), if given."""
    if only is None:
        return task
    return {key: value for key, value in task.items() if key == only}


def task_metrics(raw: Mapping[str, str], *, by_pool: bool = False,
                 only: str | None = None) -> Json:
    """One day's clone or boot metrics: ``{duration: {average, min, max, total}, count}``.

    With ``by_pool`` and at least one entry, ``duration.pool.<pool>`` =
    ``{total, average, min, max}`` and ``count.pool.<pool>`` = ``{total}`` are added.
    ``only`` keeps just that sub-key (an unknown one leaves ``{}``).
    """
    values = all_seconds(raw.values())
    task: Json = {"duration": _durations(values), "count": {"total": len(values)}}
    if by_pool and values:
        task["duration"]["pool"] = {}
        task["count"]["pool"] = {}
        for pool, samples in _by_pool(raw).items():
            stats = _durations(samples)
            task["duration"]["pool"][pool] = {
                "total": stats["total"], "average": stats["average"],
                "min": stats["min"], "max": stats["max"],
            }
            task["count"]["pool"][pool] = {"total": len(samples)}
    return _only(task, only)


def _range_counts(daily_counts: Sequence[int]) -> Json:
    """``{average, min, max, total}`` of the per-day counts (average per day, 1 dp)."""
    total = sum(daily_counts)
    if total == 0:
        return {"average": 0, "min": 0, "max": 0, "total": 0}
    return {"average": round1(total / len(daily_counts)), "min": min(daily_counts),
            "max": max(daily_counts), "total": total}


def task_summary(task: str, days: Sequence[tuple[str, Mapping[str, str]]], *,
                 only: str | None = None) -> Json:
    """``{<task>: <range>, daily: [{date, <task>: <day metrics by pool>}, ...]}``.

    ``days`` are ``(date, raw hash)`` pairs in date order. The range object is the one
    vmpooler documented: ``duration`` = ``{average, min, max, total}`` over every sample of
    the range (average = total / count, 1 dp), ``count`` = ``{average, min, max, total}``
    of the per-day counts, each with ``pool.<pool>``: ``{total, average, min, max}`` for
    durations, ``{total}`` for counts. ``only`` keeps just that sub-key, daily and range.
    """
    daily = [{"date": date, task: task_metrics(raw, by_pool=True, only=only)}
             for date, raw in days]
    values: list[float] = []
    samples: dict[str, list[float]] = {}
    for _, raw in days:
        values.extend(seconds(value) for value in raw.values())
        for pool, pool_samples in _by_pool(raw).items():
            samples.setdefault(pool, []).extend(pool_samples)
    duration = _durations(values)
    duration["pool"] = {}
    counts = _range_counts([len(raw) for _, raw in days])
    counts["pool"] = {}
    for pool, pool_samples in samples.items():
        stats = _durations(pool_samples)
        duration["pool"][pool] = {"total": stats["total"], "average": stats["average"],
                                  "min": stats["min"], "max": stats["max"]}
        counts["pool"][pool] = {"total": len(pool_samples)}
    summary = _only({"duration": duration, "count": counts}, only)
    return {task: summary, "daily": daily}


def tag_metrics(raw: Mapping[str, str], *, only: str | None = None) -> Json:
    """One day's tags: ``{<tag>: {<value>: n, ..., total: n}}``.

    Fields are ``"<vm>:<tag>"`` (a field without a colon counts under tag ``unknown``);
    ``only`` keeps just that tag.
    """
    tags: Json = {}
    for field, value in raw.items():
        tag = field.split(":", 1)[1] if ":" in field else "unknown"
        if only is not None and tag != only:
            continue
        counts = tags.setdefault(tag, {})
        counts[value] = counts.get(value, 0) + 1
        counts["total"] = counts.get("total", 0) + 1
    return tags


def tag_summary(days: Sequence[tuple[str, Mapping[str, str]]], *,
                only: str | None = None) -> Json:
    """``{tag: <per-tag per-value sums over the range>, daily: [{date, tag}, ...]}``."""
    daily: list[Json] = [{"date": date, "tag": tag_metrics(raw, only=only)} for date, raw in days]
    totals: Json = {}
    for day in daily:
        for tag, counts in day["tag"].items():
            summed = totals.setdefault(tag, {})
            for value, n in counts.items():
                summed[value] = summed.get(value, 0) + n
    return {"tag": totals, "daily": daily}
