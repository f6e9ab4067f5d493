"""The real Ruby vmpooler 3.9.1 API as a second server in ``bench/api.py``.

``bench/api.py --ruby DEST`` (default ``/tmp/vmpooler-ruby`` when vmpooler is installed
there; ``--no-ruby`` skips it) serves, next to ``vmpooler api``, the Ruby vmpooler that
``../shared/tools/vmpooler-ruby/install.sh DEST`` unpacked, with
``../shared/tools/vmpooler-ruby/run.sh DEST api CONFIG PORT``: Puma in single mode with
0:5 threads, as vmpooler launches it, one process. It reads the same YAML config (which
then carries ``:config: logfile``, required by vmpooler's logger) and the same Redis, so
its checkout rounds take VMs from the same kind of hot pool, reseeded the same way, and
its ``/status`` rounds count the same 100 pools.

What this module provides:

* :class:`RubyServer`, a :class:`~api.Server` whose one process (``run.sh`` ``exec``\\ s
  Ruby, so the PID started is vmpooler's) is its only "worker" for the CPU accounting; it
  is stopped like the gunicorn servers (SIGTERM: Puma's graceful stop, then SIGKILL of its
  process group);
* :func:`status_freshness`: a check, made on each server before the ``/status`` rounds,
  that a ``view`` value no request used before gets an answer computed from Redis as it is
  now (vmpooler 3.9.1 caches ``/status`` 30 s per ``view`` value; ours caches nothing),
  and whether repeating a view value does too;
* :func:`versions`: vmpooler's and Ruby's versions, for the report;
* :func:`comparison` and :func:`comparison_report`: ours/Ruby per round.
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from vmpooler.actors.storage import schema

if TYPE_CHECKING:
    from api_setup import Server

ROOT = Path(__file__).resolve().parent.parent
RUN_SH = ROOT.parent / "shared" / "tools" / "vmpooler-ruby" / "run.sh"
DEFAULT_DEST = Path("/tmp/vmpooler-ruby")

STATUS_VIEW = "capacity,queue,clone,boot,pools,x"
"""The ``view`` value of every uncached ``/status`` request, before the per-request suffix
(``bench/api.py`` appends ``<tag>n<count>``). Both servers split ``view`` on commas and
ignore names they do not know, so it selects exactly the five sections vmpooler 3.9.1's
``/status`` has (plus ``status``) on both; the suffix only makes the value, and so Ruby's
cache key, new for every request. Without a ``view`` ours would add its ``providers``
section."""

TARGET_CHECKOUT_RATIO = 25.0        # ours / Ruby checkouts per second, at the top concurrency
TARGET_CHECKOUT_P99_MS = 20.0       # our checkout p99 there
TARGET_STATUS_RATIO = 20.0          # ours / Ruby uncached /status per second


def installed(dest: Path) -> bool:
    """True when ``dest`` holds a vmpooler installed by ``install.sh``."""
    return (dest / "src" / "bin" / "vmpooler").is_file()


def default_dest() -> Path | None:
    """``/tmp/vmpooler-ruby`` when vmpooler is installed there and ``run.sh`` exists."""
    return DEFAULT_DEST if installed(DEFAULT_DEST) and RUN_SH.is_file() else None


def versions(dest: Path) -> dict[str, str]:
    """``vmpooler`` (from its ``version.rb``) and ``ruby`` (``ruby --version``)."""
    text = (dest / "src" / "lib" / "vmpooler" / "version.rb").read_text()
    match = re.search(r"VERSION\s*=\s*'([^']+)'", text)
    out = subprocess.run(["ruby", "--version"], capture_output=True, text=True, check=False)
    return {"vmpooler": match.group(1) if match else "?",
            "ruby": " ".join(out.stdout.split()[:2])}


def make_server(server_class: type[Server], dest: Path, config: Path, port: int,
                log_path: Path, probe_path: str) -> Server:
    """A :class:`RubyServer` (built on ``server_class``, ``bench/api.py``'s ``Server``)
    serving vmpooler's API from ``dest`` with ``config`` on 127.0.0.1:``port``."""
    if not installed(dest):
        raise SystemExit(f"no Ruby vmpooler in {dest}: "
                         f"bash {RUN_SH.parent / 'install.sh'} {dest}, or --no-ruby")
    if not RUN_SH.is_file():
        raise SystemExit(f"{RUN_SH} is missing (needed to run the Ruby API), or --no-ruby")

    class RubyServer(server_class):  # type: ignore[misc, valid-type]
        """vmpooler 3.9.1's API: one Ruby process (Puma single mode, 0:5 threads)."""

        def workers(self) -> list[int]:
            process = self.process
            return [process.pid] if process is not None and process.poll() is None else []

    return RubyServer("vmpooler 3.9.1 (Ruby)",
                      ["bash", str(RUN_SH), str(dest), "api", str(config), str(port)],
                      port, probe_path, log_path, 1)


def _get_json(port: int, path: str) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        body = answer.read()
        if answer.status != 200:
            raise RuntimeError(f"GET {path}: {answer.status} {body[:200]!r}")
        return json.loads(body)
    finally:
        conn.close()


def status_freshness(probe: redis.Redis, port: int, pool: str, api_prefix: str) -> dict[str, Any]:
    """Whether ``/status`` on ``port`` sees a change to ``pool``'s ready set made just before
    the request: asked with a ``view`` value never used before (as every benchmark request
    is), and asked again with a value used once already. Also which top-level sections the
    benchmark's view selects. The ready set is restored afterwards.

    Returns ``{"sections": [...], "new_view_fresh": bool, "repeated_view_fresh": bool}``.
    """
    stamp = time.time_ns()
    first = f"{api_prefix}/status?view={STATUS_VIEW}fresh{stamp}a"
    before = _get_json(port, first)
    sections = sorted(before)
    count0 = before["pools"][pool]["ready"]
    extra = f"bench-fresh-{stamp}"
    probe.sadd(schema.ready(pool), extra)
    try:
        new = _get_json(port, f"{api_prefix}/status?view={STATUS_VIEW}fresh{stamp}b")
        again = _get_json(port, first)
    finally:
        probe.srem(schema.ready(pool), extra)
    return {"sections": sections,
            "new_view_fresh": new["pools"][pool]["ready"] == count0 + 1,
            "repeated_view_fresh": again["pools"][pool]["ready"] == count0 + 1}


def comparison(rounds: list[dict[str, Any]], pairs: dict[str, str]) -> list[dict[str, Any]]:
    """Ours beside Ruby for every concurrency where both rounds ran: ``pairs`` maps our
    round key to Ruby's (``{"checkout": "checkout@ruby", ...}``). Each row: ``round``,
    ``concurrency``, ``ours_*`` / ``ruby_*`` req/s, p50, p99 (ms) and worker CPU per
    request (ms), and ``ratio`` = our req/s / Ruby's."""
    by = {(r["key"], r["concurrency"]): r for r in rounds}
    rows = []
    for ours_key, ruby_key in pairs.items():
        for conc in sorted({r["concurrency"] for r in rounds}):
            ours, ruby = by.get((ours_key, conc)), by.get((ruby_key, conc))
            if not ours or not ruby:
                continue
            row: dict[str, Any] = {"round": ours_key, "concurrency": conc}
            for who, r in (("ours", ours), ("ruby", ruby)):
                row[f"{who}_rps"] = round(r["rps"], 1)
                row[f"{who}_p50_ms"] = round(r["p50_ms"], 2)
                row[f"{who}_p99_ms"] = round(r["p99_ms"], 2)
                row[f"{who}_cpu_ms_per_req"] = round(r["server_cpu_ms_per_req"], 3)
                row[f"{who}_non_2xx"] = r["non_2xx"]
                row[f"{who}_accepted"] = r["accepted"]
            row["ratio"] = round(ours["rps"] / ruby["rps"], 2) if ruby["rps"] else None
            rows.append(row)
    return rows


def comparison_report(rows: list[dict[str, Any]], ruby: dict[str, Any]) -> list[str]:
    """Report lines for :func:`comparison`'s rows and the targets; ``ruby`` is the run's
    ``results["ruby"]`` (versions, freshness checks)."""
    if not rows:
        return []
    lines = ["", f"ours against vmpooler {ruby.get('vmpooler', '?')} on {ruby.get('ruby', '?')} "
                 "(Puma single mode, 0:5 threads), measured in this run on the same Redis:"]
    lines.append(f"  {'round':<10}{'conc':>5}{'ours/s':>9}{'Ruby/s':>9}{'ratio':>8}"
                 f"{'ours p50':>10}{'ours p99':>10}{'Ruby p50':>10}{'Ruby p99':>10}"
                 f"{'ours CPU':>10}{'Ruby CPU':>10}  (ms; CPU ms/req)")
    top = max(r["concurrency"] for r in rows)
    for r in rows:
        note = ""
        if r["round"] == "checkout" and r["concurrency"] == top:
            ok = (r["ratio"] or 0) >= TARGET_CHECKOUT_RATIO and \
                r["ours_p99_ms"] < TARGET_CHECKOUT_P99_MS
            note = (f"  target >= {TARGET_CHECKOUT_RATIO:g}x, our p99 < "
                    f"{TARGET_CHECKOUT_P99_MS:g} ms: {'met' if ok else 'MISSED'}")
        elif r["round"] == "status":
            ok = (r["ratio"] or 0) >= TARGET_STATUS_RATIO
            note = f"  target >= {TARGET_STATUS_RATIO:g}x: {'met' if ok else 'MISSED'}"
        if r["ours_non_2xx"] or r["ruby_non_2xx"]:
            note += f"  non-2xx ours {r['ours_non_2xx']} Ruby {r['ruby_non_2xx']}"
        if not (r["ours_accepted"] and r["ruby_accepted"]):
            note += "  (a round not clean: see '!')"
        lines.append(
            f"  {r['round']:<10}{r['concurrency']:>5}{r['ours_rps']:>9.1f}{r['ruby_rps']:>9.1f}"
            f"{(r['ratio'] or 0):>7.1f}x{r['ours_p50_ms']:>10.2f}{r['ours_p99_ms']:>10.2f}"
            f"{r['ruby_p50_ms']:>10.1f}{r['ruby_p99_ms']:>10.1f}"
            f"{r['ours_cpu_ms_per_req']:>10.3f}{r['ruby_cpu_ms_per_req']:>10.2f}{note}")
    for who, check in ruby.get("freshness", {}).items():
        lines.append(f"  /status freshness [{who}]: sections {','.join(check['sections'])}; "
                     f"a new view value sees Redis now: {check['new_view_fresh']}; a repeated "
                     f"view value: {check['repeated_view_fresh']}")
    return lines
