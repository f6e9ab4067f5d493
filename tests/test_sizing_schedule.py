"""Schedule windows: parsing and its errors, time zones, overlaps, midnight and DST."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from vmpooler.actors.sizing.schedule import (
    ScheduleError,
    floor_at,
    max_floor,
    next_change,
    parse_schedule,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def at(text: str, tz: ZoneInfo = UTC) -> float:  # type: ignore[assignment]
    return datetime.fromisoformat(text).replace(tzinfo=tz).timestamp()


def test_mapping_and_compact_forms_are_the_same_window() -> None:
    one = parse_schedule([{"days": "mon-fri", "start": "08:00", "end": "18:00", "size": 5,
                           "timezone": "Europe/Berlin"}])
    two = parse_schedule(["mon-fri 08:00-18:00 5 Europe/Berlin"])
    assert one == two
    assert one[0].weekdays == frozenset(range(5))
    assert parse_schedule(None) == ()
    assert parse_schedule(["sat,sun 00:00-24:00 1"])[0].tz.key == "UTC"
    assert parse_schedule(["fri-mon 10:00-11:00 1"])[0].weekdays == frozenset({4, 5, 6, 0})


@pytest.mark.parametrize(("raw", "message"), [
    ([{"start": "25:00", "end": "18:00", "size": 1}],
     "schedule[0].start: '25:00' is not a time HH:MM"),
    (["mon-fri 08:00-18:00 1", {"start": "08:00", "end": "9", "size": 1}],
     "schedule[1].end: '9' is not a time HH:MM"),
    ([{"start": "08:00", "end": 1080, "size": 1}], "quote it"),
    ([{"start": "08:00", "end": "18:00", "size": -1}], "schedule[0].size: -1 is negative"),
    ([{"start": "08:00", "end": "18:00", "size": "5"}], "schedule[0].size: '5' is not an integer"),
    ([{"days": "mon-fry", "start": "08:00", "end": "18:00", "size": 1}],
     "schedule[0].days: 'mon-fry' has a bad day"),
    ([{"start": "08:00", "end": "18:00", "size": 1, "timezone": "Mars/Olympus"}],
     "schedule[0].timezone: unknown time zone 'Mars/Olympus'"),
    ([{"start": "08:00", "end": "18:00", "size": 1, "colour": "red"}],
     "schedule[0].colour: unknown key"),
    ([{"start": "08:00", "size": 1}], "schedule[0].end: missing"),
    (["mon-fri 08:00 5"], "schedule[0]: 'mon-fri 08:00 5' is not 'DAYS HH:MM-HH:MM SIZE"),
    (["mon-fri 8-18 5"], "schedule[0].start: '8' is not a time HH:MM"),
    ([{"start": "24:00", "end": "18:00", "size": 1}], "24:00 only as an end"),
    ("mon-fri 08:00-18:00 5", "schedule: expected a list"),
])
def test_parse_errors_name_the_entry_and_key(raw: object, message: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(raw)
    assert message in str(caught.value)


def test_time_zone_overlap_max_and_gaps() -> None:
    windows = parse_schedule(["mon-fri 08:00-18:00 5 Europe/Berlin",
                              "wed 12:00-13:00 9 Europe/Berlin",
                              "mon-fri 08:00-09:00 2 America/New_York"])
    # 2024-01-10 is a Wednesday; Berlin is UTC+1 in January.
    assert floor_at(windows, at("2024-01-10T06:59:59")) is None
    assert floor_at(windows, at("2024-01-10T07:00:00")) == 5
    assert floor_at(windows, at("2024-01-10T11:30:00")) == 9
    assert floor_at(windows, at("2024-01-10T16:59:59")) == 5
    assert floor_at(windows, at("2024-01-10T17:00:00")) is None  # 18:00 Berlin: end excluded
    assert floor_at(windows, at("2024-01-10T13:30:00")) == 5      # New York 08:30: max(5, 2)
    assert floor_at(windows, at("2024-01-13T12:00:00")) is None   # Saturday
    assert next_change(windows, at("2024-01-10T06:00:00")) == at("2024-01-10T07:00:00")
    assert next_change(windows, at("2024-01-10T07:00:00")) == at("2024-01-10T11:00:00")
    assert max_floor(windows, at("2024-01-10T10:58:00"), 300) == 9
    assert max_floor(windows, at("2024-01-10T10:50:00"), 300) == 5


def test_window_crossing_midnight_belongs_to_its_start_day() -> None:
    windows = parse_schedule(["fri 22:00-02:00 3", "mon 20:00-24:00 1"])
    # 2024-01-12 is a Friday.
    assert floor_at(windows, at("2024-01-12T21:59:00")) is None
    assert floor_at(windows, at("2024-01-12T23:00:00")) == 3
    assert floor_at(windows, at("2024-01-13T01:59:59")) == 3
    assert floor_at(windows, at("2024-01-13T02:00:00")) is None
    assert floor_at(windows, at("2024-01-11T23:00:00")) is None  # Thursday night
    assert floor_at(windows, at("2024-01-15T23:59:59")) == 1
    assert floor_at(windows, at("2024-01-16T00:00:00")) is None


def test_dst_keeps_local_hours_on_both_sides() -> None:
    windows = parse_schedule(["* 08:00-18:00 4 Europe/Berlin"])
    for day in ("2024-03-30", "2024-03-31", "2024-04-01", "2024-10-26", "2024-10-27"):
        assert floor_at(windows, at(f"{day}T08:00:00", BERLIN)) == 4
        assert floor_at(windows, at(f"{day}T07:59:59", BERLIN)) is None
        assert floor_at(windows, at(f"{day}T17:59:59", BERLIN)) == 4
        assert floor_at(windows, at(f"{day}T18:00:00", BERLIN)) is None
    windows = parse_schedule(["* 08:00-18:00 4 America/New_York"])
    for day in ("2024-03-09", "2024-03-10", "2024-11-02", "2024-11-03"):
        assert floor_at(windows, at(f"{day}T08:00:00", NEW_YORK)) == 4
        assert floor_at(windows, at(f"{day}T07:59:59", NEW_YORK)) is None


def test_spring_forward_start_in_the_gap_starts_after_it() -> None:
    # Berlin 2024-03-31: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
    windows = parse_schedule(["sun 02:30-04:00 2 Europe/Berlin"])
    assert floor_at(windows, at("2024-03-31T00:59:59")) is None
    assert floor_at(windows, at("2024-03-31T01:00:00")) == 2
    assert floor_at(windows, at("2024-03-31T01:59:59")) == 2
    assert floor_at(windows, at("2024-03-31T02:00:00")) is None
    # New York 2024-03-10: 02:00 EST jumps to 03:00 EDT (07:00 UTC).
    windows = parse_schedule(["sun 02:15-03:30 2 America/New_York"])
    assert next_change(windows, at("2024-03-10T05:00:00")) == at("2024-03-10T07:00:00")


def test_fall_back_ambiguous_hour_counts_once() -> None:
    # Berlin 2024-10-27: 03:00 CEST goes back to 02:00 CET (01:00 UTC); 02:00-03:00 twice.
    windows = parse_schedule(["sun 01:00-02:30 2 Europe/Berlin"])
    assert floor_at(windows, at("2024-10-26T23:00:00")) == 2   # 01:00 CEST
    assert floor_at(windows, at("2024-10-27T00:29:59")) == 2   # first 02:29
    assert floor_at(windows, at("2024-10-27T00:30:00")) is None  # first 02:30: ends once
    assert floor_at(windows, at("2024-10-27T01:15:00")) is None  # second 02:15 not covered
    # New York 2024-11-03: 02:00 EDT back to 01:00 EST (06:00 UTC).
    windows = parse_schedule(["sun 01:30-05:00 2 America/New_York"])
    assert floor_at(windows, at("2024-11-03T05:30:00")) == 2   # first 01:30 EDT
    assert floor_at(windows, at("2024-11-03T05:29:59")) is None
    assert floor_at(windows, at("2024-11-03T09:59:59")) == 2   # 04:59:59 EST
    assert floor_at(windows, at("2024-11-03T10:00:00")) is None
