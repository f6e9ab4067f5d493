"""The page of ``vmpooler replay --report`` in Debian's headless Chromium.

The shipped command replays an hour of the Bitcoin Core trace under both policies with
``--json --report``; Chromium (driven over its DevTools protocol, as
tests/test_dashboard_chromium.py drives it for the dashboard) opens the file. It must load
with no console error, no uncaught exception and no request beyond the file itself; show a
drawn chart per pool and policy (ready VMs in each, the demand target in the demand runs
only, as many misses marked as the run had), the waits' histogram, and a totals table whose
every cell is the number ``--json`` printed for the same run. A screenshot goes to
``$VMPOOLER_TEST_ARTIFACTS`` (default: the test's tmp_path).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import wait_until
from tests.test_dashboard_chromium import Cdp, browser, screenshot  # noqa: F401

pytestmark = pytest.mark.integration

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]
BITCOIN = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / \
    "bitcoin-core-gha-2025-09-04_2025-09-17.csv"

TABLES = """Object.fromEntries([...document.querySelectorAll('table.totals')].map(t =>
    [t.dataset.policy, Object.fromEntries([...t.querySelectorAll('tbody tr')].map(r =>
        [r.dataset.pool, Object.fromEntries([...r.querySelectorAll('td[data-key]')].map(c =>
            [c.dataset.key, Number(c.textContent)]))]))]))"""

CHARTS = """[...document.querySelectorAll('svg.pool-chart')].map(s => ({
    pool: s.dataset.pool, policy: s.dataset.policy,
    width: s.getBoundingClientRect().width, height: s.getBoundingClientRect().height,
    ready: (s.querySelector('polyline.ready')?.getAttribute('points') || '')
        .split(' ').filter(Boolean).length,
    target: s.querySelectorAll('path.target').length,
    misses: [...s.querySelectorAll('path.miss')].reduce((n, m) => n + Number(m.dataset.count), 0),
}))"""


@pytest.mark.skipif(not BITCOIN.exists(), reason="the Bitcoin Core trace is not here")
def test_the_report_page_in_headless_chromium(repo_root: Path, tmp_path: Path,
                                             browser: Cdp) -> None:
    artifacts = Path(os.environ.get("VMPOOLER_TEST_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    trace = tmp_path / "slice.csv"
    trace.write_text("\n".join(BITCOIN.read_text().splitlines()[:80]) + "\n")
    page = tmp_path / "replay.html"
    result = subprocess.run(
        [*VMPOOLER, "replay", "--trace", str(trace), "--config",
         str(repo_root / "conf" / "replay.example.yaml"), "--json", "--hours", "1",
         "--clone-time", "60", "--skip-negative-durations", "--policy", "both", "--quiet",
         "--report", str(page)],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    print(f"replay page: {page.stat().st_size:,} bytes")

    browser.send("Page.navigate", url=page.as_uri())
    wait_until(lambda: browser.js("document.readyState") == "complete", 15, "the page to load")
    assert browser.js("performance.getEntriesByType('resource').length") == 0  # nothing fetched

    pools = [name for name in doc["static"] if name != "total"]
    charts = browser.js(CHARTS)
    assert [(c["pool"], c["policy"]) for c in charts] == [
        (pool, policy) for pool in pools for policy in ("static", "demand")]
    by_run = {(c["pool"], c["policy"]): c for c in charts}
    for (pool, policy), chart in by_run.items():
        assert chart["width"] > 300 and chart["height"] > 90, chart  # drawn, side by side
        assert chart["ready"] >= 30, chart  # a point a minute for the hour
        assert chart["target"] == (1 if policy == "demand" else 0), chart
        row = doc[policy][pool]  # every miss of the run is marked (no alias: its own pool)
        assert chart["misses"] == row["checkouts"] - row["hits"], (chart, row)
    assert sum(c["misses"] for c in charts) > 0  # the demand run misses at first
    left = {c["policy"]: browser.js(
        f"document.querySelector('svg.pool-chart[data-policy={c['policy']}]')"
        ".getBoundingClientRect().left") for c in charts[:2]}
    assert left["static"] < left["demand"]  # one row: static left of demand

    bars = browser.js("[...document.querySelectorAll('svg.wait-chart rect')].map("
                      "r => [r.dataset.policy, Number(r.getAttribute('height'))])")
    assert {policy for policy, _height in bars} == {"static", "demand"}
    assert any(height > 0 for policy, height in bars if policy == "demand")

    assert browser.js(TABLES) == doc  # every number of --json, as the page shows it
    screenshot(browser, 1280, 900, artifacts / "replay-report-1280x900.png")
    assert browser.problems() == []
