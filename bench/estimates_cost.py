"""What one forward play of the honest waits costs: :func:`estimate` over ``N`` queued
requests (1-3 VMs each, 2 pools, a tenth of them from 20 recurring users, ``limit`` 4
slots), without and with foreseen arrivals (learned from the same requests arriving one
every 30 s). The play runs at most once a second (docs/fairness.md, "Honest waits").

    .venv/bin/python bench/estimates_cost.py [--queued 1000 10000] [--repeat 5]

Needs ``redis-server`` (the clone slots' store is built on a client; the play reads nothing).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vmpooler.actors.cluster.remote import LocalOnly  # noqa: E402
from vmpooler.actors.cluster.request_leases import SoleRequests  # noqa: E402
from vmpooler.actors.fairness.fair_share import Owner  # noqa: E402
from vmpooler.actors.metrics.backends import NullMetrics  # noqa: E402
from vmpooler.actors.ondemand.arrivals import Arrivals  # noqa: E402
from vmpooler.actors.ondemand.clone_grants import CloneGrants, Want  # noqa: E402
from vmpooler.actors.ondemand.waits import estimate  # noqa: E402
from vmpooler.actors.runtime.clock import FakeClock  # noqa: E402
from vmpooler.actors.runtime.supervisor import ActorDirectory  # noqa: E402
from vmpooler.actors.storage.connection import connect  # noqa: E402
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis  # noqa: E402
from vmpooler.actors.storage.request_store import RequestStore  # noqa: E402
from vmpooler.actors.storage.wait_store import PoolTimes  # noqa: E402


def measure(client: object, queued: int, repeat: int) -> dict[str, float]:
    """Milliseconds per play (median of ``repeat``), without and with arrivals."""
    clock = FakeClock()
    slots = CloneGrants(store=RequestStore(client), directory=ActorDirectory(),  # type: ignore[arg-type]
                       clone_limit=4, clock=clock, metrics=NullMetrics(), remote=LocalOnly(),
                       leases=SoleRequests(), runs=lambda _r: True)
    rng = random.Random(1)
    arrivals = Arrivals(start=clock.monotonic())
    for i in range(queued):
        clock.advance(30.0)
        rid = f"r{i}"
        owner = Owner(f"user-{i % 20}") if i % 10 == 0 else Owner(rid)
        pools = tuple(f"p{rng.randrange(2)}" for _ in range(rng.randint(1, 3)))
        arrivals.arrived(rid, pools, owner, at=clock.monotonic())
        slots.wants.extend(rid, [Want(p, p, clock.monotonic()) for p in pools], owner)
    times = {"p0": PoolTimes(60.0, 80.0), "p1": PoolTimes(60.0, 80.0)}
    running = [f"r{i}" for i in range(queued)]
    found: dict[str, float] = {}
    for name, foresee in (("plain_ms", False), ("foreseen_ms", True)):
        spent = []
        for _ in range(repeat):
            now = clock.monotonic()
            began = time.perf_counter()
            estimate(slots, running, times, 4, now=now,
                     arrivals=arrivals.expected(now=now) if foresee else None)
            spent.append((time.perf_counter() - began) * 1000)
        found[name] = round(statistics.median(spent), 1)
    found["queued_vms"] = len(slots.wants)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queued", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vmpooler-bench-estc-") as data, EmbeddedRedis(
            data_dir=Path(data), persist=False, hardened=False) as server:
        client = connect("127.0.0.1", server.port)
        for queued in args.queued:
            print(json.dumps({"queued_requests": queued, **measure(client, queued,
                                                                   args.repeat)}))


if __name__ == "__main__":
    main()
