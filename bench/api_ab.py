"""Two ``vmpooler api`` builds side by side over several runs of ``bench/api.py``.

One run of ``bench/api.py`` serves its ``--baseline`` build's rounds right before its own,
so the order favours one of them and a quiet 2-core machine still moves a figure by 10-15 %
from one run to the next. This runs ``bench/api.py --only checkout,status`` ``--runs``
times, swapping which build goes first each time (``--api-command`` and ``--baseline``
exchanged), and prints every figure with the median of each build and their ratio.

    .venv/bin/python bench/api_ab.py --a before=/tmp/vmp-before/vmpooler \\
        --b after=.venv/bin/vmpooler --runs 4 --json ab.json

A build is a ``vmpooler`` command; see BENCHMARKS.md for serving an older commit's code
from this virtualenv.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(first: tuple[str, str], second: tuple[str, str], args: argparse.Namespace,
            out: Path) -> list[dict[str, object]]:
    """``bench/api.py`` with ``first`` as the baseline (served first) and ``second`` as the
    API under test; its rounds, each labelled with its build."""
    command = [sys.executable, str(ROOT / "bench" / "api.py"), "--only", args.only,
               "--no-ruby", "--concurrency", args.concurrency, "--duration",
               str(args.duration), "--api-command", str(Path(second[1]).resolve()),
               "--baseline", f"{first[0]}={Path(first[1]).resolve()}", "--json", str(out)]
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    rounds = json.loads(out.read_text())["rounds"]
    for entry in rounds:
        label = str(entry["label"])
        entry["build"] = first[0] if label.startswith(f"[{first[0]}]") else second[0]
        entry["what"] = "checkout" if "POST" in label else "status"
    return [r for r in rounds if "bench-000" in str(r["label"]) or "status" in str(r["label"])]


def _listed(figures: list[float], splits: list[str]) -> str:
    """Each run's requests per second with its split of the work between the workers."""
    return ", ".join(f"{x:.0f} ({split})" for x, split in zip(figures, splits, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, metavar="LABEL=COMMAND")
    parser.add_argument("--b", required=True, metavar="LABEL=COMMAND")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--only", default="checkout,status")
    parser.add_argument("--concurrency", default="8,32")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    a, b = (tuple(spec.split("=", 1)) for spec in (args.a, args.b))
    figures: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    splits: dict[tuple[str, int, str], list[str]] = defaultdict(list)
    cpu: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as work:
        for run in range(args.runs):
            first, second = (a, b) if run % 2 == 0 else (b, a)
            for entry in one_run(first, second, args, Path(work) / f"run{run}.json"):
                key = (str(entry["what"]), int(entry["concurrency"]), str(entry["build"]))
                figures[key].append(float(entry["rps"]))
                cpu[key].append(float(entry.get("server_cpu_ms_per_req") or 0.0))
                splits[key].append(str(entry.get("worker_split", "")))
            print(f"run {run + 1}/{args.runs} done ({first[0]} first)", flush=True)
    table = []
    for what in args.only.split(","):
        for conc in (int(c) for c in args.concurrency.split(",")):
            ra, rb = figures[(what, conc, a[0])], figures[(what, conc, b[0])]
            if not ra or not rb:
                continue
            ma, mb = statistics.median(ra), statistics.median(rb)
            ca, cb = statistics.median(cpu[(what, conc, a[0])]), statistics.median(
                cpu[(what, conc, b[0])])
            table.append({"what": what, "concurrency": conc, a[0]: ra, b[0]: rb,
                          f"split_{a[0]}": splits[(what, conc, a[0])],
                          f"split_{b[0]}": splits[(what, conc, b[0])],
                          f"median_{a[0]}": ma, f"median_{b[0]}": mb, "ratio": mb / ma,
                          f"cpu_ms_{a[0]}": ca, f"cpu_ms_{b[0]}": cb})
            print(f"{what:>8} c={conc:<3} {a[0]}: {_listed(ra, splits[(what, conc, a[0])])} "
                  f"(median {ma:.0f}, {ca:.3f} ms CPU/req)  {b[0]}: "
                  f"{_listed(rb, splits[(what, conc, b[0])])} (median {mb:.0f}, {cb:.3f} ms)  "
                  f"ratio {mb / ma:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
