"""``bench/same_behaviour.py`` on a tiny facade scenario: this checkout against itself (two
runs a side) behaves the same, and a run that does something else (one more checkout through
the API) is reported as a difference in the Redis commands, metrics, messages, final state
and answers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "same_behaviour.py"


def test_this_checkout_against_itself_behaves_the_same() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "this", "--scenarios", "facade", "--runs", "2",
         "--checkouts", "1"], capture_output=True, text=True, timeout=200, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert proc.stdout.rstrip().endswith("SAME BEHAVIOUR")
    for part in ("redis_commands", "messages", "metrics", "final_state", "answers"):
        assert f"  {part}" in proc.stdout and "DIFFERENT" not in proc.stdout


def test_one_more_checkout_is_a_difference() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import same_behaviour
    finally:
        sys.path.remove(str(ROOT / "bench"))
    with same_behaviour.package_of(ROOT) as pythonpath:
        one, two = (same_behaviour.run_scenario("facade", ROOT, pythonpath,
                                                ["--checkouts", str(n)]) for n in (1, 2))
    assert "error" not in one and "error" not in two, (one.get("error"), two.get("error"))
    found, _volatile = same_behaviour.compare([one], [two])
    assert {part for part, diffs in found.items() if diffs} == {
        "redis_commands", "messages", "metrics", "final_state", "answers"}
    assert any(d.startswith("increment checkout.success") for d in found["metrics"])
    text, same = same_behaviour.report({"facade": ([one], [two])})
    assert not same and text.endswith("BEHAVIOUR DIFFERS")
