"""Pool actors have no thread of their own: a manager's threads do not grow with its pools.

The pool actors run on the system's shared actor executor, so a few hundred pools cost a
few hundred mailboxes, not a few hundred threads, and every pool still fills, answers, and
stops with the system, all of them at once.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

import pytest
import redis

from tests.harness import Harness, dummy_for, make_config, pool, started, wait_until
from tests.test_manager_process import full, processes, spawn, write_config
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.runtime.executor import ActorExecutor
from vmpooler.actors.runtime.pooled import PooledActor
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.system import PoolerSystem

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
    # all gone after stop (a late daemon aside; the last ones may take a moment to end)
    wait_until(lambda: threading.active_count() <= before + 1, 10, "the threads to end",
               explain=lambda: str([t.name for t in threading.enumerate()]))


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


class _Blocker(PooledActor):
    """Holds its executor's thread until ``release`` is set."""

    def __init__(self, *, executor: ActorExecutor, entered: threading.Event,
                 release: threading.Event) -> None:
        super().__init__(executor=executor)
        self.entered, self.release = entered, release

    def on_receive(self, message: object) -> None:
        self.entered.set()
        self.release.wait(30)


def test_stop_asks_every_pool_at_once_not_one_after_another(redis_client: redis.Redis) -> None:
    """With the executor's only thread busy, ``stop`` has already asked every pool actor to
    stop (one by one, it would wait on the first): the pools' stops queue behind one sweep of
    the run queue, not one sweep each."""
    config = make_config([pool(f"p{i:02d}", 0) for i in range(40)])
    executor = ActorExecutor(threads=1, name="test-stop").start()
    clock = FakeClock()
    system = PoolerSystem.start(
        config, redis_client=redis_client, clock=clock, scheduler=clock,
        metrics=RecordingMetrics(), providers={"dummy": dummy_for(config)},
        resolver=lambda _fqdn: False, actor_executor=executor)
    entered, release = threading.Event(), threading.Event()
    blocker = _Blocker.start(executor=executor, entered=entered, release=release)
    stopper = threading.Thread(target=system.stop, kwargs={"timeout": 20}, daemon=True)
    try:
        refs = [system.actor_ref(f"pool:p{i:02d}") for i in range(40)]
        assert all(r is not None for r in refs)
        Harness(system, clock, RecordingMetrics(), dummy_for(config), redis_client).quiesce()
        blocker.tell("hold")
        assert entered.wait(10)
        stopper.start()
        wait_until(lambda: all(r.actor_inbox.qsize() for r in refs if r is not None), 10,
                   "every pool actor to have its stop queued")
    finally:
        release.set()
        stopper.join(30)
        if stopper.is_alive() or not entered.is_set():
            system.stop()
        blocker.stop()
        executor.stop()
    assert not stopper.is_alive()
    assert not any(r.is_alive() for r in refs if r is not None)
