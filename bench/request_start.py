"""What starting many request actors at once costs: N requests of one VM over 10 pools,
N VMs of other requests already pending in those pools; every request actor started at
once (on one shared executor, a recording stand-in for the on-demand manager, a fake clock),
timed until every one has claimed its request and asked for its VM. Reports that time and
the Redis ``HMGET`` and ``EVALSHA`` calls made meanwhile (``INFO commandstats``).

    .venv/bin/python bench/request_start.py [N ...]      (default: 1000 5000)

Results: ``../BENCHMARKS.md``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pykka
import redis

from vmpooler.actors.config import GlobalSettings
from vmpooler.actors.messages import WantRequestVms
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.ondemand.request import RequestActor
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.runtime.executor import ActorExecutor
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.storage.request_store import Entry, RequestStore

POOLS = 10


class AskCounter(pykka.ThreadingActor):
    """Stands in for the manager: sets ``done`` once ``n`` requests have asked for VMs."""

    def __init__(self, n: int, done: threading.Event) -> None:
        super().__init__()
        self.n, self.asked, self.done = n, 0, done

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, WantRequestVms) and message.wants:
            self.asked += 1
            if self.asked == self.n:
                self.done.set()
        return None


def run(n: int) -> str:
    data = Path(tempfile.mkdtemp(prefix="vmpooler-bench-start-"))
    server = EmbeddedRedis(data_dir=data, persist=False, hardened=False)
    server.start()
    try:
        client = redis.Redis(port=server.port, decode_responses=True)
        store = RequestStore(client)
        pipe = client.pipeline(transaction=False)
        for i in range(n):
            pool = f"p{i % POOLS}"
            pipe.sadd(schema.pending(pool), f"other-{i}")
            pipe.hset(schema.vm(f"other-{i}"),
                      mapping={"request_id": f"other-{i}", "pool_alias": pool})
        pipe.execute()
        for i in range(n):
            pool = f"p{i % POOLS}"
            store.create(f"r{i}", [Entry(pool, pool, 1)], created=int(time.time()))
        client.config_resetstat()
        done = threading.Event()
        manager = AskCounter.start(n, done)
        executor = ActorExecutor(8, name="bench").start()
        clock = FakeClock(time.time())
        pools = frozenset(f"p{k}" for k in range(POOLS))
        t0 = time.monotonic()
        refs = [RequestActor.start(request_id=f"r{i}", store=store,
                                   settings=GlobalSettings(ondemand_request_ttl=60),
                                   pools=pools, data_ttl_hours=1, manager=manager,
                                   clock=clock, scheduler=clock, metrics=RecordingMetrics(),
                                   executor=executor) for i in range(n)]
        if not done.wait(600):
            raise RuntimeError("not every request asked for its VM within 600 s")
        elapsed = time.monotonic() - t0
        stats = client.info("commandstats")
        for ref in refs:
            ref.stop(block=False)
        manager.stop()
        executor.stop(timeout=10)
        return (f"N={n}: every request claimed and asking in {elapsed:.2f} s; "
                f"HMGET {stats.get('cmdstat_hmget', {}).get('calls', 0)}, "
                f"EVALSHA {stats.get('cmdstat_evalsha', {}).get('calls', 0)}")
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def main(argv: list[str]) -> int:
    for n in [int(a) for a in argv] or [1000, 5000]:
        print(run(n), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
