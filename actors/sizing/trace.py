"""Traces of checkouts: CSV files, one checkout per row, for replaying demand (the sizing
benchmark, ``vmpooler replay``) and as ``vmpooler history export`` writes them.

Columns (by header name, in any order; others are ignored): ``queued_at`` (or
``start_time`` when the file has no ``queued_at``), the moment of the checkout, in ISO 8601
(``2025-09-04T17:25:47Z``; no zone means UTC) or epoch seconds; ``platform`` (or ``pool``),
the pool or alias asked for; ``duration_s``, how long the VM is held, in seconds (empty:
unknown, read as None).

What callers may rely on: :func:`read_trace` returns the checkouts sorted by time (rows of
one moment in file order), or raises :class:`TraceError` naming the file, the line (1 is
the header) and the column of the first bad cell; it never raises anything else for bad
content (an unreadable file is a :class:`TraceError` too).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO

__all__ = ["EARLIEST", "LATEST", "MAX_DURATION_S", "Checkout", "TraceError", "parse_moment",
           "read_trace", "write_trace"]

EARLIEST = 0.0
"""The earliest moment read, epoch seconds: 1970-01-01T00:00:00Z."""
LATEST = 32_503_680_000.0
"""The first moment no longer read, epoch seconds: 3000-01-01T00:00:00Z (far enough from
the calendar's end, year 9999, for anything to be added to a moment)."""
MAX_DURATION_S = 400 * 86400.0
"""The longest ``duration_s`` read: 400 days."""


@dataclass(frozen=True, slots=True)
class Checkout:
    """One checkout of the trace."""

    t: float
    """When it was asked for, epoch seconds."""
    pool: str
    """The pool (or alias) it asked for: the trace's ``platform`` or ``pool``."""
    duration_s: float | None
    """How long the VM was held, seconds; None when the trace does not say."""


class TraceError(ValueError):
    """A trace that cannot be read: ``str()`` is ``FILE:LINE: column COLUMN: problem``."""

    def __init__(self, path: str, line: int | None, column: str | None, problem: str) -> None:
        where = path if line is None else f"{path}:{line}"
        super().__init__(f"{where}: column {column}: {problem}" if column else
                         f"{where}: {problem}")
        self.path, self.line, self.column, self.problem = path, line, column, problem


class _NegativeError(ValueError):
    """A row's duration is negative (the message is the cell)."""


def parse_moment(text: str) -> float:
    """Epoch seconds of an ISO 8601 time (UTC when it names no zone) or of a number, from
    :data:`EARLIEST` (included) to :data:`LATEST` (excluded).

    Raises ValueError for anything else, a moment out of that range included."""
    text = text.strip()
    if not text:
        raise ValueError("empty")
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise ValueError(f"not a time: {text!r}")
        return _in_range(value, text)
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise ValueError(f"not an ISO 8601 time: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return _in_range(moment.timestamp(), text)
    except OverflowError:
        return _in_range(math.inf, text)


def _in_range(value: float, text: str) -> float:
    if not EARLIEST <= value < LATEST:
        raise ValueError(f"out of range: {text!r} (times from 1970-01-01 to 2999-12-31 "
                         "UTC are read)")
    return value


def _columns(path: str, header: list[str] | None) -> tuple[str, str, str]:
    names = [h.strip() for h in header or []]
    time_col = "queued_at" if "queued_at" in names else "start_time"
    pool_col = "platform" if "platform" in names else "pool"
    for wanted, alternatives in ((time_col, "queued_at or start_time"),
                                 (pool_col, "platform or pool"),
                                 ("duration_s", "duration_s")):
        if wanted not in names:
            raise TraceError(path, 1, alternatives, "missing column (the header has: "
                             f"{', '.join(names) or 'nothing'})")
    return time_col, pool_col, "duration_s"


def read_trace(path: str | os.PathLike[str], *,
               skip_negative: Callable[[int], None] | None = None) -> list[Checkout]:
    """Every checkout of the CSV trace at ``path``, sorted by time; see the module docstring.

    Raises :class:`TraceError` on a missing column, a bad time (or one out of
    :func:`parse_moment`'s range), an empty pool, a duration that is not a number, is
    negative or is over :data:`MAX_DURATION_S`, or a file that cannot be read. With
    ``skip_negative``, a row with a negative duration (GitHub's ``-1`` for a job aborted
    before it ran) is left out instead and its line number passed to ``skip_negative``."""
    name = os.fspath(path)
    rows: list[Checkout] = []
    try:
        with open(name, newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            time_col, pool_col, dur_col = _columns(name, header)
            index = {h.strip(): i for i, h in enumerate(header or [])}
            for row in reader:
                line = reader.line_num
                if not any(cell.strip() for cell in row):
                    continue  # a blank line
                try:
                    rows.append(_row(name, line, row, index, time_col, pool_col, dur_col))
                except _NegativeError as exc:
                    if skip_negative is None:
                        raise TraceError(name, line, dur_col, f"negative: {exc} (with "
                                         "--skip-negative-durations such rows are left "
                                         "out)") from None
                    skip_negative(line)
    except OSError as exc:
        raise TraceError(name, None, None, f"cannot read: {exc.strerror or exc}") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise TraceError(name, None, None, f"not a CSV file: {exc}") from None
    rows.sort(key=lambda c: c.t)  # stable: one moment's rows keep their file order
    return rows


def _row(path: str, line: int, row: list[str], index: dict[str, int], time_col: str,
         pool_col: str, dur_col: str) -> Checkout:
    def cell(column: str) -> str:
        i = index[column]
        if i >= len(row):
            raise TraceError(path, line, column, f"missing (the row has {len(row)} cells)")
        return row[i].strip()

    try:
        t = parse_moment(cell(time_col))
    except ValueError as exc:
        raise TraceError(path, line, time_col, f"bad time: {exc}") from None
    pool = cell(pool_col)
    if not pool:
        raise TraceError(path, line, pool_col, "empty")
    text = cell(dur_col)
    duration: float | None = None
    if text:
        try:
            duration = float(text)
        except ValueError:
            raise TraceError(path, line, dur_col, f"not a number: {text!r}") from None
        if not math.isfinite(duration):
            raise TraceError(path, line, dur_col, f"not finite: {text!r}")
        if duration < 0:
            raise _NegativeError(repr(text))
        if duration > MAX_DURATION_S:
            raise TraceError(path, line, dur_col, f"too large: {text!r} (at most "
                             f"{MAX_DURATION_S:.0f} s, 400 days)")
    return Checkout(t, pool, duration)


def write_trace(rows: Iterable[Checkout], file: TextIO) -> None:
    """Write ``rows`` as ``queued_at,pool,duration_s`` (UTC with Z, whole seconds when the
    instant has no fraction; an unknown duration empty), which :func:`read_trace` reads."""
    writer = csv.writer(file, lineterminator="\n")
    writer.writerow(("queued_at", "pool", "duration_s"))
    for row in rows:
        moment = datetime.fromtimestamp(row.t, UTC)
        spec = "seconds" if moment.microsecond == 0 else "microseconds"
        held = row.duration_s
        duration = "" if held is None else int(held) if held == int(held) else held
        writer.writerow((moment.isoformat(timespec=spec).replace("+00:00", "Z"),
                         row.pool, duration))
