"""What one ``GET /status`` costs, in process: the API's CPU and Redis's own time.

    .venv/bin/python bench/status_cost.py                     # 100 pools, 2,000 requests
    .venv/bin/python bench/status_cost.py --users 10,1000     # with :quotas: and N users
    PYTHONPATH=/tmp/vmp-before/pkg .venv/bin/python bench/status_cost.py   # an older build

It starts its own redis-server, seeds it as ``bench/api.py`` does (``--pools`` pools of 10
ready VMs), loads the same configuration through the real loader and serves the app through
``falcon.testing.TestClient`` on this thread (no HTTP, no gunicorn): what is left is the
resource's own work. Each request carries a view value no request used before (as
``bench/api.py``). Reported per request: CPU (``time.process_time``), Redis commands and
Redis's time in microseconds (``INFO commandstats``: the commands a script runs are counted
inside its ``EVALSHA``), and round trips (``total_commands_processed`` less the scripts'
inner commands is not exact; the EVALSHA count is).

With ``--users``, ``:quotas:`` sets ``vms_held: 10`` and ``:auth:`` is configured; N users
each hold 3 VMs (written as the checkout script writes them) and the requests are anonymous
with the default view (so the ``users`` section is built); the clock is real, so a snapshot
of the section is reused for as long as the build keeps one.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import falcon.testing
import redis
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from api_setup import pool_names, seed_all, write_config

from vmpooler.actors.config.loader import load_config
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.web.app import create_app

try:
    from vmpooler.web.api_context import ApiContext
except ImportError:  # builds before the web/ reshaping
    from vmpooler.web.context import ApiContext  # type: ignore[no-redef]

VIEW = "capacity,queue,clone,boot,pools"


def seed_users(client: redis.Redis, users: int, pools: list[str]) -> None:
    """``users`` users holding 3 running VMs each, in the usage view's index."""
    pipe = client.pipeline(transaction=False)
    for i in range(users):
        user, pool = f"user{i:05d}", pools[i % len(pools)]
        vms = [f"u{i:05d}v{j}" for j in range(3)]
        pipe.sadd(schema.running(pool), *vms)
        pipe.sadd(schema.quota_held(user), *(f"vm:{pool}:{vm}" for vm in vms))
        pipe.hset(schema.quota_users(), user, f"{i + 1}|10|||")
        if i % 500 == 499:
            pipe.execute()
    pipe.execute()


def redis_work(client: redis.Redis) -> tuple[int, int, float]:
    """(commands, EVALSHA calls, microseconds) so far, from INFO commandstats."""
    stats: dict[str, Any] = client.info("commandstats")
    calls = sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")
    usec = sum(float(v["usec"]) for k, v in stats.items() if k != "cmdstat_info")
    scripts = sum(int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_evalsha",
                                                                    "cmdstat_eval"))
    return calls, scripts, usec


def measure(pools: int, users: int, requests: int, view: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as work:
        try:
            server = EmbeddedRedis(data_dir=Path(work) / "redis", persist=False, hardened=False)
        except TypeError:  # builds whose server is always open
            server = EmbeddedRedis(data_dir=Path(work) / "redis", persist=False)
        server.start()
        try:
            return _measure(Path(work), server, pools, users, requests, view)
        finally:
            server.stop()


def _measure(work: Path, server: EmbeddedRedis, pools: int, users: int, requests: int,
             view: str | None) -> dict[str, float]:
    client = redis.Redis(port=server.port, decode_responses=True)
    sizes = dict.fromkeys(pool_names(pools), 10)
    seed_all(client, sizes)
    path = write_config(work / "vmpooler.yaml", server.port, sizes)
    if users:
        document = yaml.safe_load(path.read_text())
        document[":quotas"] = {"default": {"vms_held": 10}}
        document[":auth"] = {"provider": "ldap", "ldap": {
            "host": "ldap.invalid", "base": "ou=x", "user_object": "uid"}}
        path.write_text(yaml.safe_dump(document))
        seed_users(client, users, list(sizes))
    config = load_config(path)
    ctx = ApiContext(config=config, redis=client)
    test = falcon.testing.TestClient(create_app(ctx))
    for i in range(50):  # warm-up: scripts loaded, layouts worked out
        test.simulate_get("/api/v3/status", query_string=f"view={view},w{i}" if view else "")
    client.config_resetstat()
    cpu, started = time.process_time(), time.perf_counter()
    for i in range(requests):
        answer = test.simulate_get("/api/v3/status",
                                   query_string=f"view={view},x{i}" if view else "")
        assert answer.status_code == 200, answer.text
    cpu, wall = time.process_time() - cpu, time.perf_counter() - started
    commands, scripts, usec = redis_work(client)
    return {"cpu_ms": 1000 * cpu / requests, "wall_ms": 1000 * wall / requests,
            "commands": commands / requests, "scripts": scripts / requests,
            "redis_us": usec / requests, "bytes": len(answer.content)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, default=100)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--users", default="", help="comma-separated user counts")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cases = [(int(n), None) for n in args.users.split(",") if n] or [(0, VIEW)]
    for users, view in cases:
        runs = [measure(args.pools, users, args.requests, view) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["cpu_ms"])
        cpus = ", ".join(f"{r['cpu_ms']:.3f}" for r in runs)
        print(f"pools {args.pools} users {users}: CPU ms/req {cpus} (best {best['cpu_ms']:.3f}), "
              f"wall {best['wall_ms']:.3f} ms, Redis {best['commands']:.1f} commands "
              f"{best['scripts']:.2f} scripts {best['redis_us']:.1f} us/req, "
              f"body {best['bytes']:.0f} B", flush=True)


if __name__ == "__main__":
    main()
