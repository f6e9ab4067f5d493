"""REST API benchmark: ``vmpooler api`` against a bare Falcon app and the Ruby vmpooler
3.9.1 API, side by side.

    .venv/bin/python bench/api.py [--duration 10] [--warmup 2] [--threads 8]
                                  [--concurrency 1,8,32] [--hot 10000] [--json out.json]
                                  [--only status] [--baseline LABEL=COMMAND ...]
                                  [--ruby DEST | --no-ruby] [--profile DIR]

One run, on this machine, loopback only:

* starts its own redis-server (``EmbeddedRedis``, no persistence) and seeds it directly, as
  the manager would have left it: ``--pools`` pools (default 100) of ``--size`` ready VMs
  each, the first ("hot") one with ``--hot`` ready VMs (each VM: a member of
  ``vmpooler__ready__<pool>`` and a ``vmpooler__vm__<name>`` hash with ``template``,
  ``pool``, ``clone``, ``ready``, ``check`` ...), plus ``lastboot`` and today's boot and
  clone statistics. No manager runs. Before every checkout round the hot pool is reseeded
  with ``--hot`` VMs for the warm-up, then with ``--hot`` plus 1.3 x what the warm-up's rate
  says the round will take, so it holds at least ``--hot`` ready VMs all through the round
  whichever server is measured (vmpooler 3.9.1 reads the whole ready set per checkout, so
  its cost grows with the pool; ours does not). The report shows the ready count at the
  start and end of each round and flags one that fell below ``--hot`` or emptied
  (``HOT POOL DRAINED``: its 503s would inflate req/s);
* starts ``vmpooler api --workers W --threads T`` and ``bench/bare_app.py`` (a bare Falcon
  app under gunicorn with the very same settings: gthread, W workers, T threads) as
  subprocesses, each on its own free port; and, unless ``--no-ruby``, the Ruby vmpooler
  3.9.1 API from ``--ruby DEST`` (default ``/tmp/vmpooler-ruby`` when installed there) on
  the same config and Redis (``bench/ruby_api.py``);
* drives each with ``wrk`` (closed loop, keep-alive, one wrk thread; the fallback
  ``--client python`` uses threads and ``http.client`` in this process) for ``--warmup``
  then ``--duration`` seconds per round, at each ``--concurrency``: bare ``POST /x``, bare
  ``POST /redis`` (one Redis GET), Ruby's then ours ``POST /api/v3/vm/<hot pool>``
  (checkout), Ruby's then ours ``GET /api/v3/status?view=capacity,queue,clone,boot,pools,x``
  with a suffix no other request used appended to the view value, so vmpooler 3.9.1's 30 s
  cache per view value never answers (the view selects the same sections on both servers;
  before these rounds a check on each server that a new view value sees a change made to
  Redis just before, see :func:`ruby_api.status_freshness`);
* per round: throughput, p50/p90/p99/max latency, non-2xx answers, CPU per request of the
  server's workers (and how it split between them), of redis-server and of the load
  generator, and the CPU other processes on the machine took meanwhile; for checkouts the
  exact number of VMs checked out (SCARD of the hot pool's running set), Redis commands
  per checkout from ``INFO commandstats`` (``CONFIG RESETSTAT`` before each round) and
  client round trips per checkout from ``INFO stats`` ``total_reads_processed``;
* before the load, a sequential calibration: ``--calibrate`` checkouts one at a time, with
  the same Redis counts (exact, nothing else running), on ours and on Ruby's;
* ours against Ruby's per round (req/s ratio, both p50/p99 and CPU per request), against
  the targets in ``bench/ruby_api.py``; in the JSON as ``vs_ruby``.

gunicorn's gthread workers accept greedily, and wrk's keep-alive connections stay where
they were accepted: now and then every connection lands on one worker, which then does all
the work on one core while the other idles (half the throughput). Such a round, or one
during which other processes took more than ``--max-foreign`` % CPU, is run again (up to
``--attempts``) and the best attempt kept; the table shows the split and the attempts.

redis-server counts the commands a Lua script runs as well as the EVALSHA that ran it, so
"all commands per checkout" includes the script's SPOP/EXISTS/SADD/HSET; "round trips per
checkout" counts what the API processes themselves sent (socket reads by redis-server; a
pipeline larger than 16 KiB, like /status's, arrives in several reads).

``--baseline LABEL=COMMAND`` (repeatable) serves a further ``vmpooler api`` with COMMAND
(another build, e.g. a script that runs an older checkout's code) on the same Redis and
settings, and measures its checkout and ``GET /status`` right before ours at each
concurrency, so builds are compared side by side in one run (rounds ``checkout@LABEL`` and
``status@LABEL``; with ``--only``, they come with ``checkout`` and ``status``).

Every process started here (redis-server, all gunicorn masters and their workers, the Ruby
API, wrk) is stopped in a ``finally``. ``--profile DIR`` adds, after the rounds, one
checkout and one /status round at the highest concurrency with ``py-spy record --gil`` (if
installed) on each vmpooler worker and prints the hottest functions; those rounds are not
in the table.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis
import ruby_api
from api_load import run_python, run_wrk
from api_report import machine, report, summarize_profiles
from api_setup import (
    API_PREFIX,
    ROOT,
    VENV_BIN,
    Server,
    command_stats,
    machine_busy,
    pool_names,
    reads_processed,
    redis_cpu,
    reset_hot,
    seed_all,
    write_config,
)

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port


class Bench:
    def __init__(self, args: argparse.Namespace, probe: redis.Redis, work: Path) -> None:
        self.args = args
        self.probe = probe
        self.work = work
        self.hot = pool_names(args.pools)[0]
        self.hot_vms: list[str] = []
        self.round_no = 0
        self.last_extra = 0  # the most VMs a checkout round was seeded with above --hot
        self.load = run_wrk if args.client == "wrk" else run_python

    def reseed_hot(self, count: int | None = None) -> None:
        self.round_no += 1
        self.hot_vms = reset_hot(self.probe, self.hot, count or self.args.hot, self.hot_vms,
                                 self.round_no)

    def headroom(self, rps: float, seconds: float) -> int:
        """VMs to seed above ``--hot`` so a round of ``seconds`` at ``rps`` (the warm-up's
        rate) leaves at least ``--hot`` ready: 30 % and one second more than it takes."""
        return int(rps * (seconds + 1) * 1.3) + 100

    def round(self, server: Server, label: str, method: str, path: str, conc: int,
              reseed: bool = False, unique: bool = False) -> dict[str, Any]:
        """One measured round, repeated (up to ``--attempts``) while its connections sat on
        one worker only (when there are at least as many connections as workers) or other
        processes took CPU; the best attempt is kept. ``unique``:
        every request's URL ends differently (see :func:`run_wrk`)."""
        best: dict[str, Any] | None = None
        for attempt in range(1, max(1, self.args.attempts) + 1):
            result = self._attempt(server, label, method, path, conc, reseed, unique)
            result["attempt"] = attempt
            # fewer connections than workers: some workers are idle by construction
            balanced = (conc < server.expected_workers
                        or result["worker_balance"] >= self.args.min_balance)
            ok = result["accepted"] = (balanced
                                       and result["foreign_cpu_pct"] <= self.args.max_foreign)
            print(f"[bench] {label:<31} c={conc:<3} {result['rps']:8.1f}/s  "
                  f"p50 {result['p50_ms']:7.2f} ms  p99 {result['p99_ms']:7.2f} ms  "
                  f"non-2xx {result['non_2xx']}  workers {result['worker_split']}  "
                  f"other CPU {result['foreign_cpu_pct']:.0f}%"
                  f"{'' if ok else '  (retry)' if attempt < self.args.attempts else ''}",
                  file=sys.stderr, flush=True)
            key = (ok, result["worker_balance"], -result["foreign_cpu_pct"])
            if best is None or key > best["_key"]:
                best = {**result, "_key": key}
            if ok:
                break
        assert best is not None
        best.pop("_key")
        best["attempts"] = attempt
        return best

    def _attempt(self, server: Server, label: str, method: str, path: str, conc: int,
                 reseed: bool, unique: bool = False) -> dict[str, Any]:
        url = f"http://127.0.0.1:{server.port}{path}"
        args = self.args
        if reseed:
            self.reseed_hot(args.hot)
        warm_rps = 0.0
        if args.warmup > 0:
            warm_rps = self.load(url, method, conc, args.warmup, args.wrk_threads, self.work,
                                 unique)["rps"]
        if reseed:
            # no warm-up: as if the round ran at 5,000/s
            extra = self.headroom(warm_rps if args.warmup > 0 else 5000.0, args.duration)
            self.reseed_hot(args.hot + extra)
            self.last_extra = max(self.last_extra, extra)
        self.probe.config_resetstat()
        before = command_stats(self.probe)
        reads0 = reads_processed(self.probe)
        cpu0, rcpu0, busy0 = server.cpu_by_worker(), redis_cpu(self.probe), machine_busy()
        self_cpu0 = sum(os.times()[:2])
        result = self.load(url, method, conc, args.duration, args.wrk_threads, self.work,
                           unique)
        cpu1 = server.cpu_by_worker()
        per_worker = [cpu1[pid] - cpu0.get(pid, 0.0) for pid in cpu1]
        cpu, rcpu = sum(per_worker), redis_cpu(self.probe) - rcpu0
        busy = machine_busy() - busy0
        own = sum(os.times()[:2]) - self_cpu0  # this process (and the python client)
        if self.load is run_wrk:
            own += result["client_cpu_s"]
        foreign = max(0.0, busy - cpu - rcpu - own)
        reads = reads_processed(self.probe) - reads0 - 3  # our INFO stats/cpu + this one
        after = command_stats(self.probe)
        n = max(1, result["requests"])
        shares = sorted((100 * c / cpu if cpu else 0.0 for c in per_worker), reverse=True)
        result.update(label=label, server=server.name, method=method, path=path,
                      concurrency=conc, server_cpu_ms_per_req=1000 * cpu / n,
                      server_cpu_pct=100 * cpu / result["seconds"],
                      worker_cpu_s=[round(c, 2) for c in per_worker],
                      worker_split="/".join(f"{x:.0f}" for x in shares),
                      worker_balance=(min(per_worker) / max(per_worker)
                                      if per_worker and max(per_worker) > 0 else 0.0),
                      redis_cpu_ms_per_req=1000 * rcpu / n,
                      client_cpu_ms_per_req=1000 * result["client_cpu_s"] / n,
                      redis_commands={k: v - before.get(k, 0) for k, v in after.items()
                                      if v - before.get(k, 0)},
                      redis_reads=reads,
                      machine_busy_pct=100 * busy / result["seconds"],
                      foreign_cpu_pct=100 * foreign / result["seconds"])
        if reseed:
            taken = int(self.probe.scard(schema.running(self.hot)))
            result["checkouts"] = taken
            result["hot_ready_start"] = len(self.hot_vms)
            result["hot_ready_left"] = int(self.probe.scard(schema.ready(self.hot)))
            result["drained"] = result["hot_ready_left"] == 0
            result["below_hot"] = result["hot_ready_left"] < args.hot
            if taken:
                cmds = result["redis_commands"]
                result["per_checkout"] = {
                    "evalsha": cmds.get("evalsha", 0) / taken,
                    "xadd": cmds.get("xadd", 0) / taken,
                    "all_commands": sum(cmds.values()) / taken,
                    "round_trips": reads / taken,
                }
        return result

    def calibrate(self, server: Server, count: int) -> dict[str, Any]:
        """``count`` checkouts one after the other; exact Redis counts per checkout."""
        self.reseed_hot()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        path = f"{API_PREFIX}/vm/{self.hot}"
        # one checkout first so every worker thread's connection and script are warm
        for _ in range(4):
            conn.request("POST", path, body=b"")
            conn.getresponse().read()
        self.reseed_hot()
        self.probe.config_resetstat()
        before = command_stats(self.probe)
        reads0 = reads_processed(self.probe)
        statuses: Counter[int] = Counter()
        t0 = time.perf_counter()
        for _ in range(count):
            conn.request("POST", path, body=b"")
            answer = conn.getresponse()
            answer.read()
            statuses[answer.status] += 1
        wall = time.perf_counter() - t0
        reads = reads_processed(self.probe) - reads0 - 1
        cmds = {k: v - before.get(k, 0) for k, v in command_stats(self.probe).items()
                if v - before.get(k, 0)}
        conn.close()
        taken = int(self.probe.scard(schema.running(self.hot)))
        return {"requests": count, "statuses": dict(statuses), "checkouts": taken,
                "mean_ms": 1000 * wall / count, "redis_commands": cmds,
                "redis_reads": reads,
                "evalsha_per_checkout": cmds.get("evalsha", 0) / max(1, taken),
                "commands_per_checkout": sum(cmds.values()) / max(1, taken),
                "round_trips_per_checkout": reads / max(1, taken)}

    def profile(self, server: Server, name: str, method: str, path: str, conc: int,
                out_dir: Path, reseed: bool = False, unique: bool = False) -> dict[str, Any]:
        """One more round with py-spy recording each worker (collapsed stacks)."""
        py_spy = shutil.which("py-spy") or str(VENV_BIN / "py-spy")
        if not Path(py_spy).exists():
            return {"error": "py-spy not installed (pip install py-spy into the venv)"}
        out_dir.mkdir(parents=True, exist_ok=True)
        if reseed:
            self.reseed_hot(self.args.hot + (self.last_extra or self.headroom(5000.0, 10)))
        seconds = max(3, round(self.args.duration))
        recorders = []
        for pid in server.workers():
            out = out_dir / f"{name}-worker-{pid}.txt"
            recorders.append((out, subprocess.Popen(
                [py_spy, "record", "--pid", str(pid), "--duration", str(seconds + 1),
                 "--rate", "200", "--format", "raw", "--nonblocking", "--gil", "--output",
                 str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
        try:
            time.sleep(0.5)
            url = f"http://127.0.0.1:{server.port}{path}"
            load = self.load(url, method, conc, seconds, self.args.wrk_threads, self.work,
                             unique)
        finally:
            for _, proc in recorders:
                try:
                    proc.wait(timeout=seconds + 30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        return {"name": name, "concurrency": conc, "load_rps": load["rps"],
                **summarize_profiles([o for o, _ in recorders])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, default=100, help="configured pools (default 100)")
    parser.add_argument("--size", type=int, default=10,
                        help="ready VMs in every pool but the hot one (default 10)")
    parser.add_argument("--hot", type=int, default=10000,
                        help="ready VMs the hot pool keeps at least during each checkout "
                             "round: reseeded before each with this many plus what the "
                             "warm-up says the round will take (default 10000)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--concurrency", default="1,8,32",
                        help="comma-separated connection counts (default 1,8,32)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per round")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before each round")
    parser.add_argument("--calibrate", type=int, default=500,
                        help="sequential checkouts for the exact Redis counts (0: skip)")
    parser.add_argument("--client", choices=["wrk", "python"], default=None,
                        help="load generator (default: wrk if installed, else python)")
    parser.add_argument("--wrk-threads", type=int, default=1)
    parser.add_argument("--attempts", type=int, default=4,
                        help="tries per round while unbalanced or disturbed (default 4)")
    parser.add_argument("--min-balance", type=float, default=0.5,
                        help="least/most busy worker CPU below this: retry (default 0.5)")
    parser.add_argument("--max-foreign", type=float, default=15.0,
                        help="CPU %% of other processes above this: retry (default 15)")
    parser.add_argument("--only", default="bare_x,bare_redis,checkout,status",
                        help="rounds to run (comma-separated)")
    parser.add_argument("--profile", metavar="DIR",
                        help="after the rounds, a checkout and a /status round under py-spy "
                             "(pip install py-spy); collapsed stacks to DIR")
    parser.add_argument("--api-command", default=str(VENV_BIN / "vmpooler"),
                        help="the vmpooler command to serve with (default: this venv's); "
                             "e.g. another checkout's venv, to compare builds")
    parser.add_argument("--baseline", metavar="LABEL=COMMAND", action="append", default=[],
                        help="also serve a vmpooler api with COMMAND and measure its checkout "
                             "and /status right before ours (repeatable); e.g. an older build")
    ruby_default = ruby_api.default_dest()
    parser.add_argument("--ruby", metavar="DEST", type=Path, default=ruby_default,
                        help="also serve the Ruby vmpooler 3.9.1 installed in DEST (by "
                             "../shared/tools/vmpooler-ruby/install.sh) and measure its "
                             "checkout and /status rounds beside ours (default: "
                             f"{ruby_api.DEFAULT_DEST} when installed there"
                             f"{'' if ruby_default else ', which it is not now'})")
    parser.add_argument("--no-ruby", action="store_true", help="do not run the Ruby API")
    parser.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    parser.add_argument("--keep-logs", action="store_true",
                        help="keep the servers' logs (their path is printed)")
    args = parser.parse_args(argv)
    # stopping the benchmark (Ctrl-C, or SIGTERM; SIGINT even when started in the
    # background, where it is ignored) still runs the finally that stops every process
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.client is None:
        args.client = "wrk" if shutil.which("wrk") else "python"
    if args.client == "wrk" and not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (apt-get install wrk), or use --client python")
    concs = [int(c) for c in args.concurrency.split(",") if c]
    only = set(args.only.split(","))
    baselines: list[tuple[str, str]] = []
    for spec in args.baseline:
        label, sep, command = spec.partition("=")
        if not sep or not label or not command:
            raise SystemExit(f"--baseline wants LABEL=COMMAND, not {spec!r}")
        baselines.append((label, command))
    ruby_dest: Path | None = None if args.no_ruby else args.ruby
    names = pool_names(args.pools)
    sizes = {name: (args.hot if i == 0 else args.size) for i, name in enumerate(names)}

    work = Path(tempfile.mkdtemp(prefix="vmpooler-bench-api-"))
    embedded = EmbeddedRedis(data_dir=work / "redis", persist=False, hardened=False)
    servers: list[Server] = []
    probe: redis.Redis | None = None
    results: dict[str, Any] = {"argv": sys.argv, "pools": args.pools, "hot": args.hot,
                               "size": args.size, "workers": args.workers,
                               "threads": args.threads, "client": args.client,
                               "duration": args.duration, "warmup": args.warmup,
                               "baselines": [label for label, _ in baselines]}
    t_start = time.monotonic()
    try:
        embedded.start()
        probe = redis.Redis(host="127.0.0.1", port=embedded.port, decode_responses=True)
        results["redis_server_version"] = probe.info("server").get("redis_version")
        seed_all(probe, sizes)
        probe.set("bench__bare__key", "x" * 32)
        config = write_config(work / "vmpooler.yaml", embedded.port, sizes,
                              logfile=work / "ruby-vmpooler.log")
        api_port, bare_port = free_port(), free_port()
        api = Server("vmpooler api", [
            *shlex.split(args.api_command), "api", "--config", str(config),
            "--bind", f"127.0.0.1:{api_port}", "--workers", str(args.workers),
            "--threads", str(args.threads), "--log-level", "warning"],
            api_port, f"{API_PREFIX}/vm", work / "api.log", args.workers)
        bare = Server("bare falcon", [
            sys.executable, str(ROOT / "bench" / "bare_app.py"),
            "--bind", f"127.0.0.1:{bare_port}", "--workers", str(args.workers),
            "--threads", str(args.threads), "--redis-port", str(embedded.port),
            "--log-level", "warning"],
            bare_port, "/x", work / "bare.log", args.workers)
        others = []
        for n, (label, command) in enumerate(baselines):
            port = free_port()
            others.append((label, Server(f"vmpooler api [{label}]", [
                *shlex.split(command), "api", "--config", str(config),
                "--bind", f"127.0.0.1:{port}", "--workers", str(args.workers),
                "--threads", str(args.threads), "--log-level", "warning"],
                port, f"{API_PREFIX}/vm", work / f"baseline-{n}.log", args.workers)))
        ruby: Server | None = None
        if ruby_dest is not None:
            ruby = ruby_api.make_server(Server, ruby_dest, config, free_port(),
                                        work / "ruby.out", f"{API_PREFIX}/vm")
            results["ruby"] = {"dest": str(ruby_dest), **ruby_api.versions(ruby_dest)}
        for server in (api, bare, *(other for _, other in others),
                       *((ruby,) if ruby else ())):
            servers.append(server)
            server.start()
        bench = Bench(args, probe, work)
        print(f"[bench] redis-server on {embedded.port}, vmpooler api on {api_port}, bare on "
              f"{bare_port}{f', Ruby vmpooler on {ruby.port}' if ruby else ''}; {args.pools} "
              f"pools, hot pool {bench.hot} with {args.hot} ready; "
              f"{args.workers} workers x {args.threads} threads; client {args.client}",
              file=sys.stderr, flush=True)
        if args.calibrate and "checkout" in only:
            results["calibration"] = bench.calibrate(api, args.calibrate)
            if ruby:
                results["ruby"]["calibration"] = bench.calibrate(ruby, args.calibrate)
        if "status" in only:
            results["status_freshness"] = {
                who: ruby_api.status_freshness(probe, server.port, names[1], API_PREFIX)
                for who, server in (("ours", api), ("Ruby", ruby)) if server}
        status_path = f"{API_PREFIX}/status?view={ruby_api.STATUS_VIEW}"
        ruby_plan = [] if ruby is None else [
            ("checkout@ruby", f"Ruby POST /vm/{bench.hot}", ruby, "POST",
             f"{API_PREFIX}/vm/{bench.hot}", True),
            ("status@ruby", "Ruby GET /status (uncached)", ruby, "GET", status_path, False)]
        plan: list[tuple[str, str, Server, str, str, bool]] = [
            ("bare_x", "bare POST /x", bare, "POST", "/x", False),
            ("bare_redis", "bare POST /redis (1 GET)", bare, "POST", "/redis", False),
            *ruby_plan[:1],
            *((f"checkout@{label}", f"[{label}] POST /vm/{bench.hot}", other, "POST",
               f"{API_PREFIX}/vm/{bench.hot}", True) for label, other in others),
            ("checkout", f"vmpooler POST /vm/{bench.hot}", api, "POST",
             f"{API_PREFIX}/vm/{bench.hot}", True),
            *ruby_plan[1:],
            *((f"status@{label}", f"[{label}] GET /status", other, "GET",
               status_path, False) for label, other in others),
            ("status", "vmpooler GET /status (uncached)", api, "GET", status_path, False),
        ]
        for key in ("checkout", "status"):
            if key in only:
                only |= {f"{key}@{label}" for label, _ in others}
        if ruby is not None:
            only |= {f"{key}@ruby" for key in ("checkout", "status") if key in only}
        rounds = []
        for conc in concs:
            for key, label, server, method, path, reseed in plan:
                if key in only:
                    # /status: every request's view value is new (see ruby_api.STATUS_VIEW)
                    r = bench.round(server, label, method, path, conc, reseed=reseed,
                                    unique=key.startswith("status"))
                    r["key"] = key
                    rounds.append(r)
        results["rounds"] = rounds
        if ruby is not None:
            results["vs_ruby"] = ruby_api.comparison(
                rounds, {"checkout": "checkout@ruby", "status": "status@ruby"})
        if args.profile:
            results["profiles"] = [
                bench.profile(api, key, method, path, max(concs), Path(args.profile),
                              reseed=reseed, unique=key.startswith("status"))
                for key, _, server, method, path, reseed in plan
                if server is api and key in only]
        results["machine"] = machine()
        results["wall_seconds"] = round(time.monotonic() - t_start, 1)
    finally:
        for server in servers:
            server.stop()
        if probe is not None:
            probe.close()
        embedded.stop()
        if args.keep_logs:
            print(f"[bench] logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)

    info = results["machine"]
    print()
    print(f"machine: {info['nproc']} cores ({info['cpu']}); CPython {info['python']}, "
          f"falcon {info['falcon']}, gunicorn {info['gunicorn']}, redis-py {info['redis_py']}; "
          f"redis-server {results['redis_server_version']}; load: "
          f"{info['wrk'] if args.client == 'wrk' else 'python http.client threads'}; "
          f"sources {info['code_fingerprint']}")
    print(f"settings: gunicorn gthread, {args.workers} workers x {args.threads} threads for "
          f"both servers; {args.pools} pools, hot pool {args.hot} ready VMs (reseeded per "
          f"round), others {args.size}; rounds {args.warmup:g} s warm-up + {args.duration:g} s; "
          f"total {results['wall_seconds']} s")
    print()
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
