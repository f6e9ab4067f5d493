"""Fill and steady-state benchmark of the pool manager (actors only, no API).

    .venv/bin/python bench/fill.py [--pools 100] [--size 50] [--compare-size 10]
                                   [--task-limit N] [--steady-seconds S] [--json out.json]

For each scale (``--pools`` x ``--size``, then ``--pools`` x ``--compare-size``) a fresh child
process starts its own redis-server (``EmbeddedRedis``, no persistence) and a
``PoolerSystem`` with the real clock and scheduler and the dummy provider at zero delay
(no ``*_max_time`` knobs, ``skip_dns_check_before_creating_vm: true``), then measures:

* fill: seconds from ``PoolerSystem.start`` until every pool holds ``size`` ready VMs (and
  nothing pending), plus Redis commands issued per VM created;
* steady state: a window of ``--steady-seconds`` (all pools full, nothing checked out) in
  which ``INFO commandstats`` is read before and after (``CONFIG RESETSTAT`` at its start)
  and pool cycles are counted (``vmpooler_performance.check_pool`` gauge emissions);
  reported as Redis commands per VM per pool cycle = commands / (VMs x cycles per pool),
  with the breakdown by command;
* RSS (VmRSS, peak VmHWM) and thread counts (``threading.active_count()`` and the kernel's
  ``Threads``) before start, after fill and at the end of the window.

Each scale runs in its own process so RSS and threads of one cannot leak into the other.
``--one-scale`` runs a single scale in this process (handy under py-spy or cProfile).
Every redis-server started here is stopped in a ``finally``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import redis

from vmpooler.actors.config import (
    Config,
    GlobalSettings,
    PoolConfig,
    ProviderConfig,
    RedisSettings,
)
from vmpooler.actors.storage.connection import connect
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.system import PoolerSystem
from vmpooler.providers.base import ProviderContext
from vmpooler.providers.dummy import DummyProvider

CHECK_LOOP_DELAY_MIN = 1.0  # seconds
CHECK_LOOP_DELAY_MAX = 5.0  # seconds
VM_CHECKTIME = 1  # minutes
TARGET_FILL_SECONDS = 30.0
POLL_INTERVAL = 0.1  # seconds between the benchmark's fill-progress polls
TARGET_COMMANDS_PER_VM_CYCLE = 2.0
# Commands the benchmark itself sends to read the statistics; never counted.
_OWN_COMMANDS = {"info", "config"}


# -- measurement helpers ------------------------------------------------------------------------
class CountingMetrics:
    """A ``Metrics`` that counts calls: pool cycles (``check_pool`` gauges) per pool, and
    every other metric name by kind. Thread-safe; cheap."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cycles: Counter[str] = Counter()
        self.calls: Counter[tuple[str, str]] = Counter()
        self.cycle_seconds = 0.0

    def increment(self, name: str, *, tags: Mapping[str, str] | None = None,
                  value: int = 1) -> None:
        with self._lock:
            self.calls["increment", name] += value

    def gauge(self, name: str, value: float, *, tags: Mapping[str, str] | None = None) -> None:
        with self._lock:
            if name == "vmpooler_performance.check_pool":
                self.cycles[(tags or {}).get("pool", "")] += 1
                self.cycle_seconds += value
            self.calls["gauge", name] += 1

    def timing(self, name: str, seconds: float, *,
               tags: Mapping[str, str] | None = None) -> None:
        with self._lock:
            self.calls["timing", name] += 1

    def close(self) -> None:
        pass

    def snapshot(self) -> tuple[int, float, Counter[str]]:
        """(total cycles, total seconds spent in cycles, cycles by pool)."""
        with self._lock:
            return sum(self.cycles.values()), self.cycle_seconds, Counter(self.cycles)


def proc_status() -> dict[str, int]:
    """VmRSS and VmHWM in MiB and the kernel's thread count of this process."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = round(int(value.split()[0]) / 1024)
            elif key == "Threads":
                out[key] = int(value)
    return out


def resources() -> dict[str, Any]:
    """RSS, peak RSS, Python and kernel thread counts, and threads grouped by name."""
    status = proc_status()
    # "PoolActor-17", "dummy-clone-3", "dummy-clone_3" -> "PoolActor", "dummy-clone"
    groups = Counter(re.sub(r"[-_]\d+$", "", t.name) for t in threading.enumerate())
    return {
        "rss_mib": status.get("VmRSS"), "peak_rss_mib": status.get("VmHWM"),
        "threads_python": threading.active_count(), "threads_os": status.get("Threads"),
        "thread_groups": dict(sorted(groups.items())),
    }


def command_stats(client: redis.Redis) -> dict[str, int]:
    """``INFO commandstats`` as {command: calls}."""
    stats = client.info("commandstats")
    return {key.removeprefix("cmdstat_"): int(value["calls"]) for key, value in stats.items()}


def diff(after: Mapping[str, int], before: Mapping[str, int],
         own: Mapping[str, int] | None = None) -> dict[str, int]:
    """Commands counted between two readings, less the benchmark's own."""
    own = own or {}
    counts = {k: v - before.get(k, 0) - own.get(k, 0) for k, v in after.items()
              if k not in _OWN_COMMANDS}
    return dict(sorted(((k, v) for k, v in counts.items() if v), key=lambda kv: -kv[1]))


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def ready_counts(
    client: redis.Redis, names: list[str], own: Counter[str] | None = None
) -> tuple[list[tuple[int, int]], int]:
    """(ready, pending) of every pool and the clone slots in use, in one pipelined round
    trip. The commands sent are added to ``own`` (subtracted from the fill's counts)."""
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.scard(f"vmpooler__ready__{name}")
        pipe.scard(f"vmpooler__pending__{name}")
    pipe.get("vmpooler__tasks__clone")
    r = pipe.execute()
    if own is not None:
        own["scard"] += 2 * len(names)
        own["get"] += 1
    return [(r[i], r[i + 1]) for i in range(0, len(r) - 1, 2)], int(r[-1] or 0)


# -- one scale ----------------------------------------------------------------------------------
def build_config(pools: int, size: int, task_limit: int, port: int) -> Config:
    settings = GlobalSettings(
        check_loop_delay_min=CHECK_LOOP_DELAY_MIN, check_loop_delay_max=CHECK_LOOP_DELAY_MAX,
        vm_checktime=VM_CHECKTIME, task_limit=task_limit,
        raw={"check_loop_delay_min": CHECK_LOOP_DELAY_MIN,
             "check_loop_delay_max": CHECK_LOOP_DELAY_MAX,
             "vm_checktime": VM_CHECKTIME, "task_limit": task_limit},
    )
    pool_configs = tuple(
        PoolConfig(name=f"bench-{i:03d}", size=size, template=f"tpl-{i:03d}", ready_ttl=600,
                   provider="dummy",
                   raw={"name": f"bench-{i:03d}", "size": size, "template": f"tpl-{i:03d}",
                        "ready_ttl": 600, "provider": "dummy"})
        for i in range(pools)
    )
    return Config(
        source="bench/fill.py", settings=settings,
        redis=RedisSettings(server="127.0.0.1", port=port),
        pools=pool_configs,
        providers={"dummy": ProviderConfig(
            name="dummy", provider_class="dummy",
            settings={"skip_dns_check_before_creating_vm": True})},
    )


def run_scale(pools: int, size: int, task_limit: int, steady: float, settle: float,
              fill_timeout: float, trace: list[tuple[Any, ...]] | None = None
              ) -> dict[str, Any]:
    """Run one scale; ``trace`` (if given) receives one row per fill poll:
    ``(seconds, ready VMs, pending VMs, clone slots in use, pool cycles so far)``."""
    result: dict[str, Any] = {"pools": pools, "size": size, "vms": pools * size,
                              "task_limit": task_limit}
    result["resources_before_start"] = resources()
    data_dir = Path(tempfile.mkdtemp(prefix="vmpooler-bench-"))
    embedded = EmbeddedRedis(data_dir=data_dir, persist=False, hardened=False)
    system: PoolerSystem | None = None
    client: redis.Redis | None = None
    probe: redis.Redis | None = None
    try:
        embedded.start()
        config = build_config(pools, size, task_limit, embedded.port)
        # The client the system uses, built as PoolerSystem would build it for this config.
        client = connect("127.0.0.1", embedded.port,
                         pool_size=config.redis.connection_pool_size,
                         pool_timeout=config.redis.connection_pool_timeout)
        # The benchmark's own connection: never competes for the system's pool.
        probe = redis.Redis(host="127.0.0.1", port=embedded.port, decode_responses=True)
        metrics = CountingMetrics()
        provider = DummyProvider(ProviderContext(
            name="dummy", settings=dict(config.providers["dummy"].settings),
            pools={p.name: dict(p.raw) for p in config.pools}, global_settings={},
            dns_domains={p.name: p.domain for p in config.pools},
        ))
        names = [p.name for p in config.pools]
        result["redis_server_version"] = probe.info("server").get("redis_version")

        # -- fill ---------------------------------------------------------------------------
        probe.config_resetstat()
        cpu0, rcpu0 = cpu_seconds(), redis_cpu(probe)
        t0 = time.monotonic()
        system = PoolerSystem.start(config, redis_client=client, metrics=metrics,
                                    providers={"dummy": provider})
        started = time.monotonic() - t0
        full_at: dict[str, float] = {}
        deadline = t0 + fill_timeout
        own: Counter[str] = Counter()
        slots: list[int] = []
        while True:
            now = time.monotonic()
            counts, in_use = ready_counts(probe, names, own)
            slots.append(in_use)
            if trace is not None:
                trace.append((round(now - t0, 3), sum(r for r, _ in counts),
                              sum(p for _, p in counts), in_use, metrics.snapshot()[0]))
            for name, (ready, pending) in zip(names, counts, strict=True):
                if name not in full_at and ready >= size and pending == 0:
                    full_at[name] = now - t0
            if len(full_at) == len(names) or now > deadline:
                break
            time.sleep(POLL_INTERVAL)
        fill = time.monotonic() - t0
        filled = len(full_at) == len(names)
        fill_cmds = diff(command_stats(probe), {}, own)
        times = sorted(full_at.values())
        result["fill"] = {
            "complete": filled,
            "seconds": round(fill, 2),
            "start_call_seconds": round(started, 3),
            "first_pool_full_s": round(times[0], 2) if times else None,
            "median_pool_full_s": round(times[len(times) // 2], 2) if times else None,
            "last_pool_full_s": round(times[-1], 2) if times else None,
            "pools_full": len(full_at),
            "vms_per_second": round(pools * size / fill, 1) if filled else None,
            "mean_clone_slots_in_use": round(sum(slots) / len(slots), 2),
            "samples_all_slots_in_use_pct": round(
                100 * sum(1 for n in slots if n >= task_limit) / len(slots), 1),
            "process_cpu_seconds": round(cpu_seconds() - cpu0, 2),
            "redis_cpu_seconds": round(redis_cpu(probe) - rcpu0, 2),
            "redis_commands": sum(fill_cmds.values()),
            "redis_commands_per_vm": round(sum(fill_cmds.values()) / (pools * size), 2),
            "redis_commands_by_type": fill_cmds,
        }
        result["resources_after_fill"] = resources()
        print(f"[bench] {pools}x{size}: fill {'done' if filled else 'INCOMPLETE'} in "
              f"{fill:.1f}s; settling {settle:.0f}s, then {steady:.0f}s steady window",
              file=sys.stderr, flush=True)
        if not filled:
            return result

        # -- steady state --------------------------------------------------------------------
        time.sleep(settle)  # let every pool's back-off reach its idle rhythm
        probe.config_resetstat()
        before = command_stats(probe)
        cycles0, cycle_s0, by_pool0 = metrics.snapshot()
        cpu0, rcpu0 = cpu_seconds(), redis_cpu(probe)
        w0 = time.monotonic()
        time.sleep(steady)
        after = command_stats(probe)
        cycles1, cycle_s1, by_pool1 = metrics.snapshot()
        window = time.monotonic() - w0
        cpu, rcpu = cpu_seconds() - cpu0, redis_cpu(probe) - rcpu0
        counts = diff(after, before)
        total = sum(counts.values())
        cycles = cycles1 - cycles0
        per_pool = [by_pool1[n] - by_pool0[n] for n in names]
        cycles_per_pool = cycles / pools
        state, _ = ready_counts(probe, names)
        result["steady"] = {
            "window_seconds": round(window, 2),
            "settle_seconds": settle,
            "still_full": all(r == size and p == 0 for r, p in state),
            "redis_commands": total,
            "redis_commands_per_second": round(total / window, 1),
            "pool_cycles": cycles,
            "cycles_per_pool": round(cycles_per_pool, 2),
            "cycles_per_pool_min_max": [min(per_pool), max(per_pool)],
            "mean_cycle_interval_s": round(window / cycles_per_pool, 2) if cycles else None,
            "mean_cycle_ms": round(1000 * (cycle_s1 - cycle_s0) / cycles, 2) if cycles else None,
            "commands_per_vm_per_cycle": (
                round(total / (pools * size * cycles_per_pool), 3) if cycles else None),
            "commands_per_pool_cycle": round(total / cycles, 2) if cycles else None,
            "redis_commands_by_type": counts,
            "process_cpu_percent": round(100 * cpu / window, 1),
            "redis_cpu_percent": round(100 * rcpu / window, 1),
            "provider_inventory_vms": sum(len(v) for v in provider.inventory_snapshot().values()),
        }
        result["resources_end"] = resources()

        # -- stop ----------------------------------------------------------------------------
        s0 = time.monotonic()
        system.stop()
        system = None
        result["stop_seconds"] = round(time.monotonic() - s0, 2)
        result["resources_after_stop"] = resources()
        time.sleep(1.0)  # daemon worker threads finish exiting after stop() returns
        result["resources_after_stop_1s"] = resources()
        return result
    finally:
        if system is not None:
            system.stop()
        for c in (client, probe):
            if c is not None:
                c.close()
        embedded.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


# -- driver -------------------------------------------------------------------------------------
def code_fingerprint() -> str:
    """A short hash of the production sources measured (every module under actors/ and
    providers/, sub-folders included, by path)."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted([*root.glob("actors/**/*.py"), *root.glob("providers/**/*.py")]):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as handle:
            model = next((ln.split(":", 1)[1].strip() for ln in handle
                          if ln.startswith("model name")), "")
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as handle:
            mem = int(next(ln for ln in handle if ln.startswith("MemTotal")).split()[1]) // 1024
    except (OSError, StopIteration):
        pass
    from importlib.metadata import version
    return {
        "nproc": os.cpu_count(), "cpu": model, "mem_total_mib": mem,
        "python": platform.python_version(), "implementation": platform.python_implementation(),
        "platform": platform.platform(), "pykka": version("pykka"),
        "redis_py": version("redis"), "code_fingerprint": code_fingerprint(),
    }


def run_json_child(cmd: list[str], what: str) -> dict[str, Any]:
    """Run ``cmd --json <file>`` in a child process and return what it wrote there; exit
    naming ``what`` if the child fails. (Shared with the other benchmarks.)"""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        out = handle.name
    try:
        proc = subprocess.run([*cmd, "--json", out], check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{what} failed with exit code {proc.returncode}")
        with open(out) as handle:
            return json.load(handle)
    finally:
        os.unlink(out)


def run_child(args: argparse.Namespace, size: int) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--one-scale",
           "--pools", str(args.pools), "--size", str(size),
           "--task-limit", str(args.task_limit), "--steady-seconds", str(args.steady_seconds),
           "--settle-seconds", str(args.settle_seconds), "--fill-timeout", str(args.fill_timeout)]
    return run_json_child(cmd, f"scale {args.pools}x{size}")


def fmt(value: Any) -> str:
    """A table cell: ``-`` for None, floats in ``%g``."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def table(results: list[dict[str, Any]]) -> str:
    def get(r: dict[str, Any], *path: str) -> Any:
        for key in path:
            if not isinstance(r, dict) or key not in r:
                return None
            r = r[key]
        return r

    rows: list[tuple[str, list[Any]]] = [
        ("pools x size (VMs)", [f"{r['pools']} x {r['size']} ({r['vms']})" for r in results]),
        ("task_limit (clone slots)", [r["task_limit"] for r in results]),
        ("FILL", []),
        ("  time to all pools full (s)", [get(r, "fill", "seconds") for r in results]),
        ("    target", [f"< {TARGET_FILL_SECONDS:g}" for _ in results]),
        ("  first / median / last pool full (s)", [
            f"{get(r, 'fill', 'first_pool_full_s')} / {get(r, 'fill', 'median_pool_full_s')}"
            f" / {get(r, 'fill', 'last_pool_full_s')}" for r in results]),
        ("  VMs ready per second", [get(r, "fill", "vms_per_second") for r in results]),
        ("  clone slots in use: mean / % full", [
            f"{get(r, 'fill', 'mean_clone_slots_in_use')} / "
            f"{get(r, 'fill', 'samples_all_slots_in_use_pct')}%" for r in results]),
        ("  process CPU (s) / redis CPU (s)", [
            f"{get(r, 'fill', 'process_cpu_seconds')} / {get(r, 'fill', 'redis_cpu_seconds')}"
            for r in results]),
        ("  Redis commands per VM filled", [get(r, "fill", "redis_commands_per_vm")
                                            for r in results]),
        ("STEADY STATE", []),
        ("  window (s)", [get(r, "steady", "window_seconds") for r in results]),
        ("  pools still full at end", [get(r, "steady", "still_full") for r in results]),
        ("  Redis commands in window", [get(r, "steady", "redis_commands") for r in results]),
        ("  Redis commands per second", [get(r, "steady", "redis_commands_per_second")
                                         for r in results]),
        ("  pool cycles (all pools)", [get(r, "steady", "pool_cycles") for r in results]),
        ("  cycles per pool (min-max)", [
            f"{get(r, 'steady', 'cycles_per_pool')} ({'-'.join(map(str, get(r, 'steady', 'cycles_per_pool_min_max') or []))})"  # noqa: E501
            for r in results]),
        ("  mean cycle interval (s)", [get(r, "steady", "mean_cycle_interval_s")
                                       for r in results]),
        ("  mean cycle duration (ms)", [get(r, "steady", "mean_cycle_ms") for r in results]),
        ("  Redis commands per pool cycle", [get(r, "steady", "commands_per_pool_cycle")
                                             for r in results]),
        ("  Redis commands per VM per cycle", [get(r, "steady", "commands_per_vm_per_cycle")
                                               for r in results]),
        ("    target", [f"<= {TARGET_COMMANDS_PER_VM_CYCLE:g}" for _ in results]),
        ("  process CPU % / redis CPU %", [
            f"{get(r, 'steady', 'process_cpu_percent')} / {get(r, 'steady', 'redis_cpu_percent')}"
            for r in results]),
        ("RESOURCES", []),
    ]
    for label, key in (("before start", "resources_before_start"),
                       ("after fill", "resources_after_fill"),
                       ("end of window", "resources_end"),
                       ("after stop", "resources_after_stop"),
                       ("1 s after stop", "resources_after_stop_1s")):
        rows.append((f"  RSS / peak (MiB), {label}", [
            f"{get(r, key, 'rss_mib')} / {get(r, key, 'peak_rss_mib')}" for r in results]))
        rows.append((f"  threads py / os, {label}", [
            f"{get(r, key, 'threads_python')} / {get(r, key, 'threads_os')}" for r in results]))
    rows.append(("  stop() (s)", [get(r, "stop_seconds") for r in results]))
    width = max(len(label) for label, _ in rows) + 2
    cols = [max(22, *(len(fmt(v)) + 2 for _, vals in rows for v in vals[i:i + 1]))
            for i in range(len(results))]
    lines = []
    for label, values in rows:
        if not values:
            lines.append(label)
            continue
        lines.append(label.ljust(width) + "".join(fmt(v).rjust(c) for v, c in
                                                   zip(values, cols, strict=True)))
    return "\n".join(lines)


def command_lines(steady: dict[str, Any], what: str, *, top: int | None = None,
                  width: int = 12) -> list[str]:
    """The steady window's Redis commands by type (the ``top`` most), total and per pool
    cycle, under a heading naming ``what`` was measured."""
    cycles = steady["pool_cycles"] or 1
    lines = [f"steady-state Redis commands, {what} (total {steady['redis_commands']}, "
             "per pool cycle):"]
    for cmd, n in list(steady["redis_commands_by_type"].items())[:top]:
        lines.append(f"  {cmd:<{width}}{n:>9}  {n / cycles:8.2f}")
    return lines


def breakdown(results: list[dict[str, Any]]) -> str:
    lines = []
    for r in results:
        steady = r.get("steady")
        if not steady:
            continue
        lines += command_lines(steady, f"{r['pools']} x {r['size']}")
        groups = r["resources_end"]["thread_groups"]
        lines.append("  threads at end of window: " + ", ".join(
            f"{k} {v}" for k, v in groups.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, default=100)
    parser.add_argument("--size", type=int, default=50)
    parser.add_argument("--compare-size", type=int, default=10,
                        help="second scale's pool size (0: skip the second scale)")
    parser.add_argument("--task-limit", type=int, default=GlobalSettings().task_limit,
                        help="concurrent clones (vmpooler's task_limit; default %(default)s)")
    parser.add_argument("--steady-seconds", type=float, default=60.0)
    parser.add_argument("--settle-seconds", type=float, default=10.0,
                        help="pause between fill and the steady window")
    parser.add_argument("--fill-timeout", type=float, default=180.0)
    parser.add_argument("--json", metavar="FILE", help="write all results as JSON")
    parser.add_argument("--one-scale", action="store_true",
                        help="run only --pools x --size, in this process")
    parser.add_argument("--trace", metavar="FILE",
                        help="with --one-scale: write the fill's time series to FILE")
    args = parser.parse_args(argv)

    if args.one_scale:
        trace: list[tuple[Any, ...]] | None = [] if args.trace else None
        result = run_scale(args.pools, args.size, args.task_limit, args.steady_seconds,
                           args.settle_seconds, args.fill_timeout, trace)
        if args.trace:
            Path(args.trace).write_text("seconds ready pending slots_in_use cycles\n" + "".join(
                " ".join(map(str, row)) + "\n" for row in trace or []))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
        else:
            print(json.dumps(result, indent=2))
        return 0 if result.get("steady") else 1

    sizes = [args.size] + ([args.compare_size] if args.compare_size else [])
    print(f"[bench] check_loop_delay_min={CHECK_LOOP_DELAY_MIN:g}s "
          f"check_loop_delay_max={CHECK_LOOP_DELAY_MAX:g}s vm_checktime={VM_CHECKTIME}min "
          f"task_limit={args.task_limit}; dummy provider, zero delay", file=sys.stderr,
          flush=True)
    results = [run_child(args, size) for size in sizes]
    info = machine()
    print()
    print(f"machine: {info['nproc']} cores ({info['cpu']}), {info['mem_total_mib']} MiB; "
          f"{info['implementation']} {info['python']}; pykka {info['pykka']}, "
          f"redis-py {info['redis_py']}; sources {info['code_fingerprint']}")
    print(f"redis-server {results[0].get('redis_server_version')} (embedded, no persistence)")
    print(f"settings: check_loop_delay_min={CHECK_LOOP_DELAY_MIN:g}s, "
          f"check_loop_delay_max={CHECK_LOOP_DELAY_MAX:g}s, vm_checktime={VM_CHECKTIME} min, "
          f"task_limit={args.task_limit}, dummy provider with no delays, "
          f"skip_dns_check_before_creating_vm")
    print()
    print(table(results))
    print()
    print(breakdown(results))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"machine": info, "argv": sys.argv, "settings": {
                "check_loop_delay_min": CHECK_LOOP_DELAY_MIN,
                "check_loop_delay_max": CHECK_LOOP_DELAY_MAX,
                "vm_checktime": VM_CHECKTIME, "task_limit": args.task_limit},
             "results": results}, indent=2))
    ok = all(r.get("steady") for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
