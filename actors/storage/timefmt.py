"""vmpooler's timestamp strings: write what Ruby writes, read what Ruby (and old data) wrote.

vmpooler stores almost every timestamp in Redis as Ruby ``Time#to_s`` in the server's local
zone, ``YYYY-MM-DD HH:MM:SS +ZZZZ`` (e.g. ``2024-05-01 13:02:11 +0000``), and reads them back
with the lenient ``Time.parse``.  Daily bucket keys (``vmpooler__clone__<date>``) use the local
date ``YYYY-MM-DD``; dead-letter-queue entries and health data use ISO-8601 / RFC 3339.

What callers may rely on:

* every ``format_*`` function returns a string that ``parse_time`` reads back to the same
  instant (to the second for the Ruby format);
* ``parse_time`` never raises: anything it cannot read gives ``None``;
* every datetime returned is timezone-aware; "local" means the zone of this process
  (``TZ`` / the machine's zone), exactly as vmpooler uses the server's zone.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo

__all__ = [
    "date_bucket",
    "format_epoch",
    "format_time",
    "parse_epoch",
    "parse_time",
    "rfc3339",
]

RUBY_FORMAT = "%Y-%m-%d %H:%M:%S %z"
"""``strftime`` pattern of Ruby's ``Time#to_s``."""

_DATETIME_RE = re.compile(
    r"""
    ^(?P<year>\d{4})-(?P<month>\d{1,2})-(?P<day>\d{1,2})
    (?:
        (?:[Tt]|\s+)
        (?P<hour>\d{1,2}):(?P<minute>\d{2})
        (?::(?P<second>\d{2})(?:[.,](?P<fraction>\d+))?)?
    )?
    \s*
    (?P<zone>[Zz]|UTC|GMT|[+-]\d{2}(?::?\d{2})?)?
    $
    """,
    re.VERBOSE,
)
_EPOCH_RE = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)$")


def _require_aware(dt: datetime) -> None:
    if dt.tzinfo is None or dt.tzinfo.utcoffset(dt) is None:
        raise ValueError(f"naive datetime {dt!r}: a timezone is required")


def format_time(dt: datetime) -> str:
    """Render ``dt`` like Ruby's ``Time#to_s``: ``YYYY-MM-DD HH:MM:SS +ZZZZ``.

    The offset is the one ``dt`` carries (``+0000`` for UTC, never the word ``UTC``);
    fractional seconds are dropped.  A naive datetime raises ``ValueError``.
    """
    _require_aware(dt)
    return dt.strftime(RUBY_FORMAT)


def format_epoch(seconds: float, tz: tzinfo | None = None) -> str:
    """Render epoch ``seconds`` in the Ruby format, in ``tz`` or, when None, the local zone.

    vmpooler writes server-local time, so the default matches what a Ruby instance on the
    same machine would write.
    """
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return format_time(moment.astimezone(tz))


def _zone(text: str) -> tzinfo:
    if text.upper() in ("Z", "UTC", "GMT"):
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours = int(digits[:2])
    minutes = int(digits[2:4]) if len(digits) > 2 else 0
    if hours > 23 or minutes > 59:
        raise ValueError(f"bad utc offset {text!r}")
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def _parse_text(text: str) -> datetime | None:
    if _EPOCH_RE.match(text):
        value = float(text)
        if not math.isfinite(value):
            return None
        return datetime.fromtimestamp(value, tz=UTC).astimezone()
    match = _DATETIME_RE.match(text)
    if match is None:
        return None
    parts = match.groupdict()
    fraction = (parts["fraction"] or "0")[:6].ljust(6, "0")
    naive = datetime(
        int(parts["year"]),
        int(parts["month"]),
        int(parts["day"]),
        int(parts["hour"] or 0),
        int(parts["minute"] or 0),
        int(parts["second"] or 0),
        int(fraction),
    )
    if parts["zone"] is None:
        # No zone written: local wall-clock time, as Ruby's Time.parse assumes.
        return naive.astimezone()
    return naive.replace(tzinfo=_zone(parts["zone"]))


def parse_time(text: str | bytes | None) -> datetime | None:
    """Read a timestamp the way vmpooler's ``Time.parse`` calls do; never raises.

    Accepted (surrounding whitespace ignored):

    * Ruby ``Time#to_s``: ``2024-05-01 13:02:11 +0000`` (also ``... UTC``, ``... +00:00``);
    * ISO-8601 / RFC 3339: ``2024-05-01T13:02:11+00:00``, ``...Z``, fractional seconds;
    * no zone, ``2024-05-01 13:02:11`` or just ``2024-05-01``: local time;
    * a plain epoch number, ``1714568531`` or ``1714568531.25``.

    Returns an aware datetime, or None for None, empty input, undecodable bytes, impossible
    dates and anything else it cannot read.
    """
    if text is None:
        return None
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        text = text.strip()
        if not text:
            return None
        return _parse_text(text)
    except (ValueError, OverflowError, OSError, UnicodeDecodeError, TypeError):
        return None


def parse_epoch(text: str | bytes | None) -> float | None:
    """``parse_time(text)`` as epoch seconds, or None when it cannot be read."""
    moment = parse_time(text)
    return None if moment is None else moment.timestamp()


def date_bucket(epoch: float, tz: tzinfo | None = None) -> str:
    """``YYYY-MM-DD`` of ``epoch`` in ``tz`` (local date when None), as Ruby's ``Date.today``.

    Used for the daily keys such as ``vmpooler__clone__<date>``.
    """
    return datetime.fromtimestamp(epoch, tz=UTC).astimezone(tz).strftime("%Y-%m-%d")


def rfc3339(dt: datetime) -> str:
    """``dt`` as RFC 3339 to the second, like Ruby's ``Time#iso8601``.

    E.g. ``2024-05-01T13:02:11+00:00`` (the offset ``dt`` carries, never ``Z``).

    A naive datetime raises ``ValueError``.
    """
    _require_aware(dt)
    return dt.isoformat(timespec="seconds")
