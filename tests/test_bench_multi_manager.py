"""``bench/multi_manager.py`` in its smallest quick mode: every phase runs and the JSON holds
the figures BENCHMARKS.md reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BENCH = Path(__file__).resolve().parent.parent / "bench" / "multi_manager.py"


def test_quick_run_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "multi.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--pools", "6", "--size", "2",
         "--steady-seconds", "2", "--settle-seconds", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=110, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    one, many = doc["results"]
    assert (one["managers"], many["managers"]) == (1, 3)
    for result in (one, many):
        assert result["fill"]["seconds"] > 0
        assert sum(result["fill"]["pools_owned"].values()) == 6
        steady = result["steady"]
        assert steady["pool_cycles"] > 0 and steady["commands_per_vm_per_cycle"] > 0
        assert all(r["threads"] > 0 and r["rss_mib"] > 0
                   for r in steady["resources"].values())
        assert result["stop"]["tracebacks_in_logs"] == []
    assert sorted(many["fill"]["pools_owned"].values()) == [2, 2, 2]
    assert many["failover"]["all_victim_pools_taken_s"] is not None
    assert many["failover"]["served_again_s"] > 0
    assert many["join"]["share_held_s"] is not None
    assert sorted(many["join"]["pools_owned"].values()) == [2, 2, 2]
