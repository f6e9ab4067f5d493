"""Pool actors have no thread of their own: a manager's threads do not grow with its pools.

The pool actors run on the system's shared actor executor, so a few hundred pools cost a
few hundred mailboxes, not a few hundred threads, and every pool still fills, is told, and
stops with the system.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

import pytest
import redis

from tests.harness import make_config, pool, started, wait_until
from tests.test_manager_process import full, processes, spawn, write_config
from vmpooler.actors.runtime.pooled import PooledActor
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis

__all__ = ["processes"]  # the fixture, imported for the process test

POOLS = 300
THREAD_BUDGET = 60  # threads a started system may add, whatever its number of pools


def test_threads_do_not_grow_with_pools_and_every_pool_fills(
        redis_client: redis.Redis) -> None:
    config = make_config([pool(f"p{i:03d}", 1) for i in range(POOLS)], task_limit=50)
    before = threading.active_count()
    with started(redis_client, config) as h:
        added = threading.active_count() - before
        assert added < THREAD_BUDGET, f"{added} threads for {POOLS} pools"
        refs = [h.system.actor_ref(f"pool:p{i:03d}") for i in range(POOLS)]
        assert all(isinstance(r.actor_class, type) and issubclass(r.actor_class, PooledActor)
                   for r in refs if r is not None)
        wait_until(lambda: all(h.client.scard(schema.ready(f"p{i:03d}")) == 1
                               for i in range(POOLS)), 60, "every pool to fill")
        h.quiesce()  # every pool actor answers an ask from a plain thread
        assert threading.active_count() - before < THREAD_BUDGET
    assert threading.active_count() <= before + 1  # all gone after stop (a late daemon aside)


@pytest.mark.integration
def test_a_manager_of_many_pools_runs_on_few_threads(
        tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
        processes: list[subprocess.Popen[str]]) -> None:
    pools = {f"p{i:03d}": 1 for i in range(POOLS)}
    config = write_config(tmp_path / "many.yaml", redis_port=redis_server.port, pools=pools,
                          dummy={})
    manager = spawn(processes, "manager", "--config", str(config), log=tmp_path / "m.log")
    wait_until(lambda: full(redis_client, pools), 60, "every pool to fill")
    status = Path(f"/proc/{manager.pid}/status").read_text()
    threads = int(next(line.split()[1] for line in status.splitlines()
                       if line.startswith("Threads:")))
    assert threads < 100, f"the manager runs {threads} threads for {POOLS} pools"
    manager.send_signal(signal.SIGTERM)
    assert manager.wait(timeout=30) == 0
    assert "Traceback" not in (tmp_path / "m.log").read_text()
