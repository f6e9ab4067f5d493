"""``bench/dummy_inventory.py`` in its smallest quick mode: both inventories are run side by
side as ``vmpooler run`` processes under the mixed load, and the JSON holds every figure
BENCHMARKS.md reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BENCH = Path(__file__).resolve().parent.parent / "bench" / "dummy_inventory.py"


def test_quick_run_reports_both_inventories(tmp_path: Path) -> None:
    out = tmp_path / "dummy.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--duration", "3", "--pools", "2",
         "--size", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=110, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    memory, shared = json.loads(out.read_text())["results"]
    assert (memory["variant"], shared["variant"]) == ("memory", "file")
    assert shared["inventory_kept_as"] == "one file per VM"
    for result in (memory, shared):
        assert result["ondemand_requests"] == 3
        assert result["ondemand_median_s"] > 0 and result["ondemand_p99_s"] > 0
        assert result["ondemand_not_ready"] == 0
        assert result["checkouts"] == 6 and result["checkout_median_ms"] > 0
        assert result["errors"] == {}
    assert shared["inventory_vms"] >= 2
    assert "to ready, median s" in proc.stdout
