"""The load of one ``bench/api.py`` round: ``wrk`` (closed loop, keep-alive) or, without it,
threads of ``http.client`` in this process; both report throughput, latencies and answers
alike."""

from __future__ import annotations

import http.client
import itertools
import json
import os
import re
import resource
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

# -- load generators ------------------------------------------------------------------------------
WRK_SCRIPT = """
wrk.method = "%(method)s"
%(body)s
%(request)s
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%%d,"duration_us":%%d,"connect_errors":%%d,"read_errors":%%d,' ..
    '"write_errors":%%d,"non_2xx_3xx":%%d,"timeouts":%%d,"p50_us":%%d,"p90_us":%%d,' ..
    '"p99_us":%%d,"max_us":%%d,"mean_us":%%.1f}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    latency.mean))
end
"""


# wrk's request(): the URL's path and query with a counter appended that no earlier run used
# (one Lua state per wrk thread: each thread numbers its own requests under its own tag)
WRK_UNIQUE = """
local base, threads = "%(tag)s", 0
setup = function(thread) threads = threads + 1; thread:set("tag", base .. "t" .. threads) end
count = 0
request = function()
  count = count + 1
  return wrk.format(nil, "%(path)s" .. tag .. "n" .. count)
end
"""
_RUNS = [0]


def unique_tag() -> str:
    """A tag no other load run of this process (nor of an earlier one) has used."""
    _RUNS[0] += 1
    return f"{os.getpid()}r{_RUNS[0]}x{time.time_ns() % 10**9}"


def run_wrk(url: str, method: str, conc: int, seconds: float, wrk_threads: int,
            script_dir: Path, unique: bool = False) -> dict[str, Any]:
    """One closed-loop wrk run. With ``unique``, every request's URL ends with a suffix no
    other request used (append it to a query parameter: ``...?view=a,b,x``), so a server
    that caches per URL or per parameter value never answers from its cache."""
    request = ""
    if unique:
        match = re.match(r"http://[^/]+(/.*)", url)
        assert match
        request = WRK_UNIQUE % {"tag": unique_tag(), "path": match.group(1)}
    script = script_dir / f"{method.lower()}{'-unique' if unique else ''}.lua"
    script.write_text(WRK_SCRIPT % {
        "method": method, "body": 'wrk.body = ""' if method == "POST" else "",
        "request": request})
    threads = max(1, min(wrk_threads, conc))
    cmd = ["wrk", "-t", str(threads), "-c", str(conc), "-d", f"{max(1, round(seconds))}s",
           "--timeout", "10s", "-s", str(script), url]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60,
                          check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("WRKJSON ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"wrk failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}")
    raw = json.loads(line.removeprefix("WRKJSON "))
    wall = raw["duration_us"] / 1e6
    return {
        "requests": raw["requests"], "seconds": round(wall, 3),
        "rps": raw["requests"] / wall,
        "p50_ms": raw["p50_us"] / 1000, "p90_ms": raw["p90_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000, "max_ms": raw["max_us"] / 1000,
        "mean_ms": raw["mean_us"] / 1000,
        "non_2xx": raw["non_2xx_3xx"],
        "socket_errors": raw["connect_errors"] + raw["read_errors"] + raw["write_errors"]
        + raw["timeouts"],
        "client_cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
    }


def _percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


def run_python(url: str, method: str, conc: int, seconds: float, _wrk_threads: int = 1,
               _script_dir: Path | None = None, unique: bool = False) -> dict[str, Any]:
    """Fallback load generator: ``conc`` threads, each one keep-alive ``http.client``
    connection, closed loop. Runs in this process (so it shares this interpreter's GIL).
    ``unique`` as for :func:`run_wrk`."""
    match = re.match(r"http://([^:/]+):(\d+)(/.*)", url)
    assert match
    host, port, base = match.group(1), int(match.group(2)), match.group(3)
    tag, numbers = unique_tag(), itertools.count(1)
    latencies: list[list[float]] = [[] for _ in range(conc)]
    statuses: Counter[int] = Counter()
    errors = [0]
    lock = threading.Lock()
    start = threading.Barrier(conc + 1)
    stop_at = [0.0]

    def worker(i: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        mine = latencies[i]
        local: Counter[int] = Counter()
        start.wait()
        while time.perf_counter() < stop_at[0]:
            path = f"{base}{tag}n{next(numbers)}" if unique else base
            t0 = time.perf_counter()
            try:
                conn.request(method, path, body=b"" if method == "POST" else None)
                answer = conn.getresponse()
                answer.read()
            except (OSError, http.client.HTTPException):
                with lock:
                    errors[0] += 1
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=10)
                continue
            mine.append(time.perf_counter() - t0)
            local[answer.status] += 1
        conn.close()
        with lock:
            statuses.update(local)

    cpu0 = sum(os.times()[:2])
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(conc)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    stop_at[0] = t0 + seconds
    start.wait()
    for t in threads:
        t.join(seconds + 30)
    wall = time.perf_counter() - t0
    every = sorted(x for per in latencies for x in per)
    return {
        "requests": len(every), "seconds": round(wall, 3), "rps": len(every) / wall,
        "p50_ms": 1000 * _percentile(every, 50), "p90_ms": 1000 * _percentile(every, 90),
        "p99_ms": 1000 * _percentile(every, 99), "max_ms": 1000 * (every[-1] if every else 0),
        "mean_ms": 1000 * sum(every) / max(1, len(every)),
        "non_2xx": sum(n for s, n in statuses.items() if s >= 400),
        "socket_errors": errors[0], "client_cpu_s": sum(os.times()[:2]) - cpu0,
    }


# -- rounds ---------------------------------------------------------------------------------------
