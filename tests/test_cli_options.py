"""The common options (``--config``, ``--log-level``, ``--log-format``) work before the
command's name as after it: ``vmpooler --config X check-config`` checks X, as a process.
(argparse used to let the command's own default replace the value given before it, so the
bundled configuration was checked instead and found fine.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vmpooler.web.cli.command import _parser, parse_arguments

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]
BAD = ":config:\n  task_limit: 'x'\n"


@pytest.mark.parametrize("order", ["before", "after"])
def test_check_config_checks_the_file_named_before_or_after_the_command(
        tmp_path: Path, order: str) -> None:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(BAD)
    option = ["--config", str(path)]
    argv = [*option, "check-config"] if order == "before" else ["check-config", *option]
    result = subprocess.run([*VMPOOLER, *argv], capture_output=True, text=True, timeout=60,
                            cwd=tmp_path)
    assert result.returncode == 1, result.stdout
    assert f"{path}:2: config.task_limit" in result.stderr


@pytest.mark.parametrize("argv, expected", [
    (["--log-level", "debug", "manager"], ("debug", None, None)),
    (["manager", "--log-level", "error"], ("error", None, None)),
    (["--config", "a.yaml", "--log-format", "json", "api"], ("info", "a.yaml", "json")),
    (["--config", "a.yaml", "api", "--config", "b.yaml"], ("info", "b.yaml", None)),
    (["run"], ("info", None, None)),
    ([], ("info", None, None)),
])
def test_the_common_options_keep_their_value_wherever_given(
        argv: list[str], expected: tuple[str, str | None, str | None]) -> None:
    args = _parser().parse_args(argv)
    assert (args.log_level, args.config, args.log_format) == expected


@pytest.mark.parametrize("argv", [[], ["--log-level", "debug"], ["--config", "a.yaml"]])
def test_no_command_is_run_with_runs_own_defaults(argv: list[str]) -> None:
    """A bare ``vmpooler`` serves as ``vmpooler run`` does (it ended in a traceback: run's
    ``--bind`` and ``--threads`` were never parsed)."""
    args = parse_arguments(argv)
    assert (args.command, args.bind, args.threads) == ("run", None, 8)
    assert args.log_level == ("debug" if "debug" in argv else "info")
