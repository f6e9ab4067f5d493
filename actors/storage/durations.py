"""Durations as vmpooler stores them (seconds as text in ``vmpooler__clone__<date>`` and
``vmpooler__boot__<date>``), read and summed the one way ``/status`` and ``/summary`` rely on.

The status script (:attr:`vmpooler.actors.storage.schema.StatusScripts.READ_STATUS`) sums plain
decimal values inside Redis and gives :class:`DurationTotals` equal to what
:func:`duration_totals` computes here from the same values; anything else it hands back
as text for :func:`duration_totals` to read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["DurationTotals", "all_seconds", "duration_totals", "seconds"]


def seconds(text: str) -> float:
    """A duration as stored, as a float; unreadable or non-finite values count as 0.0."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return 0.0
    return value if math.isfinite(value) else 0.0


def all_seconds(texts: Iterable[str]) -> list[float]:
    """``[seconds(t) for t in texts]``, converting in one pass at C speed when every value
    is a finite number (the usual case) and value by value otherwise."""
    texts = list(texts)
    try:
        values = list(map(float, texts))
    except (TypeError, ValueError):
        return [seconds(text) for text in texts]
    # a NaN or an infinity makes the sum non-finite; so may finite values near the float
    # limit, which the slow path then handles exactly as seconds() does
    if math.isfinite(sum(values)):
        return values
    return [seconds(text) for text in texts]


@dataclass(frozen=True, slots=True)
class DurationTotals:
    """How many durations, their sum (added in order), the smallest and the largest (the
    first of equals); ``low`` and ``high`` are 0.0 when there are none."""

    count: int = 0
    total: float = 0.0
    low: float = 0.0
    high: float = 0.0


def duration_totals(texts: Iterable[str]) -> DurationTotals:
    """The totals of ``texts`` read with :func:`seconds` (an unreadable value counts as 0.0)."""
    values = all_seconds(texts)
    if not values:
        return DurationTotals()
    return DurationTotals(len(values), float(sum(values)), min(values), max(values))
