"""On-demand request benchmark: latency of the request path, and the cost of thousands of
requests in flight.

    .venv/bin/python bench/ondemand.py [--requests 200] [--concurrency 1,10]
                                       [--in-flight 10000] [--json out.json]
                                       [--baseline LABEL=CHECKOUT ...] [--rounds 2]

Every scenario runs in its own child process with its own redis-server (``EmbeddedRedis``,
no persistence) and a ``PoolerSystem`` with the real clock and scheduler; the dummy provider
is subclassed to record ``time.monotonic()`` of every ``create_vm`` call and of the first
``vm_ready`` that answers True for each VM. All timestamps come from one process, so they
compare.

**Latency** (``latency`` scenarios, one per transport and concurrency). The Falcon app of
``web.app.create_app`` is driven in-process through ``falcon.testing.TestClient``, over its
own Redis client, with either

* ``direct``: ``DirectCommands(system)``, as ``vmpooler run`` (API and manager in one
  process), or
* ``stream``: ``StreamCommands(background=True)`` and a system with ``consume_commands=True``
  (the command stream in Redis and the manager's consumer), the path ``vmpooler api`` +
  ``vmpooler manager`` take.

``--concurrency`` clients each loop: POST ``/api/v3/ondemandvm`` (1-3 VMs over 4 pools, drawn
from a seeded RNG), then GET ``/api/v3/ondemandvm/<id>`` every ``--poll-ms`` until it answers
200. Measured per request:

* (a) POST sent -> the provider's first ``create_vm`` call for the request;
* (b) the last of its delivered VMs reported ready (``vm_ready`` first True) -> the GET that
  answered 200 returned. The GET loop bounds the resolution: one poll interval plus one GET.

**Requests in flight** (``inflight`` scenarios). ``--in-flight`` (default 10,000) requests
of one VM each (10 pools), created through the facade ``system.request_ondemand``, whose VMs
never become ready, so every request stays in flight (``ondemand_request_ttl`` 60 min).
Reported: time to create them, until every request's actor exists, until the expected
steady state holds; RSS (VmRSS, VmHWM), kernel and Python threads before, at and after;
``stop()`` time. Variants:

* ``limit 10, clones stall``: ``ondemand_clone_limit`` 10 (vmpooler's default) and a
  hypervisor whose clones do not finish during the run: 10 VMs cloning, every other request
  queued for a clone slot;
* ``limit 1000, clones stall``: the same with ``ondemand_clone_limit`` 1000: 1,000 requests
  have a VM in pending (``task_limit`` 10 of them inside ``create_vm``, the rest queued at
  the provider actor), the others wait for a slot;
* ``limit 1000, never ready``: clones finish at once (freeing their slot) but ``vm_ready``
  never answers True: every request's VM pending, checked on every pool cycle.

Targets in flight: fewer than 200 OS threads (``Threads`` of ``/proc/self/status``) and RSS
under 500 MiB with 10,000 requests in flight.

**Builds side by side.** ``--baseline LABEL=CHECKOUT`` (repeatable) runs every scenario
also with another build: ``CHECKOUT`` is a checkout of another commit (``git worktree add
/tmp/old <commit>``), and its own ``bench/ondemand.py`` runs each scenario in its child
process against its own code (a temporary directory first on ``PYTHONPATH`` maps
``vmpooler.actors``, ``.web``, ``.providers`` and ``.conf`` to the checkout's folders, ahead
of this tree's editable install). ``--rounds N`` runs each scenario N times per build,
alternating the order of the builds from one round to the next; a comparison table then
shows every round's figure per build and the ratio of the medians. Each result records the
sources it ran (``sources``, ``source_commit``).

Defaults otherwise (``check_loop_delay_min`` 5 s, ``_max`` 60 s, ``task_limit`` 10,
``skip_dns_check_before_creating_vm``). Results and their interpretation: ``../BENCHMARKS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import falcon.testing
import redis
from builds import compare_table, run_rounds, sources
from fill import code_fingerprint, fmt, machine, resources

from vmpooler.actors.config import (
    Config,
    GlobalSettings,
    PoolConfig,
    ProviderConfig,
    RedisSettings,
)
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.connection import connect
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.system import PoolerSystem
from vmpooler.providers.base import ProviderContext
from vmpooler.providers.dummy import DummyProvider
from vmpooler.web.api_context import ApiContext
from vmpooler.web.app import create_app
from vmpooler.web.commands import DirectCommands, StreamCommands

TARGET_LATENCY_MS = 100.0  # "milliseconds", against vmpooler's 5-60 s polling
TARGET_RSS_MIB = 500  # with 10,000 requests in flight
TARGET_THREADS = 200  # OS threads with 10,000 requests in flight
LATENCY_POOLS = 4
INFLIGHT_POOLS = 10
WARMUP = 10  # requests before the measured ones (not counted)
INFLIGHT_VARIANTS = {
    "limit10-stall": {"label": "limit 10, clones stall", "clone_limit": 10, "stall": True},
    "limit1000-stall": {"label": "limit 1000, clones stall", "clone_limit": 1000,
                        "stall": True},
    "limit1000-never-ready": {"label": "limit 1000, never ready", "clone_limit": 1000,
                              "stall": False},
}


# -- the instrumented provider ------------------------------------------------------------------
class TimedDummy(DummyProvider):
    """The dummy provider at zero delay, recording when clones start and VMs become ready.

    ``stall``: ``create_vm`` waits until :meth:`release` (a hypervisor whose clones hang);
    ``never_ready``: ``vm_ready`` always answers False (VMs that never finish booting).
    """

    def __init__(self, context: ProviderContext, *, stall: bool = False,
                 never_ready: bool = False) -> None:
        super().__init__(context)
        self.create_at: dict[str, float] = {}
        self.ready_at: dict[str, float] = {}
        self.stall = stall
        self.never_ready = never_ready
        self.released = threading.Event()

    def create_vm(self, pool: str, vm: str, **kwargs: Any) -> Any:
        self.create_at.setdefault(vm, time.monotonic())
        if self.stall:
            self.released.wait(600)
        return super().create_vm(pool, vm, **kwargs)

    def vm_ready(self, pool: str, vm: str) -> bool:
        if self.never_ready:
            return False
        ready = super().vm_ready(pool, vm)
        if ready and vm not in self.ready_at:
            self.ready_at[vm] = time.monotonic()
        return ready

    def release(self) -> None:
        self.released.set()


def build_config(port: int, pools: int, clone_limit: int, ttl_minutes: int) -> Config:
    raw = {"ondemand_clone_limit": clone_limit, "ondemand_request_ttl": ttl_minutes}
    settings = GlobalSettings(ondemand_clone_limit=clone_limit,
                              ondemand_request_ttl=ttl_minutes, raw=raw)
    pool_configs = tuple(
        PoolConfig(name=f"od-{i:02d}", size=0, template=f"tpl-{i:02d}", ready_ttl=600,
                   provider="dummy",
                   raw={"name": f"od-{i:02d}", "size": 0, "template": f"tpl-{i:02d}",
                        "ready_ttl": 600, "provider": "dummy"})
        for i in range(pools))
    return Config(
        source="bench/ondemand.py", settings=settings,
        redis=RedisSettings(server="127.0.0.1", port=port), pools=pool_configs,
        providers={"dummy": ProviderConfig(
            name="dummy", provider_class="dummy",
            settings={"skip_dns_check_before_creating_vm": True})},
    )


def provider_for(config: Config, **knobs: Any) -> TimedDummy:
    return TimedDummy(ProviderContext(
        name="dummy", settings=dict(config.providers["dummy"].settings),
        pools={p.name: dict(p.raw) for p in config.pools}, global_settings={},
        dns_domains={p.name: p.domain for p in config.pools},
    ), **knobs)


def wait_for(condition: Callable[[], bool], timeout: float, step: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "max": None, "mean": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {"n": len(values), "p50": round(statistics.median(ordered), 2), "p90": at(0.9),
            "p99": at(0.99), "max": round(ordered[-1], 2),
            "mean": round(statistics.fmean(ordered), 2)}


class Stack:
    """redis-server + system + provider (+ client); everything stopped by :meth:`close`."""

    def __init__(self) -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix="vmpooler-bench-od-"))
        self.embedded = EmbeddedRedis(data_dir=self.data_dir, persist=False, hardened=False)
        self.system: PoolerSystem | None = None
        self.clients: list[redis.Redis] = []
        self.provider: TimedDummy | None = None

    def client(self, config: Config) -> redis.Redis:
        client = connect("127.0.0.1", self.embedded.port,
                         pool_size=config.redis.connection_pool_size,
                         pool_timeout=config.redis.connection_pool_timeout)
        self.clients.append(client)
        return client

    def close(self) -> None:
        if self.provider is not None:
            self.provider.release()
        if self.system is not None:
            self.system.stop()
        for client in self.clients:
            client.close()
        self.embedded.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


# -- latency ------------------------------------------------------------------------------------
def run_latency(transport: str, requests: int, concurrency: int, poll_ms: float,
                seed: int, clone_limit: int = 10) -> dict[str, Any]:
    result: dict[str, Any] = {"scenario": "latency", "transport": transport,
                              "requests": requests, "concurrency": concurrency,
                              "poll_ms": poll_ms, "clone_limit": clone_limit}
    stack = Stack()
    try:
        stack.embedded.start()
        config = build_config(stack.embedded.port, LATENCY_POOLS, clone_limit, 5)
        stack.provider = provider = provider_for(config)
        stream = transport == "stream"
        system = stack.system = PoolerSystem.start(
            config, redis_client=stack.client(config), providers={"dummy": provider},
            consume_commands=stream)
        api_redis = stack.client(config)
        commands = (StreamCommands(api_redis, background=True) if stream
                    else DirectCommands(system))
        ctx = ApiContext(config=config, redis=api_redis, commands=commands)
        ctx.started_at = ctx.clock.now()
        client = falcon.testing.TestClient(create_app(ctx))
        rng = random.Random(seed)
        pools = [p.name for p in config.pools]
        orders = []
        for _ in range(WARMUP + requests):
            order: dict[str, int] = {}
            for _ in range(rng.randint(1, 3)):
                pool = rng.choice(pools)
                order[pool] = order.get(pool, 0) + 1
            orders.append(order)
        records: list[dict[str, Any] | None] = [None] * len(orders)
        next_index = iter(range(len(orders)))
        lock = threading.Lock()
        poll = poll_ms / 1000
        errors: list[str] = []

        def worker() -> None:
            while True:
                with lock:
                    i = next(next_index, None)
                if i is None:
                    return
                t_post = time.monotonic()
                answer = client.simulate_post("/api/v3/ondemandvm", json=orders[i])
                t_posted = time.monotonic()
                if answer.status_code != 201:
                    errors.append(f"POST {answer.status_code} {answer.text}")
                    return
                request_id = answer.json["request_id"]
                gets, get_seconds = 0, 0.0
                deadline = t_post + 60
                while True:
                    g0 = time.monotonic()
                    got = client.simulate_get(f"/api/v3/ondemandvm/{request_id}")
                    g1 = time.monotonic()
                    gets += 1
                    get_seconds += g1 - g0
                    if got.status_code == 200:
                        break
                    if got.status_code != 202 or g1 > deadline:
                        errors.append(f"GET {got.status_code} {got.text}")
                        return
                    time.sleep(poll)
                body = got.json
                records[i] = {
                    "id": request_id, "t_post": t_post, "t_posted": t_posted, "t_200": g1,
                    "ready": body.get("ready"), "gets": gets, "get_seconds": get_seconds,
                    "vms": [h for p in orders[i] for h in body.get(p, {}).get("hostname", [])],
                }

        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        cpu0 = os.times()
        t0 = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - t0
        cpu1 = os.times()
        cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
        if errors:
            raise RuntimeError(f"{len(errors)} errors, first: {errors[0]}")
        owner: dict[str, str] = {}
        probe = stack.client(config)
        for key in probe.scan_iter(match=schema.vm("*"), count=1000):
            request_id = probe.hget(key, "request_id")
            if request_id:
                owner[key.removeprefix(schema.vm(""))] = request_id
        cloned: dict[str, list[float]] = {}
        for vm, at in provider.create_at.items():
            if vm in owner:
                cloned.setdefault(owner[vm], []).append(at)
        measured = [r for r in records[WARMUP:] if r is not None]
        a_ms, b_ms, total_ms, post_ms, gets, get_ms, missing = [], [], [], [], [], [], 0
        for r in measured:
            starts = cloned.get(r["id"])
            ready_times = [provider.ready_at.get(vm) for vm in r["vms"]]
            if not r["ready"] or not starts or None in ready_times or not ready_times:
                missing += 1
                continue
            a_ms.append(1000 * (min(starts) - r["t_post"]))
            b_ms.append(1000 * (r["t_200"] - max(t for t in ready_times if t is not None)))
            total_ms.append(1000 * (r["t_200"] - r["t_post"]))
            post_ms.append(1000 * (r["t_posted"] - r["t_post"]))
            gets.append(r["gets"])
            get_ms.append(1000 * r["get_seconds"] / r["gets"])
        vms = sum(len(r["vms"]) for r in measured)
        result.update({
            "loadavg_1min_end": round(os.getloadavg()[0], 2),
            "measured": len(measured), "unmatched": missing, "vms": vms,
            "wall_seconds": round(wall, 2),
            "requests_per_second": round(len(orders) / wall, 1),
            "process_cpu_ms_per_request": round(1000 * cpu / len(orders), 2),
            "process_cpu_percent": round(100 * cpu / wall, 1),
            "post_to_create_ms": percentiles(a_ms),
            "ready_to_get200_ms": percentiles(b_ms),
            "post_to_get200_ms": percentiles(total_ms),
            "post_call_ms": percentiles(post_ms),
            "get_call_ms": percentiles(get_ms),
            "gets_per_request": percentiles([float(g) for g in gets]),
            "resources_end": resources(),
        })
        return result
    finally:
        stack.close()


# -- requests in flight -------------------------------------------------------------------------
def run_inflight(variant: str, count: int) -> dict[str, Any]:
    spec = INFLIGHT_VARIANTS[variant]
    clone_limit = int(spec["clone_limit"])
    stall = bool(spec["stall"])
    result: dict[str, Any] = {"scenario": "inflight", "variant": variant,
                              "label": spec["label"], "requests": count,
                              "clone_limit": clone_limit}
    result["resources_before_start"] = resources()
    stack = Stack()
    try:
        stack.embedded.start()
        config = build_config(stack.embedded.port, INFLIGHT_POOLS, clone_limit, 60)
        stack.provider = provider = provider_for(config, stall=stall, never_ready=True)
        system = stack.system = PoolerSystem.start(
            config, redis_client=stack.client(config), providers={"dummy": provider},
            consume_commands=True)  # as `vmpooler manager` runs
        probe = stack.client(config)
        pools = [p.name for p in config.pools]
        time.sleep(2.0)  # let every actor's first cycle pass
        result["resources_started"] = resources()

        def request_actors() -> int:
            return sum(1 for n in system.directory.names() if n.startswith("request:"))

        def pending() -> int:
            pipe = probe.pipeline(transaction=False)
            for pool in pools:
                pipe.scard(schema.pending(pool))
            return sum(pipe.execute())

        t0 = time.monotonic()
        for i in range(count):
            if system.request_ondemand({pools[i % len(pools)]: 1}) is None:
                raise RuntimeError("request id taken")
        created = time.monotonic() - t0
        actors_ok = wait_for(lambda: request_actors() >= count, 120)
        actors_at = time.monotonic() - t0
        result["resources_created"] = resources()
        if stall:
            expected = min(clone_limit, count)
            what = f"{expected} VMs reserved in pending (clone slots in use)"
        else:
            expected = count
            what = f"{expected} VMs pending"
        state_ok = wait_for(lambda: pending() >= expected, 120, 0.05)
        state_at = time.monotonic() - t0
        time.sleep(10.0)  # a few pool and sweep cycles in that state
        in_use = int(probe.get(schema.tasks_ondemandclone()) or 0)
        alive = request_actors()
        result.update({
            "create_seconds": round(created, 3),
            "creates_per_second": round(count / created, 1),
            "all_actors_seconds": round(actors_at, 3) if actors_ok else None,
            "state": what,
            "state_seconds": round(state_at, 3) if state_ok else None,
            "pending_vms": pending(),
            "ondemand_clones_in_use": in_use,
            "create_vm_calls": len(provider.create_at),
            "request_actors_after_10s": alive,
            "requests_in_flight": probe.zcard(schema.provisioning_processing()),
            "loadavg_1min": round(os.getloadavg()[0], 2),
            "resources_in_flight": resources(),
        })
        provider.release()
        s0 = time.monotonic()
        system.stop()
        stack.system = None
        result["stop_seconds"] = round(time.monotonic() - s0, 2)
        time.sleep(1.0)
        result["resources_after_stop_1s"] = resources()
        return result
    finally:
        stack.close()


# -- driver -------------------------------------------------------------------------------------
def child_args(args: argparse.Namespace) -> list[str]:
    """What every child process is told besides its scenario."""
    return ["--requests", str(args.requests), "--in-flight", str(args.in_flight),
            "--poll-ms", str(args.poll_ms), "--seed", str(args.seed),
            "--clone-limit", str(args.clone_limit)]


def _table(rows: list[tuple[str, list[Any]]], headers: list[str]) -> str:
    width = max(len(label) for label, _ in rows) + 2
    cols = [max(14, len(h) + 2, *(len(fmt(v[i])) + 2 for _, v in rows if len(v) > i))
            for i, h in enumerate(headers)]
    lines = ["".ljust(width) + "".join(h.rjust(c) for h, c in zip(headers, cols, strict=True))]
    for label, values in rows:
        lines.append(label.ljust(width) + "".join(
            fmt(v).rjust(c) for v, c in zip(values, cols, strict=True)) if values else label)
    return "\n".join(lines)


def latency_table(results: list[dict[str, Any]]) -> str:
    headers = [f"{r['transport']} c={r['concurrency']}" for r in results]
    rows: list[tuple[str, list[Any]]] = [
        ("requests measured (VMs)", [f"{r['measured']} ({r['vms']})" for r in results]),
        ("wall time (s) / requests per s", [
            f"{r['wall_seconds']} / {r['requests_per_second']}" for r in results]),
        ("process CPU ms per request / CPU %", [
            f"{r['process_cpu_ms_per_request']} / {r['process_cpu_percent']}"
            for r in results]),
    ]
    for title, key in (("(a) POST -> first create_vm (ms)", "post_to_create_ms"),
                       ("(b) last VM ready -> GET 200 (ms)", "ready_to_get200_ms"),
                       ("POST -> GET 200, end to end (ms)", "post_to_get200_ms")):
        rows.append((title, []))
        for stat in ("p50", "p90", "p99", "max"):
            rows.append((f"  {stat}", [r[key][stat] for r in results]))
    rows += [
        ("  target", [f"< {TARGET_LATENCY_MS:g} ms" for _ in results]),
        ("POST call p50 / max (ms)", [
            f"{r['post_call_ms']['p50']} / {r['post_call_ms']['max']}" for r in results]),
        ("GET call p50 / max (ms)", [
            f"{r['get_call_ms']['p50']} / {r['get_call_ms']['max']}" for r in results]),
        ("poll sleep (ms)", [r["poll_ms"] for r in results]),
        ("GETs per request p50 / max", [
            f"{r['gets_per_request']['p50']:g} / {r['gets_per_request']['max']:g}"
            for r in results]),
        ("load average (1 min) at end", [r["loadavg_1min_end"] for r in results]),
        ("threads py / os at end", [
            f"{r['resources_end']['threads_python']} / {r['resources_end']['threads_os']}"
            for r in results]),
    ]
    return _table(rows, headers)


def inflight_table(results: list[dict[str, Any]]) -> str:
    headers = [r["label"] for r in results]

    def res(key: str, field: str) -> list[Any]:
        return [r[key][field] for r in results]

    rows: list[tuple[str, list[Any]]] = [
        ("requests in flight", [r["requests_in_flight"] for r in results]),
        ("ondemand_clone_limit", [r["clone_limit"] for r in results]),
        ("create (facade) (s)", [r["create_seconds"] for r in results]),
        ("  requests per second", [r["creates_per_second"] for r in results]),
        ("all request actors exist (s)", [r["all_actors_seconds"] for r in results]),
        ("state reached (s)", [r["state_seconds"] for r in results]),
        ("  VMs pending / clone slots in use", [
            f"{r['pending_vms']} / {r['ondemand_clones_in_use']}" for r in results]),
        ("  create_vm calls started", [r["create_vm_calls"] for r in results]),
        ("  request actors alive after 10 s", [r["request_actors_after_10s"] for r in results]),
    ]
    for label, key in (("before start", "resources_before_start"),
                       ("started, idle", "resources_started"),
                       ("all actors exist", "resources_created"),
                       ("in flight + 10 s", "resources_in_flight"),
                       ("1 s after stop", "resources_after_stop_1s")):
        rows.append((f"RSS / peak MiB, {label}", [
            f"{a} / {b}" for a, b in zip(res(key, "rss_mib"), res(key, "peak_rss_mib"),
                                         strict=True)]))
        rows.append((f"threads py / os, {label}", [
            f"{a} / {b}" for a, b in zip(res(key, "threads_python"), res(key, "threads_os"),
                                         strict=True)]))
    rows.append(("  target RSS / OS threads", [
        f"< {TARGET_RSS_MIB} MiB / < {TARGET_THREADS}" for _ in results]))
    rows.append(("RSS per request in flight (KiB)", [
        round(1024 * (r["resources_in_flight"]["rss_mib"] - r["resources_started"]["rss_mib"])
              / r["requests"], 1) for r in results]))
    rows.append(("stop() (s)", [r["stop_seconds"] for r in results]))
    rows.append(("load average (1 min) in flight", [r["loadavg_1min"] for r in results]))
    return _table(rows, headers)


LATENCY_METRICS: list[tuple[str, Callable[[dict[str, Any]], float | None]]] = [
    ("(a) POST -> first create_vm p50 (ms)", lambda r: r["post_to_create_ms"]["p50"]),
    ("(a) POST -> first create_vm p99 (ms)", lambda r: r["post_to_create_ms"]["p99"]),
    ("(b) last VM ready -> GET 200 p50 (ms)", lambda r: r["ready_to_get200_ms"]["p50"]),
    ("POST -> GET 200 p50 (ms)", lambda r: r["post_to_get200_ms"]["p50"]),
    ("process CPU ms per request", lambda r: r["process_cpu_ms_per_request"]),
    ("OS threads at end", lambda r: r["resources_end"]["threads_os"]),
]
INFLIGHT_METRICS: list[tuple[str, Callable[[dict[str, Any]], float | None]]] = [
    ("OS threads, in flight + 10 s", lambda r: r["resources_in_flight"]["threads_os"]),
    ("RSS MiB, in flight + 10 s", lambda r: r["resources_in_flight"]["rss_mib"]),
    ("peak RSS MiB", lambda r: r["resources_in_flight"]["peak_rss_mib"]),
    ("create (facade) (s)", lambda r: r["create_seconds"]),
    ("all request actors exist (s)", lambda r: r["all_actors_seconds"]),
    ("state reached (s)", lambda r: r["state_seconds"]),
    ("stop() (s)", lambda r: r["stop_seconds"]),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200,
                        help="measured requests per latency scenario")
    parser.add_argument("--concurrency", default="1,10",
                        help="comma-separated client counts for the latency scenarios")
    parser.add_argument("--poll-ms", type=float, default=1.0,
                        help="sleep between two GETs of one request (ms)")
    parser.add_argument("--in-flight", type=int, default=10000,
                        help="requests in flight in the inflight scenarios (0: skip them)")
    parser.add_argument("--clone-limit", type=int, default=10,
                        help="ondemand_clone_limit of the latency scenarios")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--baseline", metavar="LABEL=CHECKOUT", action="append", default=[],
                        help="also run every scenario with the checkout's own bench and "
                             "code (e.g. a git worktree of an older commit); repeatable")
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs of each scenario per build, alternating the builds")
    parser.add_argument("--json", metavar="FILE", help="write all results as JSON")
    parser.add_argument("--latency", metavar="TRANSPORT:CONCURRENCY",
                        help="run one latency scenario in this process")
    parser.add_argument("--inflight", metavar="VARIANT", choices=sorted(INFLIGHT_VARIANTS),
                        help="run one in-flight scenario in this process")
    args = parser.parse_args(argv)

    if args.latency or args.inflight:
        ran = sources()
        if args.latency:
            transport, _, conc = args.latency.partition(":")
            result = run_latency(transport, args.requests, int(conc or 1), args.poll_ms,
                                 args.seed, args.clone_limit)
        else:
            result = run_inflight(args.inflight, args.in_flight)
        result.update(ran)
        text = json.dumps(result, indent=2)
        if args.json:
            Path(args.json).write_text(text)
        else:
            print(text)
        return 0

    builds: list[tuple[str, str | None]] = [("this", None)]
    for spec in args.baseline:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"--baseline wants LABEL=CHECKOUT, not {spec!r}")
        builds.append((label, os.path.abspath(path)))
    labels = [label for label, _ in builds]
    latency: list[dict[str, Any]] = []
    if not args.skip_latency:
        for conc in [int(c) for c in args.concurrency.split(",") if c]:
            for transport in ("direct", "stream"):
                latency += run_rounds(args, builds, child_args(args), "--latency",
                                      f"{transport}:{conc}")
    inflight: list[dict[str, Any]] = []
    if args.in_flight:
        for variant in INFLIGHT_VARIANTS:
            inflight += run_rounds(args, builds, child_args(args), "--inflight", variant)
    info = machine()
    info["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print()
    print(f"machine: {info['nproc']} cores ({info['cpu']}), {info['mem_total_mib']} MiB; "
          f"{info['implementation']} {info['python']}; pykka {info['pykka']}, "
          f"redis-py {info['redis_py']}; sources {code_fingerprint()}")
    for label in labels:
        commits = sorted({r.get("source_commit", "?") for r in latency + inflight
                          if r["build"] == label})
        print(f"build {label}: commit {', '.join(commits)}")
    ours_latency = [r for r in latency if r["build"] == "this" and r["round"] == 1]
    ours_inflight = [r for r in inflight if r["build"] == "this" and r["round"] == 1]
    if ours_latency:
        print(f"\nLATENCY ({args.requests} requests of 1-3 VMs over {LATENCY_POOLS} pools per "
              f"column, after {WARMUP} warm-up; dummy provider at zero delay; "
              f"ondemand_clone_limit {args.clone_limit}; this build, round 1)\n")
        print(latency_table(ours_latency))
    if ours_inflight:
        print(f"\nREQUESTS IN FLIGHT ({args.in_flight} requests of 1 VM over "
              f"{INFLIGHT_POOLS} pools, created with system.request_ondemand; VMs never "
              f"ready; this build, round 1)\n")
        print(inflight_table(ours_inflight))
    if len(builds) > 1 or args.rounds > 1:
        if latency:
            print(f"\nLATENCY SIDE BY SIDE (each round's figure; {args.rounds} rounds, builds "
                  f"alternating)\n")
            print(compare_table(latency, labels,
                                lambda r: f"{r['transport']} c={r['concurrency']}",
                                LATENCY_METRICS, _table))
        if inflight:
            print(f"\nIN FLIGHT SIDE BY SIDE ({args.in_flight} requests; each round's "
                  f"figure)\n")
            print(compare_table(inflight, labels, lambda r: r["label"], INFLIGHT_METRICS,
                                _table))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"machine": info, "argv": sys.argv, "builds": labels, "latency": latency,
             "inflight": inflight}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
