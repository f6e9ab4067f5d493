"""Schedule windows: a floor on a pool's ready count at given local times of given weekdays.

A window is ``days start-end size`` in one time zone. It covers, on each of its weekdays, the
instants from the wall-clock time ``start`` to the wall-clock time ``end`` of that zone; when
``end <= start`` the window crosses midnight and ends on the next day (it belongs to the weekday
it starts on); ``end`` may be written ``24:00`` (midnight at the end of the day).

Wall-clock times are turned into instants the way an operator reads a clock:

- a window is ``start``-``end`` local time on both sides of a DST change (08:00-18:00 is
  08:00-18:00 local, whatever the UTC offset);
- a boundary that falls in the hour skipped when clocks go forward is the first instant after
  the gap (a 02:30 start on the spring-forward day starts at 03:00 local);
- a boundary that falls in the hour repeated when clocks go back is its first occurrence, so the
  repeated hour is covered once (a window ending at 02:30 ends at the first 02:30).

``floor_at`` is the largest ``size`` of the windows covering an instant (overlaps take the max),
or None; ``next_change`` the next instant the floor changes; ``max_floor`` the largest floor
over an interval (the sizer looks one clone time ahead, so VMs are ready when a window opens).
All three are pure functions of their arguments.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "ScheduleError",
    "Window",
    "floor_at",
    "max_floor",
    "next_change",
    "parse_schedule",
]

_DAY_NAMES = {
    "mon": 0, "monday": 0, "tue": 1, "tuesday": 1, "wed": 2, "wednesday": 2,
    "thu": 3, "thursday": 3, "fri": 4, "friday": 4, "sat": 5, "saturday": 5,
    "sun": 6, "sunday": 6,
}
_KEYS = ("days", "start", "end", "size", "timezone")
_TIME = re.compile(r"^(\d{1,2}):(\d{2})$")
# How far back an occurrence may start and still cover an instant: a window lasts at most a
# day (plus a DST hour), so the occurrences of the previous local day are the oldest to check.
_LOOKBACK_DAYS = 1
# next_change looks at the boundaries of the coming week and a day: windows repeat weekly.
_LOOKAHEAD_DAYS = 8


class ScheduleError(ValueError):
    """A schedule entry is invalid; the message names the entry (``schedule[i].key``) and says
    what was wrong."""


@dataclass(frozen=True, slots=True)
class Window:
    """One schedule window: ``size`` ready VMs at least, on ``weekdays`` (0=Mon … 6=Sun) from
    wall-clock ``start`` to ``end`` in ``tz`` (``end <= start``: crosses midnight)."""

    weekdays: frozenset[int]
    start: time
    end: time
    size: int
    tz: ZoneInfo

    def occurrences(self, first: date, days: int) -> Iterator[tuple[float, float]]:
        """The ``(start, end)`` instants (epoch seconds) of the occurrences starting on the
        local dates ``first`` … ``first + days - 1``, in order."""
        for offset in range(days):
            day = first + timedelta(days=offset)
            if day.weekday() not in self.weekdays:
                continue
            end_day = day if self.end > self.start else day + timedelta(days=1)
            begin = _instant(day, self.start, self.tz)
            finish = _instant(end_day, self.end, self.tz)
            if finish > begin:
                yield begin, finish


def _instant(day: date, wall: time, tz: ZoneInfo) -> float:
    """The instant of wall-clock ``wall`` on local ``day`` in ``tz``: its first occurrence when
    repeated, the first instant after the gap when skipped."""
    local = datetime.combine(day, wall, tzinfo=tz)
    early = local.replace(fold=0).timestamp()
    if datetime.fromtimestamp(early, tz).replace(tzinfo=None) == local.replace(tzinfo=None):
        return early
    # In a gap: fold=1 maps with the later offset, fold=0 with the earlier one; the transition
    # lies between them. Find the first instant whose local time is past ``wall`` (whole seconds).
    lo, hi = sorted((local.replace(fold=1).timestamp(), early))
    naive = local.replace(tzinfo=None)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).replace(tzinfo=None) >= naive:
            hi = mid
        else:
            lo = mid
    return hi


def _local_date(epoch: float, tz: ZoneInfo) -> date:
    return datetime.fromtimestamp(epoch, tz).date()


def floor_at(windows: Iterable[Window], epoch: float) -> int | None:
    """The largest size of the windows covering ``epoch`` (start included, end excluded), or
    None when no window covers it."""
    best: int | None = None
    for window in windows:
        first = _local_date(epoch, window.tz) - timedelta(days=_LOOKBACK_DAYS)
        for begin, finish in window.occurrences(first, _LOOKBACK_DAYS + 1):
            if begin <= epoch < finish and (best is None or window.size > best):
                best = window.size
    return best


def _boundaries(windows: Iterable[Window], after: float, until: float) -> list[float]:
    """Every window start or end in ``(after, until]``, sorted, without duplicates."""
    found: set[float] = set()
    for window in windows:
        first = _local_date(after, window.tz) - timedelta(days=_LOOKBACK_DAYS)
        span = (_local_date(until, window.tz) - first).days + 1
        for begin, finish in window.occurrences(first, span):
            found.update(b for b in (begin, finish) if after < b <= until)
    return sorted(found)


def next_change(windows: Sequence[Window], epoch: float) -> float | None:
    """The first instant after ``epoch`` at which ``floor_at`` differs from its value at
    ``epoch``, or None when it never changes (no windows, or windows covering all time)."""
    current = floor_at(windows, epoch)
    until = epoch + _LOOKAHEAD_DAYS * 86400.0
    for boundary in _boundaries(windows, epoch, until):
        if floor_at(windows, boundary) != current:
            return boundary
    return None


def max_floor(windows: Sequence[Window], epoch: float, horizon: float) -> int | None:
    """The largest floor at any instant of ``[epoch, epoch + horizon]``, or None when no window
    covers any of it."""
    best = floor_at(windows, epoch)
    for boundary in _boundaries(windows, epoch, epoch + horizon):
        value = floor_at(windows, boundary)
        if value is not None and (best is None or value > best):
            best = value
    return best


# -- parsing -------------------------------------------------------------------------------


def parse_schedule(raw: object, *, default_tz: str = "UTC") -> tuple[Window, ...]:
    """Parse the YAML form of a pool's ``schedule``: None (no windows) or a list whose entries
    are mappings ``{days, start, end, size, timezone}`` (``days`` defaults to every day,
    ``timezone`` to ``default_tz``) or compact strings ``"mon-fri 08:00-18:00 5 [zone]"``.

    Raises ScheduleError naming the entry and key of the first problem.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ScheduleError(f"schedule: expected a list of windows, got {type(raw).__name__}")
    windows = []
    for index, entry in enumerate(raw):
        where = f"schedule[{index}]"
        if isinstance(entry, str):
            entry = _split_compact(entry, where)
        if not isinstance(entry, dict):
            raise ScheduleError(
                f"{where}: expected a mapping or a string like 'mon-fri 08:00-18:00 5', "
                f"got {type(entry).__name__}")
        windows.append(_window(entry, where, default_tz))
    return tuple(windows)


def _split_compact(text: str, where: str) -> dict[str, object]:
    parts = text.split()
    if len(parts) not in (3, 4) or parts[1].count("-") != 1:
        raise ScheduleError(
            f"{where}: {text!r} is not 'DAYS HH:MM-HH:MM SIZE [TIMEZONE]' "
            "(e.g. 'mon-fri 08:00-18:00 5 Europe/Berlin')")
    start, end = parts[1].split("-")
    entry: dict[str, object] = {"days": parts[0], "start": start, "end": end}
    entry["size"] = int(parts[2]) if re.fullmatch(r"-?\d+", parts[2]) else parts[2]
    if len(parts) == 4:
        entry["timezone"] = parts[3]
    return entry


def _window(entry: dict[object, object], where: str, default_tz: str) -> Window:
    unknown = sorted(str(key) for key in entry if key not in _KEYS)
    if unknown:
        raise ScheduleError(
            f"{where}.{unknown[0]}: unknown key (known: {', '.join(_KEYS)})")
    for key in ("start", "end", "size"):
        if key not in entry:
            raise ScheduleError(f"{where}.{key}: missing")
    days = _days(entry.get("days", "*"), f"{where}.days")
    start = _time(entry["start"], f"{where}.start", allow_24=False)
    end = _time(entry["end"], f"{where}.end", allow_24=True)
    size = entry["size"]
    if isinstance(size, bool) or not isinstance(size, int):
        raise ScheduleError(f"{where}.size: {size!r} is not an integer")
    if size < 0:
        raise ScheduleError(f"{where}.size: {size} is negative")
    zone = entry.get("timezone", default_tz)
    return Window(days, start, end, size, _zone(zone, f"{where}.timezone"))


def _days(value: object, where: str) -> frozenset[int]:
    if not isinstance(value, str) or not value.strip():
        raise ScheduleError(f"{where}: {value!r} is not a list of days like 'mon-fri' or 'sat,sun'")
    text = value.strip().lower()
    if text in ("*", "all", "daily"):
        return frozenset(range(7))
    days: set[int] = set()
    for part in text.split(","):
        names = [name.strip() for name in part.split("-")]
        if len(names) > 2 or any(name not in _DAY_NAMES for name in names):
            raise ScheduleError(
                f"{where}: {value!r} has a bad day {part.strip()!r} "
                "(days are mon tue wed thu fri sat sun, as 'mon-fri', 'sat,sun' or '*')")
        first, last = _DAY_NAMES[names[0]], _DAY_NAMES[names[-1]]
        days.update((first + step) % 7 for step in range((last - first) % 7 + 1))
    return frozenset(days)


def _time(value: object, where: str, *, allow_24: bool) -> time:
    if isinstance(value, int) and not isinstance(value, bool):
        # YAML 1.1 reads an unquoted 18:00 as the sexagesimal number 1080.
        raise ScheduleError(
            f"{where}: {value!r} is not a time HH:MM (an unquoted time like 18:00 is read by "
            "YAML as a number: quote it, '18:00')")
    match = _TIME.match(value) if isinstance(value, str) else None
    if match is None:
        raise ScheduleError(f"{where}: {value!r} is not a time HH:MM")
    hour, minute = int(match.group(1)), int(match.group(2))
    if allow_24 and (hour, minute) == (24, 0):
        return time(0, 0)
    if hour > 23 or minute > 59:
        extra = " (24:00 only as an end)" if (hour, minute) == (24, 0) else ""
        raise ScheduleError(f"{where}: {value!r} is not a time HH:MM{extra}")
    return time(hour, minute)


def _zone(value: object, where: str) -> ZoneInfo:
    if not isinstance(value, str) or not value:
        raise ScheduleError(f"{where}: {value!r} is not a time zone name like 'Europe/Berlin'")
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"{where}: unknown time zone {value!r}") from None


def describe(window: Window) -> str:
    """The compact form of ``window`` (``'mon,tue 08:00-18:00 5 Europe/Berlin'``), for logs."""
    days = ",".join(name for name, num in _DAY_NAMES.items()
                    if len(name) == 3 and num in window.weekdays)
    end = "24:00" if window.end == time(0) else window.end.strftime("%H:%M")
    return f"{days} {window.start.strftime('%H:%M')}-{end} {window.size} {window.tz.key}"

