"""Hostile files given to the shipped commands, as real processes: YAML that would hang or
crash ``vmpooler check-config`` (an alias bomb, 5,000-deep nesting, a 10,001-digit integer,
a recursive alias, a file too large), wherever it comes from (``--config``, a
``pools_from_dir`` file, ``extra_config``) and whichever command reads it (``run``, ``api``,
``manager``, ``replay``); and traces that would crash or stall ``vmpooler replay`` (times
outside the calendar once shifted to UTC, ``1e300``, rows five years apart).

Each is refused with exit status 2 and one line on stderr naming the file (and its line,
row and column where there is one) and what is wrong, never a traceback, within
:data:`BOUND_S` (the subprocess timeout: exceeding it fails the test).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]
BOUND_S = 10.0
POOLS = ":pools:\n- {name: linux-x64, size: 1}\n"


def laughs(levels: int = 9) -> str:
    """A billion-laughs document (9^9 values): level 6 (line 7) is the first over 10^6."""
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


# name: (file text, the line named, what the line says)
YAML_CASES: dict[str, tuple[str, int | None, str]] = {
    "alias bomb": (laughs() + POOLS, 7, "more than 1,000,000 values, aliases expanded"),
    "5000-deep flow": (POOLS + "x: " + "[" * 5000 + "]" * 5000 + "\n", 3,
                       "nested deeper than 100 levels"),
    "deep block": (POOLS + "x:\n" + "".join(" " * i + "- \n" for i in range(1, 200)), 103,
                   "nested deeper than 100 levels"),
    "recursive alias": (POOLS + "x: &x [*x]\n", 3,
                        "nested deeper than 100 levels, aliases expanded"),
    "10001-digit integer": (":pools:\n- {name: linux-x64, size: " + "9" * 10_001 + "}\n", 2,
                            "an integer of 10,001 characters; at most 1000 are read"),
    "5 MiB": (POOLS + "#" * (5 * 1024 * 1024) + "\n", None,
              "larger than 4,194,304 bytes; refused unread"),
}


def vmpooler(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the command; more than :data:`BOUND_S` raises ``TimeoutExpired`` (a failure)."""
    return subprocess.run([*VMPOOLER, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=BOUND_S)


def assert_refused(result: subprocess.CompletedProcess[str], expected: str) -> None:
    """Exit 2, and stderr is exactly one line, ``expected``; no traceback anywhere."""
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output[-3000:]
    assert result.returncode == 2, output[-3000:]
    assert result.stderr.splitlines() == [expected], result.stderr[-3000:]


def refusal(path: Path, line: int | None, message: str) -> str:
    where = f"{path}" if line is None else f"{path}:{line}"
    suffix = "" if message.endswith("refused unread") else "; refused"
    return f"vmpooler: {where}: <document>: {message}{suffix}"


@pytest.mark.parametrize("case", sorted(YAML_CASES))
def test_check_config_refuses_a_hostile_file_in_one_line(tmp_path: Path, case: str) -> None:
    text, line, message = YAML_CASES[case]
    config = tmp_path / "vmpooler.yaml"
    config.write_text(text)
    result = vmpooler("check-config", "--config", str(config), cwd=tmp_path)
    assert_refused(result, refusal(config, line, message))


@pytest.mark.parametrize("command", ["run", "api", "manager"])
@pytest.mark.parametrize("case", ["alias bomb", "5000-deep flow", "10001-digit integer"])
def test_every_command_refuses_it_alike(tmp_path: Path, command: str, case: str) -> None:
    text, line, message = YAML_CASES[case]
    config = tmp_path / "vmpooler.yaml"
    config.write_text(text)
    result = vmpooler(command, "--config", str(config), cwd=tmp_path)
    assert_refused(result, refusal(config, line, message))


@pytest.mark.parametrize("case", ["alias bomb", "recursive alias"])
def test_a_hostile_pools_from_dir_or_extra_config_file_is_named(tmp_path: Path,
                                                                case: str) -> None:
    text, line, message = YAML_CASES[case]
    (tmp_path / "pools").mkdir()
    (tmp_path / "pools" / "a.yaml").write_text("- {name: a, size: 1}\n")
    hostile = tmp_path / "pools" / "b.yaml"
    hostile.write_text(text)
    config = tmp_path / "vmpooler.yaml"
    config.write_text(":config:\n  pools_from_dir: pools\n" + POOLS)
    result = vmpooler("check-config", "--config", str(config), cwd=tmp_path)
    assert_refused(result, refusal(hostile, line, message))
    extra = tmp_path / "extra.yaml"
    extra.write_text(text)
    config.write_text(":config:\n  extra_config: extra.yaml\n" + POOLS)
    result = vmpooler("check-config", "--config", str(config), cwd=tmp_path)
    assert_refused(result, refusal(extra, line, message))


def test_replay_refuses_a_hostile_configuration_in_one_line(tmp_path: Path) -> None:
    text, line, message = YAML_CASES["alias bomb"]
    config = tmp_path / "replay.yaml"
    config.write_text(text)
    trace = tmp_path / "trace.csv"
    trace.write_text("queued_at,platform,duration_s\n2025-09-04T17:25:47Z,linux-x64,10\n")
    result = vmpooler("replay", "--trace", str(trace), "--config", str(config), cwd=tmp_path)
    assert_refused(result, "vmpooler replay: " + refusal(config, line, message).removeprefix(
        "vmpooler: "))


OUT_OF_RANGE = "(times from 1970-01-01 to 2999-12-31 UTC are read)"
# name: (rows after the header, the line on stderr after "vmpooler replay: <trace>")
TRACE_CASES: dict[str, tuple[str, str]] = {
    "year 0 once in UTC": (
        "2025-09-04T17:25:47Z,linux-x64,10\n0001-01-01T00:00:00+14:00,linux-x64,10\n",
        f":3: column queued_at: bad time: out of range: '0001-01-01T00:00:00+14:00' "
        f"{OUT_OF_RANGE}"),
    "year 10000 once in UTC": (
        "9999-12-31T23:59:59-14:00,linux-x64,10\n",
        f":2: column queued_at: bad time: out of range: '9999-12-31T23:59:59-14:00' "
        f"{OUT_OF_RANGE}"),
    "1e300 as a time": (
        "1e300,linux-x64,10\n",
        f":2: column queued_at: bad time: out of range: '1e300' {OUT_OF_RANGE}"),
    "1e300 as a duration": (
        "2025-09-04T17:25:47Z,linux-x64,1e300\n",
        ":2: column duration_s: too large: '1e300' (at most 34560000 s, 400 days)"),
    "five years apart": (
        "2020-01-01T00:00:00Z,linux-x64,10\n2025-01-01T00:00:00Z,linux-x64,10\n",
        ": the checkouts to replay span 1,827.0 days (2020-01-01T00:00:00Z to "
        "2025-01-01T00:00:00Z), more than the 400 a replay covers; choose a part with "
        "--start and --hours"),
}


@pytest.mark.parametrize("case", sorted(TRACE_CASES))
def test_replay_refuses_a_hostile_trace_in_one_line(repo_root: Path, tmp_path: Path,
                                                     case: str) -> None:
    rows, expected = TRACE_CASES[case]
    trace = tmp_path / "trace.csv"
    trace.write_text("queued_at,platform,duration_s\n" + rows)
    result = vmpooler("replay", "--trace", str(trace), "--config",
                      str(repo_root / "conf" / "replay.example.yaml"), cwd=tmp_path)
    assert_refused(result, f"vmpooler replay: {trace}{expected}")


@pytest.mark.parametrize(("option", "expected"), [
    (["--hours", "inf"], "--hours: must be positive and at most 9600 (400 days), got inf"),
    (["--clone-time", "nan"], "--clone-time: must be from 0 to 86400 seconds, got nan"),
    (["--start", "1e300"], f"--start: out of range: '1e300' {OUT_OF_RANGE}"),
])
def test_replay_refuses_hostile_options_in_one_line(repo_root: Path, tmp_path: Path,
                                                    option: list[str], expected: str) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("queued_at,platform,duration_s\n2025-09-04T17:25:47Z,linux-x64,10\n")
    result = vmpooler("replay", "--trace", str(trace), "--config",
                      str(repo_root / "conf" / "replay.example.yaml"), *option, cwd=tmp_path)
    assert_refused(result, f"vmpooler replay: {expected}")
