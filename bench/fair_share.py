"""Fair shares of on-demand clone slots: one user floods, another asks for one VM now and
then. How long does the small user wait for its VM, with main's round robin between
*requests* (``--mode before``) and with the fair share between *users* (``--mode after``)?

    .venv/bin/python bench/fair_share.py [--flood-requests 100] [--vms-each 2]
                                         [--every 10] [--clone-time 5] [--clone-limit 10]
                                         [--mode both] [--json out.json]

Each mode runs in the same process, one after the other, each with its own redis-server
(``EmbeddedRedis``, no persistence) and a ``PoolerSystem`` on the real clock with the dummy
provider (clones take ``uniform(0, --clone-time)`` seconds; the pool actor sees a finished
clone ready at its next check, ``check_loop_delay_min`` 1 s). At t=0 user ``flood`` creates
``--flood-requests`` requests of ``--vms-each`` VMs; from t=1 s user ``small`` creates a
one-VM request every ``--every`` seconds until the flood is served. Requests are made
through the facade with the origin the API writes (``RequestOrigin``). Reported per mode:
the small user's time to ready (each request, and median / max), and the flood's total time.

``before`` replaces, in this benchmark only, the on-demand manager's queue with one that
ignores who asked (every request a user of its own): main's behaviour before fair shares.

Results: ``../BENCHMARKS.md`` ("Fair shares of on-demand clones").
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Any

from vmpooler.actors.config import (
    Config,
    GlobalSettings,
    PoolConfig,
    ProviderConfig,
    RedisSettings,
)
from vmpooler.actors.fairness.fair_share import FairShareQueue, Owner
from vmpooler.actors.storage.connection import connect
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.storage.request_store import RequestOrigin
from vmpooler.actors.system import PoolerSystem
from vmpooler.providers.base import ProviderContext
from vmpooler.providers.dummy import DummyProvider

POOL = "bench"


class PerRequest(FairShareQueue[Hashable, Any]):
    """main's order before fair shares: every request its own user, one priority."""

    def extend(self, key: Hashable, items: Iterable[Any], owner: Owner | None = None) -> None:
        super().extend(key, items, None)


def build_config(port: int, clone_limit: int, clone_time: float) -> Config:
    settings = GlobalSettings(ondemand_clone_limit=clone_limit, task_limit=clone_limit,
                              ondemand_request_ttl=60, check_loop_delay_min=1,
                              check_loop_delay_max=1)
    raw = {"name": POOL, "size": 0, "template": POOL, "provider": "dummy"}
    return Config(
        source="bench/fair_share.py", settings=settings,
        redis=RedisSettings(server="127.0.0.1", port=port),
        pools=(PoolConfig(name=POOL, size=0, template=POOL, ready_ttl=600, provider="dummy",
                          raw=raw),),
        providers={"dummy": ProviderConfig(
            name="dummy", provider_class="dummy",
            settings={"skip_dns_check_before_creating_vm": True,
                      "createvm_max_time": clone_time})},
    )


def run(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="vmpooler-bench-fair-"))
    server = EmbeddedRedis(data_dir=data, persist=False, hardened=False).start()
    config = build_config(server.port, args.clone_limit, args.clone_time)
    provider = DummyProvider(ProviderContext(
        name="dummy", settings=dict(config.providers["dummy"].settings),
        pools={POOL: dict(config.pools[0].raw)}, global_settings={},
        dns_domains={POOL: None}))
    client = connect("127.0.0.1", server.port)
    system = PoolerSystem.start(config, redis_client=client, providers={"dummy": provider})
    try:
        if mode == "before":
            manager = system.actor_ref("ondemand")
            assert manager is not None
            slots = manager.proxy().slots.get(timeout=10)  # the object itself (not a copy)
            slots.wants = PerRequest()  # before any request exists
        start = time.monotonic()
        flood = [system.request_ondemand({POOL: args.vms_each},
                                         origin=RequestOrigin("flood"))
                 for _ in range(args.flood_requests)]
        small: dict[str, float] = {}
        waited: dict[str, float] = {}
        flood_left = set(flood)
        next_small = start + 1.0
        flood_done = None
        while flood_left or len(waited) < len(small):
            now = time.monotonic()
            if flood_left and now >= next_small:
                rid = system.request_ondemand({POOL: 1}, origin=RequestOrigin("small"))
                assert rid is not None
                small[rid] = now
                next_small += args.every
            for rid in list(flood_left):
                record = system.ondemand_request(rid)
                if record is not None and record.status == "ready":
                    flood_left.discard(rid)
            if not flood_left and flood_done is None:
                flood_done = now - start
            for rid, asked in small.items():
                if rid not in waited:
                    record = system.ondemand_request(rid)
                    if record is not None and record.status == "ready":
                        waited[rid] = now - asked
            if now - start > args.timeout:
                break
            time.sleep(0.05)
        times = [round(waited[r], 2) for r in small if r in waited]
        return {"mode": mode, "flood_requests": args.flood_requests,
                "flood_vms": args.flood_requests * args.vms_each, "every_s": args.every,
                "clone_time_max_s": args.clone_time, "clone_limit": args.clone_limit,
                "flood_done_s": None if flood_done is None else round(flood_done, 1),
                "small_requests": len(small), "small_ready": len(times),
                "small_time_to_ready_s": times,
                "small_p50_s": round(statistics.median(times), 2) if times else None,
                "small_max_s": max(times) if times else None}
    finally:
        system.stop()
        client.close()
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood-requests", type=int, default=100)
    parser.add_argument("--vms-each", type=int, default=2)
    parser.add_argument("--every", type=float, default=10.0)
    parser.add_argument("--clone-time", type=float, default=5.0)
    parser.add_argument("--clone-limit", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--mode", choices=("before", "after", "both"), default="both")
    parser.add_argument("--json")
    args = parser.parse_args()
    modes = ("before", "after") if args.mode == "both" else (args.mode,)
    results = [run(mode, args) for mode in modes]
    print(f"{'mode':<8}{'flood done s':>14}{'small n':>9}{'p50 s':>8}{'max s':>8}  each")
    for r in results:
        print(f"{r['mode']:<8}{r['flood_done_s']!s:>14}{r['small_ready']:>9}"
              f"{r['small_p50_s']!s:>8}{r['small_max_s']!s:>8}  {r['small_time_to_ready_s']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
