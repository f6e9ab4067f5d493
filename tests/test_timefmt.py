"""vmpooler timestamp strings: Ruby Time#to_s out, lenient Time.parse in."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from vmpooler.actors.storage.timefmt import (
    date_bucket,
    format_epoch,
    format_time,
    parse_epoch,
    parse_time,
    rfc3339,
)

EPOCH = datetime(2024, 5, 1, 13, 2, 11, tzinfo=UTC).timestamp()


@pytest.fixture
def new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make the process-local zone US Eastern (POSIX rule, no tzdata needed)."""
    monkeypatch.setenv("TZ", "EST5EDT,M3.2.0,M11.1.0")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_format_time_ruby_style() -> None:
    assert format_time(datetime(2024, 5, 1, 13, 2, 11, 999999, tzinfo=UTC)) == (
        "2024-05-01 13:02:11 +0000"
    )
    ist = timezone(timedelta(hours=5, minutes=30))
    assert format_time(datetime(2024, 1, 2, 3, 4, 5, tzinfo=ist)) == "2024-01-02 03:04:05 +0530"
    west = timezone(timedelta(hours=-7))
    assert format_time(datetime(2024, 1, 2, 3, 4, 5, tzinfo=west)) == "2024-01-02 03:04:05 -0700"


def test_format_time_rejects_naive() -> None:
    with pytest.raises(ValueError):
        format_time(datetime(2024, 5, 1, 13, 2, 11))
    with pytest.raises(ValueError):
        rfc3339(datetime(2024, 5, 1, 13, 2, 11))


def test_format_epoch_explicit_zone() -> None:
    assert format_epoch(EPOCH, UTC) == "2024-05-01 13:02:11 +0000"
    assert format_epoch(EPOCH + 0.7, UTC) == "2024-05-01 13:02:11 +0000"


def test_format_epoch_uses_local_zone(new_york: None) -> None:
    assert format_epoch(EPOCH) == "2024-05-01 09:02:11 -0400"
    winter = datetime(2024, 1, 15, 12, 0, 0, tzinfo=UTC).timestamp()
    assert format_epoch(winter) == "2024-01-15 07:00:00 -0500"


@pytest.mark.parametrize(
    "text",
    [
        "2024-05-01 13:02:11 +0000",
        "2024-05-01 13:02:11 UTC",
        "2024-05-01 13:02:11 +00:00",
        "2024-05-01 09:02:11 -0400",
        "2024-05-01 18:32:11 +0530",
        "2024-05-01T13:02:11+00:00",
        "2024-05-01T13:02:11Z",
        "2024-05-01T13:02:11z",
        "2024-05-01T09:02:11-04:00",
        "  2024-05-01 13:02:11 +0000\n",
        b"2024-05-01 13:02:11 +0000",
        "1714568531",
        "1714568531.0",
    ],
)
def test_parse_time_formats(text: str | bytes) -> None:
    parsed = parse_time(text)
    assert parsed is not None
    assert parsed.tzinfo is not None
    assert parsed.timestamp() == EPOCH


def test_parse_time_keeps_written_offset() -> None:
    parsed = parse_time("2024-05-01 09:02:11 -0400")
    assert parsed is not None
    assert parsed.utcoffset() == timedelta(hours=-4)


def test_parse_time_fractional_seconds() -> None:
    assert parse_epoch("2024-05-01T13:02:11.25Z") == EPOCH + 0.25
    assert parse_epoch("2024-05-01T13:02:11.123456789+00:00") == pytest.approx(EPOCH + 0.123456)
    assert parse_epoch("1714568531.5") == EPOCH + 0.5


def test_parse_time_without_zone_is_local(new_york: None) -> None:
    assert parse_epoch("2024-05-01 09:02:11") == EPOCH
    assert parse_epoch("2024-05-01T09:02:11") == EPOCH
    midnight = parse_time("2024-05-01")
    assert midnight is not None
    assert midnight.utcoffset() == timedelta(hours=-4)
    assert (midnight.hour, midnight.minute) == (0, 0)


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        "",
        "   ",
        b"",
        b"\xff\xfe",
        "not a time",
        "2024-13-01 00:00:00 +0000",
        "2024-02-30 00:00:00",
        "2024-05-01 25:00:00",
        "2024-05-01 13:02:11 +9999",
        "2024-05-01 13:02:11 garbage",
        "nan",
        "inf",
        "1e400",
        "99999999999999999999999",
        "-",
        ".",
    ],
)
def test_parse_time_garbage_is_none(garbage: str | bytes | None) -> None:
    assert parse_time(garbage) is None
    assert parse_epoch(garbage) is None


def test_round_trip_local(new_york: None) -> None:
    for epoch in (0.0, EPOCH, 1_700_000_000.0, 2_000_000_000.0):
        assert parse_epoch(format_epoch(epoch)) == epoch


def test_round_trip_explicit_zones() -> None:
    for tz in (UTC, timezone(timedelta(hours=9)), timezone(timedelta(hours=-3, minutes=-30))):
        dt = datetime(2023, 12, 31, 23, 59, 59, tzinfo=tz)
        assert parse_time(format_time(dt)) == dt
        assert parse_time(rfc3339(dt)) == dt


def test_date_bucket() -> None:
    assert date_bucket(EPOCH, UTC) == "2024-05-01"
    late = datetime(2024, 5, 1, 2, 0, 0, tzinfo=UTC).timestamp()
    assert date_bucket(late, UTC) == "2024-05-01"


def test_date_bucket_uses_local_date(new_york: None) -> None:
    late = datetime(2024, 5, 1, 2, 0, 0, tzinfo=UTC).timestamp()
    assert date_bucket(late) == "2024-04-30"


def test_rfc3339() -> None:
    assert rfc3339(datetime(2024, 5, 1, 13, 2, 11, 500, tzinfo=UTC)) == "2024-05-01T13:02:11+00:00"
    west = timezone(timedelta(hours=-4))
    assert rfc3339(datetime(2024, 5, 1, 9, 2, 11, tzinfo=west)) == "2024-05-01T09:02:11-04:00"
