"""What ``bench/api.py`` prints: the table of one run against the bare app, Ruby's API and
the targets, and the hottest functions of its ``py-spy`` profiles."""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import ruby_api
from api_setup import (
    ROOT,
    TARGET_RATIO,
    TARGET_ROUND_TRIPS,
    TARGET_STATUS_P99_MS,
    TARGET_STATUS_RPS,
    VMPOOLER_391_CHECKOUT,
    VMPOOLER_391_STATUS_RPS,
)
from ruby_api import STATUS_VIEW


def summarize_profiles(paths: list[Path], top: int = 25) -> dict[str, Any]:
    """Self and inclusive sample shares by function from py-spy's collapsed stacks, counting
    only samples of threads that were busy (not parked waiting for work)."""
    self_count: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    idle_markers = ("wait (threading.py", "_worker (concurrent/futures/thread.py",
                    "select (selectors.py", "sleep (gunicorn")
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not count_text.isdigit():
                continue
            frames = stack.split(";")
            leaf = frames[-1]
            if any(m in leaf for m in idle_markers) or "_worker (concurrent" in leaf:
                continue
            count = int(count_text)
            total += count
            self_count[_short(leaf)] += count
            for frame in set(_short(f) for f in frames):
                incl[frame] += count
    if not total:
        return {"busy_samples": 0}
    return {
        "busy_samples": total,
        "self_top": [(f, round(100 * n / total, 1)) for f, n in self_count.most_common(top)],
        "inclusive_top": [(f, round(100 * n / total, 1)) for f, n in incl.most_common(top * 2)],
    }


def _short(frame: str) -> str:
    """``func (/long/path/site-packages/pkg/mod.py:12)`` -> ``func (pkg/mod.py)``."""
    match = re.match(r"(.*) \((.*?)(?::\d+)?\)$", frame)
    if not match:
        return frame
    func, path = match.groups()
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{func} ({path})"


# -- report ---------------------------------------------------------------------------------------
def code_fingerprint() -> str:
    """A short hash of the production sources measured (web/, actors/)."""
    digest = hashlib.sha256()
    for path in sorted([*ROOT.glob("web/**/*.py"), *ROOT.glob("actors/**/*.py")]):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def machine() -> dict[str, Any]:
    from importlib.metadata import version
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as handle:
        model = next((ln.split(":", 1)[1].strip() for ln in handle
                      if ln.startswith("model name")), "")
    wrk_version = ""
    if shutil.which("wrk"):
        out = subprocess.run(["wrk", "--version"], capture_output=True, text=True, check=False)
        wrk_version = (out.stdout or out.stderr).split("\n")[0].split(" Copyright")[0].strip()
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "platform": platform.platform(), "falcon": version("falcon"),
            "gunicorn": version("gunicorn"), "redis_py": version("redis"),
            "wrk": wrk_version, "code_fingerprint": code_fingerprint()}


def _f(value: float, digits: int = 1) -> str:
    return f"{value:.{digits}f}"


def report(results: dict[str, Any]) -> str:
    rounds = results["rounds"]
    lines = []
    header = (f"{'round':<33}{'conc':>5}{'req/s':>9}{'p50 ms':>8}{'p90 ms':>8}{'p99 ms':>8}"
              f"{'max ms':>8}{'non2xx':>7}{'srv CPU ms/req':>15}{'workers %':>10}"
              f"{'redis ms/req':>13}{'load ms/req':>12}{'other CPU%':>11}{'tries':>6}")
    lines.append(header)
    for r in rounds:
        lines.append(
            f"{r['label']:<33}{r['concurrency']:>5}{_f(r['rps']):>9}{_f(r['p50_ms'], 2):>8}"
            f"{_f(r['p90_ms'], 2):>8}{_f(r['p99_ms'], 2):>8}{_f(r['max_ms'], 1):>8}"
            f"{r['non_2xx']:>7}{_f(r['server_cpu_ms_per_req'], 3):>15}{r['worker_split']:>10}"
            f"{_f(r['redis_cpu_ms_per_req'], 3):>13}{_f(r['client_cpu_ms_per_req'], 3):>12}"
            f"{_f(r['foreign_cpu_pct']):>11}{r['attempts']:>5}{'' if r['accepted'] else '!'}")
    if not all(r["accepted"] for r in rounds):
        lines.append("! no attempt of this round had both workers busy and the machine otherwise "
                     "idle: the best one is shown, do not trust it")
    lines.append("")
    by = {(r["key"], r["concurrency"]): r for r in rounds}
    concs = sorted({r["concurrency"] for r in rounds})
    lines.append("checkout (POST /api/v3/vm/<hot>) against the bare app, and vmpooler 3.9.1:")
    for c in concs:
        co, x, rg = by.get(("checkout", c)), by.get(("bare_x", c)), by.get(("bare_redis", c))
        for label in ("Ruby", *results.get("baselines", [])):
            rb = by.get((f"checkout@{label.replace('Ruby', 'ruby')}", c))
            if rb:
                lines.append(f"  c={c} [{label}]: {_f(rb['rps'])}/s, p50 {_f(rb['p50_ms'], 2)} "
                             f"ms, p99 {_f(rb['p99_ms'], 2)} ms, worker CPU "
                             f"{rb['server_cpu_ms_per_req']:.3f} ms/req ({_hot_note(rb)})")
                lines += _per_checkout_lines(rb)
        if not co:
            continue
        old = VMPOOLER_391_CHECKOUT.get(c)
        parts = [f"  c={c}: {_f(co['rps'])}/s ({_hot_note(co)})"]
        if rg:
            parts.append(f"ratio to bare+GET {co['rps'] / rg['rps']:.2f}")
        if x:
            parts.append(f"to bare {co['rps'] / x['rps']:.2f}")
        parts.append(f"target >= {TARGET_RATIO}")
        if rg:
            parts.append(f"server CPU per request: bare+GET / vmpooler "
                         f"{rg['server_cpu_ms_per_req'] / co['server_cpu_ms_per_req']:.2f}")
        if old:
            parts.append(f"vs 3.9.1 in the issue {old[0]:g}/s p99 {old[1]:g} ms: "
                         f"x{co['rps'] / old[0]:.1f}, p99 {_f(co['p99_ms'])} ms")
        lines.append("; ".join(parts))
        lines += _per_checkout_lines(co, TARGET_ROUND_TRIPS)
    for who, cal in (("", results.get("calibration")),
                     (" [Ruby]", results.get("ruby", {}).get("calibration"))):
        if not cal:
            continue
        lines.append(f"  sequential calibration{who}: {cal['checkouts']} checkouts, "
                     f"{cal['mean_ms']:.2f} ms each; round trips per checkout "
                     f"{cal['round_trips_per_checkout']:.3f}, EVALSHA "
                     f"{cal['evalsha_per_checkout']:.3f}, all commands "
                     f"{cal['commands_per_checkout']:.3f}")
        lines.append("        commands: " + ", ".join(
            f"{k} {v}" for k, v in sorted(cal["redis_commands"].items(), key=lambda kv: -kv[1])))
    lines.append("")
    lines.append(f"GET /api/v3/status?view={STATUS_VIEW}<new each request> ({results['pools']} "
                 f"pools), target >= {TARGET_STATUS_RPS:g}/s (10 x vmpooler 3.9.1's "
                 f"{VMPOOLER_391_STATUS_RPS:g}/s in the issue) and p99 < "
                 f"{TARGET_STATUS_P99_MS:g} ms:")
    status_keys = [*(f"status@{label}" for label in results.get("baselines", [])),
                   "status@ruby", "status"]
    for c in concs:
        for key in status_keys:
            st = by.get((key, c))
            if not st:
                continue
            n = max(1, st["requests"])
            cmds = sum(st["redis_commands"].values()) / n
            evalsha = st["redis_commands"].get("evalsha", 0) / n
            who = "" if key == "status" else f" [{key.split('@', 1)[1]}]".replace(
                "[ruby]", "[Ruby]")
            lines.append(f"  c={c}{who}: {_f(st['rps'])}/s "
                         f"(x{st['rps'] / VMPOOLER_391_STATUS_RPS:.1f} vmpooler 3.9.1), p50 "
                         f"{_f(st['p50_ms'], 2)} ms, p99 {_f(st['p99_ms'], 2)} ms, worker CPU "
                         f"{st['server_cpu_ms_per_req']:.2f} ms/req; Redis commands per "
                         f"request {cmds:.0f} (EVALSHA {evalsha:.2f}; commands run inside a "
                         f"script count too), redis-server socket reads per request "
                         f"{st['redis_reads'] / n:.2f}")
    lines += ruby_api.comparison_report(results.get("vs_ruby", []),
                                        {**results.get("ruby", {}),
                                         "freshness": results.get("status_freshness", {})})
    lines += profile_report(results.get("profiles", []))
    return "\n".join(lines)


def _hot_note(r: dict[str, Any]) -> str:
    """VMs checked out, non-2xx and the hot pool's ready VMs at the start and end of a
    checkout round (flagged when it drained or fell below ``--hot``)."""
    flag = (", HOT POOL DRAINED" if r.get("drained")
            else ", fell below --hot" if r.get("below_hot") else "")
    return (f"{r.get('checkouts', 0)} VMs checked out, {r['non_2xx']} non-2xx; hot pool "
            f"{r.get('hot_ready_start', 0)} -> {r.get('hot_ready_left', 0)} ready{flag}")


def _per_checkout_lines(r: dict[str, Any], target: float | None = None) -> list[str]:
    """The Redis counts per checkout of one checkout round, as report lines."""
    pc = r.get("per_checkout")
    if not pc:
        return []
    aim = f" (target {target:g})" if target is not None else ""
    return [f"        Redis per checkout: round trips {pc['round_trips']:.3f}{aim}, EVALSHA "
            f"{pc['evalsha']:.3f}, XADD {pc['xadd']:.3f}, all commands (incl. those inside "
            f"a script) {pc['all_commands']:.3f}",
            "        commands: " + ", ".join(
                f"{k} {v}" for k, v in sorted(r["redis_commands"].items(),
                                              key=lambda kv: -kv[1]))]


def profile_report(profiles: list[dict[str, Any]]) -> list[str]:
    """The hottest functions of each :meth:`Bench.profile` result, as report lines."""
    lines: list[str] = []
    for prof in profiles:
        lines.append("")
        if not prof.get("self_top"):
            lines.append(f"profile {prof.get('name')}: {prof}")
            continue
        lines.append(f"py-spy, {prof['name']} at c={prof['concurrency']} "
                     f"({_f(prof['load_rps'])}/s while sampled), {prof['busy_samples']} "
                     f"samples of busy threads; self time:")
        lines += [f"  {pct:5.1f}%  {f}" for f, pct in prof["self_top"][:15]]
        lines.append("  inclusive:")
        lines += [f"  {pct:5.1f}%  {f}" for f, pct in prof["inclusive_top"][:35]]
    return lines


# -- driver ---------------------------------------------------------------------------------------
