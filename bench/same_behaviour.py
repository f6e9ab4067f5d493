"""Did a refactoring change what vmpooler does? The same deterministic scenarios on two
builds, side by side; exit status 1 when they did anything differently.

    .venv/bin/python bench/same_behaviour.py BUILD_A [BUILD_B] [--scenarios replay,facade,managers]

A build is ``this`` (this checkout), a directory holding a checkout, or a git commit (checked
out for the run with ``git worktree add`` and removed after); BUILD_B defaults to BUILD_A (a
self-comparison: the check that the scenarios are deterministic). Each scenario of each
build runs in its own child process, ``bench/behaviour_scenarios.py`` of *this* checkout
with the build's package first on ``PYTHONPATH`` (a temporary ``vmpooler/`` whose
``actors``, ``web``, ``providers``, ``conf`` link to the build's folders), and the child says
which folders it ran. What is compared, per scenario (bench/README.md): the Redis commands
as a multiset of (command, normalised keys), the actor messages by type, the metrics by
(kind, name, tags), the final Redis state, and the replay's ``--json`` output or the API's
answers. A scenario whose child fails is a difference too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCENARIOS = ("replay", "facade", "managers")
COUNTED = ("redis_commands", "messages", "metrics", "final_state")
"""Multisets (entry -> count) compared entry by entry."""
PRESENCE = {("replay", "redis_commands")}
"""Compared as sets of entries, counts aside: in the replay, the pools race for clone slots
(``task_limit``), and the attempts to take one (the slot script, refused when none is free)
vary from run to run by ten percent and more on one build, as do the replay's own reads of
the ready counts, while the clones started and the output do not."""
EXACT = ("output", "answers")
"""Compared whole: the replay's JSON, the API's answers in order."""


@contextmanager
def checkout_of(build: str) -> Iterator[Path]:
    """The directory of ``build``'s checkout (a temporary worktree for a commit)."""
    if build == "this":
        yield HERE.parent
        return
    if Path(build).is_dir():
        yield Path(build).resolve()
        return
    where = Path(tempfile.mkdtemp(prefix="same-behaviour-build-")) / "tree"
    subprocess.run(["git", "-C", str(HERE.parent), "worktree", "add", "--detach", "--quiet",
                    str(where), build], check=True)
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(HERE.parent), "worktree", "remove", "--force",
                        str(where)], check=False)
        shutil.rmtree(where.parent, ignore_errors=True)


@contextmanager
def package_of(checkout: Path) -> Iterator[str]:
    """A directory that, first on ``PYTHONPATH``, makes ``vmpooler`` the checkout's code."""
    shim = Path(tempfile.mkdtemp(prefix="same-behaviour-pkg-"))
    try:
        (shim / "vmpooler").mkdir()
        (shim / "vmpooler" / "__init__.py").write_text("")
        for name in ("actors", "web", "providers", "conf"):
            (shim / "vmpooler" / name).symlink_to(checkout / name)
        yield str(shim)
    finally:
        shutil.rmtree(shim, ignore_errors=True)


def run_scenario(scenario: str, checkout: Path, pythonpath: str,
                 options: list[str]) -> dict[str, Any]:
    """One scenario in a child process on the build; its record, or ``{"error": ...}``."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        out = Path(handle.name)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (pythonpath, os.environ.get("PYTHONPATH")) if p))
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(HERE / "behaviour_scenarios.py"), scenario,
                               "--out", str(out), *options], env=env, capture_output=True,
                              text=True, timeout=600, check=False)
        if proc.returncode != 0:
            return {"error": f"exit {proc.returncode}: {proc.stderr.strip()[-2000:]}"}
        record: dict[str, Any] = json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)
    record["seconds"] = round(time.monotonic() - started, 1)
    if Path(record.get("source", "")).resolve() != checkout.resolve():
        return {"error": f"ran {record.get('source')}, not the build's {checkout}"}
    return record


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """A JSON document as ``path -> leaf``."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}/{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _parts(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The compared parts of one run, each as ``entry -> value``."""
    parts = {part: record[part] for part in COUNTED if part in record}
    if "output" in record:
        parts["output"] = _flatten(record["output"])
    if "answers" in record:
        parts["answers"] = {f"{n:03d}": a for n, a in enumerate(record["answers"])}
    return parts


def _numbers(values: list[Any]) -> list[float] | None:
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    return [float(v) for v in values] if numeric else None


def compare(a_runs: list[dict[str, Any]], b_runs: list[dict[str, Any]], *,
            presence: frozenset[str] = frozenset()
            ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Per compared part: the differences between the builds, and the volatile entries
    (those whose value varied between the runs of one build). An entry that is the same in
    every run of a build must be the same in the other's; a volatile count must fall in the
    other build's range widened by the largest spread seen (so noise of one run to the
    next is not a difference, a shift beyond it is). Answers are compared exactly."""
    found: dict[str, list[str]] = {}
    volatile: dict[str, list[str]] = {}
    failed = [f"{side} failed: {r['error']}" for side, runs in (("A", a_runs), ("B", b_runs))
              for r in runs if "error" in r]
    if failed:
        return {"run": failed}, {}
    a_parts, b_parts = [_parts(r) for r in a_runs], [_parts(r) for r in b_runs]
    for parts in a_parts + b_parts:
        for part in presence & set(parts):
            parts[part] = dict.fromkeys(parts[part], 1)
    for part in dict.fromkeys(p for parts in a_parts + b_parts for p in parts):
        diffs, noisy = found.setdefault(part, []), volatile.setdefault(part, [])
        absent = 0 if part in COUNTED else None
        keys = sorted({k for parts in a_parts + b_parts for k in parts.get(part, {})})
        for key in keys:
            a = [parts.get(part, {}).get(key, absent) for parts in a_parts]
            b = [parts.get(part, {}).get(key, absent) for parts in b_parts]
            shown = f"{key}: A {_show(a)}, B {_show(b)}"
            if len({json.dumps(v) for v in a}) == 1 and len({json.dumps(v) for v in b}) == 1:
                if a[0] != b[0]:
                    diffs.append(shown)
                continue
            noisy.append(shown)
            na, nb = _numbers(a), _numbers(b)
            if part == "answers" or na is None or nb is None:
                diffs.append(shown)
                continue
            spread = max(max(na) - min(na), max(nb) - min(nb))
            if max(nb) < min(na) - spread or min(nb) > max(na) + spread:
                diffs.append(shown)
    return found, volatile


def _show(values: list[Any]) -> str:
    texts = [json.dumps(v) if not isinstance(v, str) else v for v in values]
    text = texts[0] if len(set(texts)) == 1 else "/".join(texts)
    return text if len(text) <= 300 else text[:300] + "..."


def describe(part: str, record: dict[str, Any]) -> str:
    value = _parts(record).get(part, {})
    if part in COUNTED:
        return f"{len(value)} distinct, {sum(value.values())} in all"
    return f"{len(value)} entries"


def report(results: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]], *,
           limit: int = 15) -> tuple[str, bool]:
    """The text report, and whether every scenario behaved the same on both builds."""
    lines, same = [], True
    for scenario, (a_runs, b_runs) in results.items():
        found, volatile = compare(a_runs, b_runs, presence=frozenset(
            part for name, part in PRESENCE if name == scenario))
        seconds = ", ".join(f"{side} {'/'.join(str(r.get('seconds', '-')) for r in runs)} s"
                            for side, runs in (("A", a_runs), ("B", b_runs)))
        lines.append(f"{scenario} ({seconds}):")
        for part, diffs in found.items():
            same &= not diffs
            noisy = volatile.get(part, [])
            status = (f"{len(diffs)} DIFFERENCE(S)" if diffs else describe(part, a_runs[0])) + (
                f"; {len(noisy)} vary from run to run" if noisy else "") + (
                "; compared as a set" if (scenario, part) in PRESENCE else "")
            lines.append(f"  {part:<15} {'same' if not diffs else 'DIFFERENT'}: {status}")
            lines.extend(f"    {d}" for d in diffs[:limit])
            if len(diffs) > limit:
                lines.append(f"    ... and {len(diffs) - limit} more")
    lines.append("SAME BEHAVIOUR" if same else "BEHAVIOUR DIFFERS")
    return "\n".join(lines), same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build_a", help="this | a checkout's directory | a git commit")
    parser.add_argument("build_b", nargs="?", help="the same kinds (default: BUILD_A again)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma-separated, of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--hours", type=float, default=0.5,
                        help="replay: hours of the trace (default 0.5)")
    parser.add_argument("--checkouts", type=int, default=6, help="facade: API checkouts")
    parser.add_argument("--runs", type=int, default=2,
                        help="runs of each scenario per build (default 2; 1: no noise floor)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="scenario processes at once (default 2)")
    parser.add_argument("--json", dest="json_out", help="also write both builds' records here")
    args = parser.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    options = ["--hours", str(args.hours), "--checkouts", str(args.checkouts)]
    build_b = args.build_b or args.build_a
    results: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    with ExitStack() as stack:
        trees = {build: stack.enter_context(checkout_of(build))
                 for build in dict.fromkeys((args.build_a, build_b))}
        paths = {build: stack.enter_context(package_of(tree)) for build, tree in trees.items()}
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for scenario in scenarios:
                print(f"[same_behaviour] {scenario}: {args.runs} run(s) of each build",
                      file=sys.stderr, flush=True)
                futures = {side: [pool.submit(run_scenario, scenario, trees[build],
                                              paths[build], options)
                                  for _ in range(args.runs)]
                           for side, build in (("A", args.build_a), ("B", build_b))}
                results[scenario] = ([f.result() for f in futures["A"]],
                                     [f.result() for f in futures["B"]])
    text, same = report(results)
    print(f"A: {args.build_a}\nB: {build_b}\n{text}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(
            {s: {"A": a, "B": b} for s, (a, b) in results.items()}, indent=1, sort_keys=True))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
