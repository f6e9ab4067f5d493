"""The time series a replay records for its page (actors/replay/series.py), and the page built
from them (actors/replay/page.py) without a browser: known answers on hand-made inputs."""

from __future__ import annotations

import re

import pytest

from vmpooler.actors.replay.charts import nice_ceiling, scale, wait_bins
from vmpooler.actors.replay.page import PageInfo, render_page
from vmpooler.actors.replay.report import PoolStats, RunResult
from vmpooler.actors.replay.series import MAX_POINTS, SeriesRecorder, interval_for

T0 = 1_757_000_000.0


def test_the_interval_keeps_a_series_to_a_few_hundred_points() -> None:
    assert interval_for(2 * 3600) == 60
    assert interval_for(14 * 86400) == 3600  # two weeks: 336 points
    assert interval_for(21 * 86400) == 7200  # three weeks: 252 points
    for days in (1, 7, 30, 400):
        assert days * 86400 / interval_for(days * 86400) <= MAX_POINTS


def test_ready_counts_held_across_intervals_are_integrated_exactly() -> None:
    rec = SeriesRecorder(["a", "b"], T0, T0 + 300, interval=60)
    assert rec.count == 5
    rec.hold(T0 - 30, T0 + 90, {"a": 2, "b": 1})  # before the window: clipped
    rec.hold(T0 + 90, T0 + 200, {"a": 0, "b": 1})
    rec.hold(T0 + 200, T0 + 400, {"a": 3})  # past the end: clipped; b left alone
    a = rec.series["a"]
    assert a.ready_seconds == [120.0, 60.0, 0.0, 120.0, 180.0]
    assert (a.ready_min, a.ready_max) == ([2, 0, 0, 0, 3], [2, 2, 0, 3, 3])
    assert rec.ready_mean("a", 1) == 1.0
    assert rec.ready_mean("a", 3) == 2.0  # 0 for 20 s, 3 for 40 s
    assert rec.series["b"].ready_min[4] is None and rec.ready_mean("b", 4) is None


def test_checkouts_misses_and_targets_land_in_their_interval() -> None:
    rec = SeriesRecorder(["a"], T0, T0 + 150, interval=60)
    rec.checkout(T0, "a", hit=True)
    rec.checkout(T0 + 61, "a", hit=False)
    rec.checkout(T0 + 150, "a", hit=False)  # the window's end: its last interval
    rec.checkout(T0 + 151, "a", hit=False)  # outside: not counted
    rec.checkout(T0 + 1, "unknown", hit=True)  # not a pool of the run: ignored
    a = rec.series["a"]
    assert (a.checkouts, a.misses) == ([1, 1, 1], [0, 1, 1])
    assert rec.wants_target(T0 + 10)
    rec.targets(T0 + 10, {"a": 4})
    assert not rec.wants_target(T0 + 50)
    rec.targets(T0 + 50, {"a": 9})  # a later read of the same interval keeps the first
    assert a.target == [4, None, None]
    assert rec.bounds(2) == (T0 + 120, T0 + 150)


def test_nice_ceiling_and_wait_bins() -> None:
    assert [nice_ceiling(v) for v in (0, 1, 3, 7, 20, 21, 480)] == [1, 1, 5, 10, 20, 50, 500]
    assert [scale(v) for v in (0, 1, 4, 6, 20, 22, 480)] == [
        (1, 1), (1, 1), (4, 1), (6, 2), (20, 5), (30, 10), (600, 200)]
    assert wait_bins([0, 14.9, 15, 47, 120, 7200]) == [2, 1, 1, 0, 1, 0, 0, 0, 1]


def _result(policy: str, misses: int) -> RunResult:
    rec = SeriesRecorder(["linux", "<win>"], T0, T0 + 3600)
    rec.hold(T0, T0 + 3600, {"linux": 4, "<win>": 1})
    for i in range(misses):
        rec.checkout(T0 + 600 * i, "linux", hit=False)
    rec.checkout(T0 + 60, "<win>", hit=True)
    pools = {"linux": PoolStats(misses, 0, [47.0] * misses, 4 * 3600.0, 6),
             "<win>": PoolStats(1, 1, [], 3600.0, 1)}
    return RunResult(policy, pools, 3600.0, 1.0, series=rec)


def test_the_page_shows_the_json_numbers_and_a_chart_per_pool_and_policy() -> None:
    results = [_result("static", 2), _result("demand", 3)]
    page = render_page(results, PageInfo("traces/ci.csv", 120, 15, "0.1.0"))
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")
    charts = re.findall(r'<svg class="pool-chart" data-pool="([^"]+)" data-policy="(\w+)"', page)
    assert charts == [("linux", "static"), ("linux", "demand"), ("&lt;win&gt;", "static"),
                      ("&lt;win&gt;", "demand")]
    assert "<win>" not in page  # escaped everywhere
    for result in results:
        table = page.split(f'<table class="totals" data-policy="{result.policy}">')[1]
        table = table.split("</table>")[0]
        for pool, doc in result.document().items():
            row = table.split(f'<tr data-pool="{pool.replace("<", "&lt;").replace(">", "&gt;")}"'
                              )[1].split("</tr>")[0]
            cells = dict(re.findall(r'<td data-key="(\w+)">([^<]*)</td>', row))
            assert {k: float(v) for k, v in cells.items()} == pytest.approx(doc, abs=0)
    marks = [int(n) for n in re.findall(r'class="miss" data-count="(\d+)"', page)]
    assert sum(marks) == 2 + 3


def test_a_result_without_its_series_is_refused() -> None:
    result = RunResult("static", {"a": PoolStats()}, 0.0, 0.0)
    with pytest.raises(ValueError, match="series"):
        render_page([result], PageInfo("t.csv", 1, 1, "x"))
