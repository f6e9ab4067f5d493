"""Trace files: both real forms, errors naming file, line and column, the canonical writer;
and the pool simulator of bench/sizing_frontier.py on a slice of a real trace."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from vmpooler.actors.sizing.demand_sizer import DemandSizer, SizingPolicy
from vmpooler.actors.sizing.trace import (
    Checkout,
    TraceError,
    parse_moment,
    read_trace,
    write_trace,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from sizing_sim import run_demand, run_fixed, smallest_fixed

TRACES = Path("/work/shared/data/traces")
BITCOIN = TRACES / "bitcoin-core-gha-2025-09-04_2025-09-17.csv"


def test_queued_at_wins_over_start_time_and_rows_come_sorted(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("queued_at,start_time,duration_s,platform\n"
                    "2025-09-04T17:25:47Z,2025-09-04T17:25:51Z,153,macos\n"
                    "2025-09-04T17:20:00Z,2025-09-04T17:25:51Z,-1,linux\n")
    skipped: list[int] = []
    rows = read_trace(path, skip_negative=skipped.append)  # GitHub's -1: an aborted job
    assert rows == [Checkout(1757006747.0, "macos", 153.0)] and skipped == [3]
    with pytest.raises(TraceError, match=r":3: column duration_s: negative"):
        read_trace(path)
    path.write_text("start_time,duration_s,platform\n2020-07-30T01:51:12Z,9894,jenkins\n")
    assert read_trace(path) == [Checkout(1596073872.0, "jenkins", 9894.0)]


def test_write_then_read_is_the_same(tmp_path: Path) -> None:
    rows = [Checkout(1757006400.0, "a", 10.0), Checkout(1757006400.5, "b", 2.5),
            Checkout(1757006401.0, "c", None)]
    out = io.StringIO()
    write_trace(rows, out)
    assert out.getvalue().splitlines()[:2] == ["queued_at,pool,duration_s",
                                               "2025-09-04T17:20:00Z,a,10"]
    path = tmp_path / "c.csv"
    path.write_text(out.getvalue())
    assert read_trace(path) == rows


@pytest.mark.parametrize(("text", "message"), [
    ("queued_at,pool,duration_s\n2025-09-04T17:25:47Z,a,1\n2025-13-04T17:25:47Z,a,1\n",
     ":3: column queued_at: bad time: not an ISO 8601 time: '2025-13-04T17:25:47Z'"),
    ("queued_at,pool,duration_s\n2025-09-04T17:25:47Z,a,soon\n",
     ":2: column duration_s: not a number: 'soon'"),
    ("queued_at,pool,duration_s\n2025-09-04T17:25:47Z,,1\n", ":2: column pool: empty"),
    ("queued_at,pool,duration_s\n2025-09-04T17:25:47Z,a\n",
     ":2: column duration_s: missing (the row has 2 cells)"),
    ("when,pool,duration_s\n", ":1: column queued_at or start_time: missing column"),
    # hostile cells: out of the calendar once shifted to UTC, or far beyond it
    ("queued_at,pool,duration_s\n0001-01-01T00:00:00+14:00,a,1\n",
     ":2: column queued_at: bad time: out of range: '0001-01-01T00:00:00+14:00'"),
    ("queued_at,pool,duration_s\n9999-12-31T23:59:59-14:00,a,1\n",
     ":2: column queued_at: bad time: out of range: '9999-12-31T23:59:59-14:00'"),
    ("queued_at,pool,duration_s\n1e300,a,1\n", ":2: column queued_at: bad time: out of range"),
    ("queued_at,pool,duration_s\n-1,a,1\n", ":2: column queued_at: bad time: out of range"),
    ("queued_at,pool,duration_s\n2025-09-04T17:25:47Z,a,1e300\n",
     ":2: column duration_s: too large: '1e300' (at most 34560000 s, 400 days)"),
])
def test_bad_rows_name_file_line_and_column(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert str(caught.value).startswith(str(path))
    assert message in str(caught.value)


def test_the_ends_of_the_range_of_times(tmp_path: Path) -> None:
    path = tmp_path / "ends.csv"
    path.write_text("queued_at,pool,duration_s\n1970-01-01T00:00:00Z,a,34560000\n"
                    "2999-12-31T23:59:59Z,a,\n")
    assert [row.t for row in read_trace(path)] == [0.0, 32_503_679_999.0]
    assert parse_moment("2999-12-31T23:59:59.5Z") < 32_503_680_000
    with pytest.raises(ValueError, match="out of range"):
        parse_moment("3000-01-01T00:00:00Z")


def test_simulator_on_two_days_of_a_real_trace() -> None:
    if not BITCOIN.exists():
        pytest.skip(f"{BITCOIN} is not here")
    rows = read_trace(BITCOIN, skip_negative=lambda _line: None)
    times = [r.t for r in rows if r.pool == "linux-x64" and r.t < rows[0].t + 2 * 86400]
    assert len(times) > 200
    assert run_fixed(times, 0, 120).hits == 0
    full = run_fixed(times, 1000, 120)
    assert full.hit_ratio == 1.0
    assert full.idle_vm_hours == pytest.approx(1000 * (times[-1] - times[0]) / 3600, rel=0.01)
    size, run = smallest_fixed(times, 120, 0.9)
    assert run.hit_ratio >= 0.9 > run_fixed(times, size - 1, 120).hit_ratio
    sizer = DemandSizer(SizingPolicy(0, 1000, 0.9), clone_time=120)
    demand = run_demand(times, 120, lambda now: sizer.target(now, 120).size, sizer.observe)
    assert demand.checkouts == len(times)
    assert 0.5 < demand.hit_ratio < 1.0
    assert demand.idle_vm_hours < run.idle_vm_hours
