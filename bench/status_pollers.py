"""An unrelated ``GET /vm/<name>`` while anonymous clients poll ``/status``, against a real
``vmpooler api`` (gunicorn) whose ``:quotas:`` users hold VMs.

    .venv/bin/python bench/status_pollers.py                           # this build
    .venv/bin/python bench/status_pollers.py --build before=/tmp/vmp-before/vmpooler \
        --build after=/tmp/vmp-after/vmpooler --users 1000 --pollers 16

For each build: a fresh redis-server seeded as ``bench/status_cost.py`` seeds it (100 pools of
10 ready VMs, ``--users`` users holding 3 VMs each, ``:quotas:`` and ``:auth:`` set), the API
on 2 workers, then ``GET /vm/<name>`` ``--probes`` times one after another, first alone and
then while ``--pollers`` wrk connections ask ``GET /api/v3/status`` (default view, no token)
as fast as they are answered. Reported: the probe's median and largest latency, the
pollers' requests per second, and how busy Redis's one thread was (INFO cpu) meanwhile. No
manager runs on that Redis (it would only add its own work).
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from api_load import run_wrk
from api_setup import ROOT, Server, pool_names, seed_all, write_config
from status_cost import seed_users

from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port


def redis_busy(client: redis.Redis) -> float:
    """CPU seconds Redis's main thread has used so far."""
    info: dict[str, Any] = client.info("cpu")
    return float(info.get("used_cpu_sys_main_thread", info["used_cpu_sys"])) + float(
        info.get("used_cpu_user_main_thread", info["used_cpu_user"]))


def probe(port: int, path: str, count: int) -> list[float]:
    """Milliseconds of each of ``count`` GETs of ``path``, one after another, on one
    connection kept open."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    figures: list[float] = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            connection.request("GET", path)
            answer = connection.getresponse()
            answer.read()
            assert answer.status == 200, answer.status
            figures.append(1000 * (time.perf_counter() - started))
    finally:
        connection.close()
    return figures


def measure(label: str, command: str, args: argparse.Namespace, work: Path) -> None:
    server = EmbeddedRedis(data_dir=work / "redis", persist=False, hardened=False)
    server.start()
    api: Server | None = None
    try:
        client = redis.Redis(port=server.port, decode_responses=True)
        sizes = dict.fromkeys(pool_names(100), 10)
        seeded = seed_all(client, sizes)
        path = write_config(work / "vmpooler.yaml", server.port, sizes)
        document = yaml.safe_load(path.read_text())
        document[":quotas"] = {"default": {"vms_held": 10}}
        document[":auth"] = {"provider": "ldap", "ldap": {
            "host": "ldap.invalid", "base": "ou=x", "user_object": "uid"}}
        path.write_text(yaml.safe_dump(document))
        seed_users(client, args.users, list(sizes))
        port = free_port()
        api = Server(label, [command, "api", "--config", str(path), "--bind",
                             f"127.0.0.1:{port}", "--workers", "2"], port,
                     "/api/v3/status", work / "api.log", 2).start()
        vm = next(iter(seeded.values()))[0]
        target = f"/api/v3/vm/{vm}"
        probe(port, target, 20)  # warm-up
        alone = probe(port, target, args.probes)
        result: dict[str, Any] = {}
        pollers = threading.Thread(target=lambda: result.update(run_wrk(
            f"http://127.0.0.1:{port}/api/v3/status", "GET", args.pollers, args.seconds,
            2, work)))
        busy, wall = redis_busy(client), time.monotonic()
        pollers.start()
        time.sleep(1)  # the pollers are running
        loaded = probe(port, target, args.probes)
        pollers.join()
        busy = (redis_busy(client) - busy) / (time.monotonic() - wall)
        print(f"[{label}] users {args.users}: GET /vm alone median "
              f"{statistics.median(alone):.1f} ms max {max(alone):.1f} ms; under "
              f"{args.pollers} /status pollers median {statistics.median(loaded):.1f} ms "
              f"max {max(loaded):.1f} ms; pollers {result.get('rps', 0):.0f} req/s; "
              f"Redis's thread {100 * busy:.0f} % busy", flush=True)
    finally:
        if api is not None:
            api.stop()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="append", metavar="LABEL=COMMAND")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--pollers", type=int, default=16)
    parser.add_argument("--probes", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    builds = args.build or [f"this={ROOT / '.venv' / 'bin' / 'vmpooler'}"]
    for build in builds:
        label, _, command = build.partition("=")
        with tempfile.TemporaryDirectory() as work:
            measure(label, command, args, Path(work))


if __name__ == "__main__":
    main()
