"""What tracing costs, side by side: the code before tracing, tracing off, on with sampling
0, on with sampling 1.

    .venv/bin/python bench/tracing_cost.py [--rounds 3] [--before COMMIT] [--json out.json]

Each variant runs in a child process of its own, the variants' order alternating between
rounds, over one redis-server (flushed by each child) and, for ``on``, one OTLP/HTTP
receiver in this process (tests/otlp_receiver.py: it decodes every export, as a collector
would). ``before`` is ``--before`` (default: the merge base with ``main``) extracted with
``git archive`` and put first on ``PYTHONPATH`` (bench/builds.py's shim). Measured in each:

* ``checkout``: CPU microseconds per ``POST /api/v3/vm/<pool>`` (the checkout script), the
  app driven through ``falcon.testing.TestClient`` on this thread as bench/checkout_cost.py;
* ``status``: CPU microseconds per ``GET /api/v3/status`` (100 pools, its script);
* ``ondemand``: wall milliseconds per on-demand request of 1 VM through a ``PoolerSystem``
  (the dummy provider, no delay): ``request_ondemand`` -> the request actor -> the on-demand
  manager -> the pool actor -> the provider actor -> ready, one request at a time, and the
  process's CPU milliseconds per request (every actor's thread).

With ``on``, the API's spans are made and exported (a request span, the script's span);
the on-demand path makes the request's, the pool's and the provider's spans.

The machine's noise (two cores shared) is larger than what tracing off adds, so ``off`` also
times, with ``timeit``, exactly the calls tracing off adds to a checkout (the script's
no-op span: ``null_checkout_ns``) and to an on-demand request (the request actor's span and
its context, the pool's and the provider's no-op spans: ``null_ondemand_ns``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

VARIANTS = ("before", "off", "on-0", "on-1")


def _tracer(variant: str, endpoint: str) -> Any:
    if variant in ("before", "off"):
        return None
    from vmpooler.actors.tracing import ExportPlan
    from vmpooler.actors.tracing.otel import OtelTracer
    ratio = 0.0 if variant == "on-0" else 1.0
    return OtelTracer(ExportPlan(endpoint, "bench", "parentbased_traceidratio", ratio),
                      "vmpooler-bench")


def _api(variant: str, tracer: Any, port: int, work: Path, checkouts: int,
         statuses: int) -> dict[str, float]:
    import falcon.testing
    import redis
    from api_setup import pool_names, seed_all, write_config

    from vmpooler.actors.config.loader import load_config
    from vmpooler.web.api_context import ApiContext
    from vmpooler.web.app import create_app

    client = redis.Redis(port=port, decode_responses=True)
    client.flushall()
    names = pool_names(100)
    sizes = dict.fromkeys(names, 10)
    sizes[names[0]] = checkouts + 200
    seed_all(client, sizes)
    config = load_config(write_config(work / "vmpooler.yaml", port, sizes), environ={})
    ctx = ApiContext(config=config, redis=client)
    if tracer is not None:
        ctx.tracer = tracer
    test = falcon.testing.TestClient(create_app(ctx))
    path = f"/api/v3/vm/{names[0]}"
    for _ in range(100):  # warm-up: scripts loaded
        assert test.simulate_post(path).status_code == 200
        assert test.simulate_get("/api/v3/status").status_code == 200
    cpu = time.process_time()
    for _ in range(checkouts - 100):
        assert test.simulate_post(path).status_code == 200
    checkout = 1e6 * (time.process_time() - cpu) / (checkouts - 100)
    cpu = time.process_time()
    for _ in range(statuses):
        assert test.simulate_get("/api/v3/status").status_code == 200
    status = 1e6 * (time.process_time() - cpu) / statuses
    client.close()
    return {"checkout_us": checkout, "status_us": status}


def _ondemand(variant: str, tracer: Any, port: int, work: Path,
              requests: int) -> dict[str, float]:
    import redis
    import yaml

    from vmpooler.actors.config.loader import load_config
    from vmpooler.actors.system import PoolerSystem

    client = redis.Redis(port=port, decode_responses=True)
    client.flushall()
    path = work / "ondemand.yaml"
    path.write_text(yaml.safe_dump({
        ":config": {"check_loop_delay_min": 1, "check_loop_delay_max": 5, "task_limit": 10,
                    "ondemand_clone_limit": 10, "timeout": 10},
        ":redis": {"server": "127.0.0.1", "port": port},
        ":providers": {":dummy": {"provider_class": "dummy",
                                  "skip_dns_check_before_creating_vm": True}},
        ":pools": [{"name": "od", "size": 0, "provider": "dummy"}],
    }))
    config = load_config(path, environ={})
    extra = {} if tracer is None else {"tracer": tracer}
    system = PoolerSystem.start(config, **extra)
    try:
        def one() -> None:
            request_id = system.request_ondemand({"od": 1})
            assert request_id is not None
            deadline = time.monotonic() + 30
            while True:
                record = system.ondemand_request(request_id)
                if record is not None and record.status == "ready":
                    return
                if time.monotonic() > deadline:
                    raise SystemExit(f"request {request_id} not ready in 30 s: {record}")
                time.sleep(0.001)

        for _ in range(10):  # warm-up
            one()
        cpu, wall = time.process_time(), time.monotonic()
        for _ in range(requests):
            one()
        wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    finally:
        system.stop()
        client.close()
    return {"ondemand_ms": 1000 * wall / requests, "ondemand_cpu_ms": 1000 * cpu / requests}


def _null_calls() -> dict[str, float]:
    """Nanoseconds of the calls tracing off adds: per checkout, and per on-demand request."""
    import timeit

    from vmpooler.actors.tracing import NULL_SPAN, NULL_TRACER, current_span

    def checkout() -> None:
        with NULL_TRACER.start("redis checkout", kind="client", attributes={"vmpooler.vms": 1}):
            pass

    def ondemand() -> None:
        span = NULL_TRACER.start("ondemand.request", parent="",
                                 attributes={"vmpooler.request_id": "r"})
        _ = span.traceparent, current_span().traceparent  # its asks; the command sent
        span.set("vmpooler.status", "ready")
        span.set("vmpooler.vms", 1)
        span.end()
        pool = NULL_SPAN  # the pool's: no trace context in the grant
        _ = pool.traceparent
        pool.set("vmpooler.outcome", "not started")
        pool.end()
        with NULL_SPAN:  # the provider's call
            pass

    n = 200_000
    return {name: min(timeit.repeat(call, number=n, repeat=5)) / n * 1e9
            for name, call in (("null_checkout_ns", checkout), ("null_ondemand_ns", ondemand))}


def child(args: argparse.Namespace) -> None:
    tracer = _tracer(args.child, args.endpoint)
    with tempfile.TemporaryDirectory() as work:
        result = _api(args.child, tracer, args.port, Path(work), args.checkouts,
                      args.statuses)
        result.update(_ondemand(args.child, tracer, args.port, Path(work), args.requests))
    if args.child == "off":
        result.update(_null_calls())
    if tracer is not None:
        tracer.shutdown()
    Path(args.json).write_text(json.dumps(result))


def _before_shim(commit: str, work: Path) -> str:
    """``commit``'s tree extracted under ``work``, and a shim directory mapping
    ``vmpooler.*`` to it (bench/builds.py)."""
    tree = work / "before"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", commit],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    shim = work / "shim"
    (shim / "vmpooler").mkdir(parents=True)
    for name in ("actors", "web", "providers", "conf"):
        (shim / "vmpooler" / name).symlink_to(tree / name)
    return str(shim)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checkouts", type=int, default=1500)
    parser.add_argument("--statuses", type=int, default=300)
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--before", default="")
    parser.add_argument("--json", default="")
    parser.add_argument("--child", choices=VARIANTS)
    parser.add_argument("--endpoint", default="")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    from tests.otlp_receiver import otlp_receiver
    from vmpooler.actors.storage.embedded_redis import EmbeddedRedis

    before = args.before or subprocess.run(
        ["git", "-C", str(HERE.parent), "merge-base", "HEAD", "main"],
        capture_output=True, text=True, check=True).stdout.strip()
    results: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as work, otlp_receiver() as receiver:
        shim = _before_shim(before, Path(work))
        server = EmbeddedRedis(data_dir=Path(work) / "redis", persist=False, hardened=False)
        server.start()
        try:
            for n in range(args.rounds):
                order = VARIANTS if n % 2 == 0 else tuple(reversed(VARIANTS))
                for variant in order:
                    out = Path(work) / f"{variant}-{n}.json"
                    env = None
                    if variant == "before":
                        import os
                        env = {**os.environ, "PYTHONPATH": shim}
                    subprocess.run(
                        [sys.executable, __file__, "--child", variant, "--endpoint",
                         receiver.url, "--port", str(server.port), "--json", str(out),
                         "--checkouts", str(args.checkouts), "--statuses",
                         str(args.statuses), "--requests", str(args.requests)],
                        check=True, env=env)
                    results[variant].append(json.loads(out.read_text()))
                    print(f"round {n + 1} {variant}: {results[variant][-1]}", flush=True)
        finally:
            server.stop()
        spans = len(receiver.all())
    keys = ("checkout_us", "status_us", "ondemand_ms", "ondemand_cpu_ms")
    null = {k: statistics.median(r[k] for r in results["off"])
            for k in ("null_checkout_ns", "null_ondemand_ns")}
    medians = {v: {k: statistics.median(r[k] for r in results[v]) for k in keys}
               for v in VARIANTS}
    print(f"\nbefore = {before[:10]}; {args.rounds} rounds, medians (ratio to before); "
          f"spans received: {spans}")
    print(f"{'variant':8} " + " ".join(f"{k:>22}" for k in keys))
    for variant in VARIANTS:
        cells = [f"{medians[variant][k]:10.1f} ({medians[variant][k] / medians['before'][k]:.3f})"
                 for k in keys]
        print(f"{variant:8} " + " ".join(f"{c:>22}" for c in cells))
    base = medians["before"]
    print(f"calls tracing off adds: {null['null_checkout_ns']:.0f} ns per checkout "
          f"({null['null_checkout_ns'] / (10 * base['checkout_us']):.3f} % of its CPU), "
          f"{null['null_ondemand_ns']:.0f} ns per on-demand request "
          f"({null['null_ondemand_ns'] / (1e4 * base['ondemand_cpu_ms']):.4f} % of its CPU)")
    if args.json:
        Path(args.json).write_text(json.dumps({"before": before, "results": results,
                                               "medians": medians, "null_calls": null,
                                               "spans": spans}, indent=1))


if __name__ == "__main__":
    main()
