"""What one ``POST /vm/<pool>`` costs the API, in process: CPU per checkout.

    .venv/bin/python bench/checkout_cost.py                  # 3 rounds of 1,000 checkouts
    .venv/bin/python bench/checkout_cost.py --profile        # and the last round's profile
    PYTHONPATH=/tmp/vmp-before/pkg .venv/bin/python bench/checkout_cost.py   # an older build

It starts its own redis-server, seeds 100 pools as ``bench/api.py`` does (the first with
enough ready VMs for every checkout), loads the configuration through the real loader and
serves the app through ``falcon.testing.TestClient`` on this thread (no HTTP, no gunicorn):
what is left is the resource's own work, anonymous, from 127.0.0.1.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

import falcon.testing
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from api_setup import pool_names, seed_all, write_config

from vmpooler.actors.config.loader import load_config
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.web.api_context import ApiContext
from vmpooler.web.app import create_app


def rounds(work: Path, port: int, per_round: int, count: int,
           profile: bool) -> list[float]:
    """CPU milliseconds per checkout of each round (the last one profiled if asked)."""
    client = redis.Redis(port=port, decode_responses=True)
    names = pool_names(100)
    sizes = dict.fromkeys(names, 10)
    sizes[names[0]] = per_round * count + 200
    seed_all(client, sizes)
    config = load_config(write_config(work / "vmpooler.yaml", port, sizes))
    test = falcon.testing.TestClient(create_app(ApiContext(config=config, redis=client)))
    path = f"/api/v3/vm/{names[0]}"
    for _ in range(100):  # warm-up: scripts loaded
        assert test.simulate_post(path).status_code == 200
    figures: list[float] = []
    for n in range(count):
        profiler = cProfile.Profile() if profile and n == count - 1 else None
        cpu = time.process_time()
        if profiler:
            profiler.enable()
        for _ in range(per_round):
            answer = test.simulate_post(path)
            assert answer.status_code == 200, answer.text
        if profiler:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        figures.append(1000 * (time.process_time() - cpu) / per_round)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkouts", type=int, default=1000, help="per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        server = EmbeddedRedis(data_dir=Path(work) / "redis", persist=False, hardened=False)
        server.start()
        try:
            figures = rounds(Path(work), server.port, args.checkouts, args.rounds,
                             args.profile)
        finally:
            server.stop()
    print("CPU ms/checkout " + ", ".join(f"{f:.3f}" for f in figures)
          + f" (best {min(figures):.3f})")


if __name__ == "__main__":
    main()
