"""Checkout traces: CSV files of pool checkouts, for replaying demand.

A trace has a header row. The checkout instant is column ``queued_at``, or ``start_time`` when
there is no ``queued_at`` (ISO-8601 UTC, ``2025-09-04T17:25:47Z``; an offset such as
``+00:00`` is accepted too); the pool is column ``pool``, or ``platform``; ``duration_s`` is how
long the VM was held (seconds; a negative value, as GitHub's -1 for an aborted job, is read
as 0: the checkout still happened). Other columns are ignored. ``write_trace`` writes the
canonical form ``queued_at,pool,duration_s``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

__all__ = ["Checkout", "TraceError", "read_trace", "write_trace"]


class TraceError(ValueError):
    """A trace file is unreadable; the message names the file, line and column."""


@dataclass(frozen=True, slots=True, order=True)
class Checkout:
    """One checkout: at ``t`` (epoch seconds), from ``pool``, held ``duration_s`` seconds."""

    t: float
    pool: str
    duration_s: float


def _pick(header: list[str], names: tuple[str, ...], path: Path) -> str:
    for name in names:
        if name in header:
            return name
    raise TraceError(f"{path}:1: no column {' or '.join(names)} (columns: {', '.join(header)})")


def _instant(text: str) -> float:
    if not text.endswith("Z") and "+" not in text[10:] and "-" not in text[10:]:
        raise ValueError("no time zone (UTC is written with Z)")
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment.timestamp()


def read_trace(path: str | Path) -> list[Checkout]:
    """The checkouts of the trace at ``path``, sorted by instant (then pool). Raises
    TraceError naming ``file:line`` and the column of the first bad value."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise TraceError(f"{path}:1: empty file, expected a header row")
        header = [name.strip() for name in header]
        at = _pick(header, ("queued_at", "start_time"), path)
        pool = _pick(header, ("pool", "platform"), path)
        held = _pick(header, ("duration_s",), path)
        columns = {name: header.index(name) for name in (at, pool, held)}
        rows = []
        for row in reader:
            line = reader.line_num
            if not row:
                continue
            if len(row) != len(header):
                raise TraceError(
                    f"{path}:{line}: {len(row)} fields, the header has {len(header)}")
            rows.append(_row(row, columns, (at, pool, held), f"{path}:{line}"))
    rows.sort()
    return rows


def _row(row: list[str], columns: dict[str, int], names: tuple[str, str, str],
         where: str) -> Checkout:
    at, pool, held = names
    text = row[columns[at]].strip()
    try:
        t = _instant(text)
    except ValueError as exc:
        raise TraceError(f"{where}: column {at}: {text!r} is not an ISO-8601 UTC time "
                         f"({exc})") from None
    name = row[columns[pool]].strip()
    if not name:
        raise TraceError(f"{where}: column {pool}: empty")
    text = row[columns[held]].strip()
    try:
        duration = float(text)
    except ValueError:
        raise TraceError(f"{where}: column {held}: {text!r} is not a number") from None
    if duration != duration or duration == float("inf"):
        raise TraceError(f"{where}: column {held}: {text!r} is not a finite number")
    return Checkout(t, name, max(duration, 0.0))


def write_trace(rows: Iterable[Checkout], file: TextIO) -> None:
    """Write ``rows`` as ``queued_at,pool,duration_s`` (UTC with Z, whole seconds when the
    instant has no fraction)."""
    writer = csv.writer(file, lineterminator="\n")
    writer.writerow(("queued_at", "pool", "duration_s"))
    for row in rows:
        moment = datetime.fromtimestamp(row.t, UTC)
        spec = "seconds" if moment.microsecond == 0 else "microseconds"
        duration = int(row.duration_s) if row.duration_s == int(row.duration_s) else row.duration_s
        writer.writerow((moment.isoformat(timespec=spec).replace("+00:00", "Z"),
                         row.pool, duration))
