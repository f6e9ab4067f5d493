"""Running a benchmark's scenarios against several builds, side by side.

A build is this tree, or another checkout (``git worktree add /tmp/old <commit>``): its own
``bench/<name>.py`` runs each scenario in a child process against its own code, through a
temporary directory first on ``PYTHONPATH`` that maps ``vmpooler.actors``, ``.web``,
``.providers`` and ``.conf`` to the checkout's folders (ahead of this tree's editable
install). Rounds alternate the builds' order; :func:`compare_table` prints every round's
figure per build and the ratio of the medians. Used by ``ondemand.py``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fill import fmt, run_json_child

__all__ = ["compare_table", "run_child", "run_rounds", "sources"]


def sources(where: str | None = None) -> dict[str, str]:
    """Which code runs: the checkout holding ``vmpooler.actors`` (this process's by
    default) and its commit (``+changes`` when ``actors/`` differs from it)."""
    if where is None:
        import vmpooler.actors.system as system_module

        # <checkout>/actors/system.py
        where = os.path.dirname(os.path.dirname(os.path.realpath(system_module.__file__)))
    try:
        commit = subprocess.run(["git", "-C", where, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=False).stdout.strip()
        dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--", "actors"],
                               capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        commit, dirty = "", ""
    return {"sources": where, "source_commit": commit + ("+changes" if dirty else "")}


def _shim(checkout: str) -> str:
    """A directory that, first on ``PYTHONPATH``, makes ``vmpooler`` the checkout's code."""
    shim = Path(tempfile.mkdtemp(prefix="vmpooler-bench-build-"))
    (shim / "vmpooler").mkdir()
    for name in ("actors", "web", "providers", "conf"):
        (shim / "vmpooler" / name).symlink_to(Path(checkout) / name)
    return str(shim)


def run_child(script: str, common: list[str], *child: str, build: str = "this",
              checkout: str | None = None) -> dict[str, Any]:
    """One scenario in a child process: ``script`` (bench/<name>.py) on this tree, or the
    file of that name in ``checkout`` on the checkout's own code. ``common``: the
    arguments every child gets."""
    if checkout is not None:
        script = os.path.join(checkout, "bench", os.path.basename(script))
    cmd = [sys.executable, script, *child, *common]
    print(f"[bench] {build}: {' '.join(child)}", file=sys.stderr, flush=True)
    saved = os.environ.get("PYTHONPATH")
    shim = _shim(checkout) if checkout is not None else None
    if shim is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (shim, saved) if p)
    try:
        result = run_json_child(cmd, f"{build}: {' '.join(child)}")
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
        if shim is not None:
            shutil.rmtree(shim, ignore_errors=True)
    if checkout is not None:
        result.update(sources(checkout))
    result["build"] = build
    return result


def run_rounds(args: argparse.Namespace, builds: list[tuple[str, str | None]],
               common: list[str], *child: str) -> list[dict[str, Any]]:
    """The scenario ``child`` ``args.rounds`` times per build (``(label, checkout)``, None
    for this tree), the builds' order alternating from round to round (A B, B A, ...)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ondemand.py")
    out = []
    for n in range(args.rounds):
        for build, path in (builds if n % 2 == 0 else list(reversed(builds))):
            result = run_child(script, common, *child, build=build, checkout=path)
            result["round"] = n + 1
            out.append(result)
    return out


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def compare_table(results: list[dict[str, Any]], builds: list[str],
                  scenario: Callable[[dict[str, Any]], str],
                  metrics: list[tuple[str, Callable[[dict[str, Any]], float | None]]],
                  table: Callable[[list[tuple[str, list[Any]]], list[str]], str]) -> str:
    """Per scenario (column) and metric: each build's figures over the rounds, and the ratio
    of the medians of the first build to each other (``this / baseline``)."""
    columns = list(dict.fromkeys(scenario(r) for r in results))
    rows: list[tuple[str, list[Any]]] = []
    for title, value in metrics:
        rows.append((title, []))
        medians: dict[str, dict[str, float | None]] = {}
        for build in builds:
            cells, medians[build] = [], {}
            for column in columns:
                figures = [value(r) for r in results
                           if r["build"] == build and scenario(r) == column]
                numbers = [f for f in figures if f is not None]
                medians[build][column] = _median(numbers)
                cells.append(", ".join(fmt(f) for f in figures) or "-")
            rows.append((f"  {build}", cells))
        for other in builds[1:]:
            ratios = []
            for column in columns:
                a, b = medians[builds[0]][column], medians[other][column]
                ratios.append(f"{a / b:.2f}" if a is not None and b else "-")
            rows.append((f"  ratio {builds[0]} / {other}", ratios))
    return table(rows, columns)
