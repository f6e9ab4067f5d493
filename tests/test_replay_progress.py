"""The progress ``vmpooler replay`` shows on stderr while it runs.

The renderer (actors/replay/progress.py) on an injected wall clock: the terminal's bar redrawn
in place, the plain line every few seconds elsewhere, the rate and the time left over two
runs. Then the shipped command as a process with stderr a pipe: plain lines with the
simulated date, the share done, the rate and the time left, the report alone on stdout, and
nothing at all with ``--quiet``.
"""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from vmpooler.actors.replay.progress import ProgressReport, format_left

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]
BITCOIN = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / \
    "bitcoin-core-gha-2025-09-04_2025-09-17.csv"
T0 = 1_757_000_000.0  # Thu 2025-09-04 15:33:20 UTC
LINE = re.compile(r"^replay (?P<label>\w+): (?P<date>\w{3} \d{4}-\d\d-\d\d \d\d:\d\d) UTC  "
                  r"(?P<percent>\d+\.\d)%  (?P<rate>[\d.]+|--) sim h/s  (?P<left>\S+) left$")


class Wall:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_terminal_form_redraws_one_line_with_a_bar() -> None:
    out, wall = io.StringIO(), Wall()
    progress = ProgressReport(out, runs=2, terminal=True, wall=wall, redraw=0.2)
    progress.begin("static", T0, T0 + 3600)
    wall.t += 10
    progress.at(T0 + 1800)  # half the first of two runs, 1800 simulated s in 10 wall s
    drawn = out.getvalue()
    assert drawn.startswith("\r") and drawn.endswith("\x1b[K") and "\n" not in drawn
    assert drawn == ("\rstatic [######..................]  25.0%  Thu 2025-09-04 16:03 UTC  "
                     "0.05 sim h/s  30s left\x1b[K")  # 1800 + 3600 s to go at 180 s/s
    wall.t += 0.125
    progress.at(T0 + 2000)  # within the redraw period: nothing
    assert out.getvalue() == drawn
    wall.t += 0.125
    progress.at(T0 + 2700)
    assert out.getvalue().count("\r") == 2 and "  37.5%  " in out.getvalue()
    progress.done()
    last = out.getvalue().rsplit("\r", 1)[1]
    assert "[############............]  50.0%" in last and last.endswith("\x1b[K\n")
    progress.begin("demand", T0, T0 + 3600)
    wall.t += 9.75  # 7200 simulated s in 20 wall s: the second run's rate counts the first
    progress.at(T0 + 3600)
    assert out.getvalue().rsplit("\r", 1)[1] == (
        "demand [########################] 100.0%  Thu 2025-09-04 16:33 UTC  "
        "0.1 sim h/s  0s left\x1b[K")


def test_the_terminal_line_never_wraps() -> None:
    out, wall = io.StringIO(), Wall()
    progress = ProgressReport(out, terminal=True, wall=wall, width=40)
    progress.begin("static", T0, T0 + 3600)
    progress.at(T0 + 60)
    assert out.getvalue() == "\rstatic [........................]   1.7\x1b[K"  # 39 wide


def test_the_plain_form_writes_a_line_every_few_seconds() -> None:
    out, wall = io.StringIO(), Wall()
    progress = ProgressReport(out, terminal=False, wall=wall, every=5.0)
    progress.begin("static", T0, T0 + 7200)
    for second in range(1, 12):
        wall.t = 100.0 + second
        progress.at(T0 + 600 * second)
    lines = out.getvalue().splitlines()
    assert lines == [  # at 5 and 10 s only
        "replay static: Thu 2025-09-04 16:23 UTC  41.7%  0.17 sim h/s  7s left",
        "replay static: Thu 2025-09-04 17:13 UTC  83.3%  0.17 sim h/s  2s left",
    ]
    progress.done()
    assert out.getvalue().splitlines()[-1] == (
        "replay static: Thu 2025-09-04 17:33 UTC  100.0%  0.18 sim h/s  0s left")


def test_before_any_wall_time_the_rate_and_time_left_are_unknown() -> None:
    out, wall = io.StringIO(), Wall()
    progress = ProgressReport(out, terminal=False, wall=wall, every=0.0)
    progress.begin("static", T0, T0 + 60)
    progress.at(T0 + 30)
    assert out.getvalue() == "replay static: Thu 2025-09-04 15:33 UTC  50.0%  -- sim h/s  -- left\n"
    assert [format_left(s) for s in (None, 0.4, 59, 61, 3725)] == ["--", "0s", "59s", "1m01s",
                                                                     "1h02m"]


@pytest.mark.integration
@pytest.mark.skipif(not BITCOIN.exists(), reason="the Bitcoin Core trace is not here")
def test_progress_lines_on_a_pipe_and_none_with_quiet(repo_root: Path, tmp_path: Path) -> None:
    trace = tmp_path / "slice.csv"
    trace.write_text("\n".join(BITCOIN.read_text().splitlines()[:80]) + "\n")
    command = [*VMPOOLER, "replay", "--trace", str(trace), "--config",
               str(repo_root / "conf" / "replay.example.yaml"), "--json", "--clone-time",
               "60", "--skip-negative-durations"]
    result = subprocess.run([*command, "--hours", "1", "--progress-every", "0.2"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["static"]["total"]["checkouts"] > 0  # stdout: the report
    lines = result.stderr.splitlines()
    assert len(lines) >= 3, result.stderr  # a few while it ran, and the last at 100%
    matches = [LINE.match(line) for line in lines]
    assert all(matches), result.stderr
    first = datetime(2025, 9, 4, 17, 25, tzinfo=UTC).timestamp()  # the first job's queued_at
    shares = []
    for match in matches:
        assert match is not None and match["label"] == "static"
        moment = datetime.strptime(match["date"], "%a %Y-%m-%d %H:%M").replace(tzinfo=UTC)
        assert first - 3600 <= moment.timestamp() <= first + 3600  # warm-up, then the hour
        shares.append(float(match["percent"]))
    assert shares == sorted(shares) and shares[-1] == 100.0 and shares[0] < 100.0
    assert any(m is not None and m["rate"] != "--" and float(m["rate"]) > 0 for m in matches)
    assert matches[-1] is not None and matches[-1]["left"] == "0s"

    quiet = subprocess.run([*command, "--hours", "0.25", "--quiet", "--progress-every", "0.01"],
                           capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    assert json.loads(quiet.stdout)["static"]["total"]["checkouts"] > 0


@pytest.mark.integration
@pytest.mark.skipif(not BITCOIN.exists(), reason="the Bitcoin Core trace is not here")
def test_ctrl_c_while_it_runs_is_one_line_and_exit_130(repo_root: Path, tmp_path: Path) -> None:
    trace = tmp_path / "slice.csv"
    trace.write_text("\n".join(BITCOIN.read_text().splitlines()[:200]) + "\n")
    process = subprocess.Popen(
        [*VMPOOLER, "replay", "--trace", str(trace), "--config",
         str(repo_root / "conf" / "replay.example.yaml"), "--hours", "5",
         "--skip-negative-durations", "--progress-every", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert process.stderr is not None
        first = process.stderr.readline()  # the replay is under way
        assert LINE.match(first.rstrip("\n")), first
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, err
    assert err.rstrip("\n").endswith("vmpooler replay: interrupted") and "Traceback" not in err
    assert out == ""  # no half report
