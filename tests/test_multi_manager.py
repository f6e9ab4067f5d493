"""Several ``vmpooler manager`` processes on one Redis, sharing one dummy inventory:
pools spread by lease, filled once, taken over when a manager is killed or stopped past its
lease, and a stopped manager's late writes refused by the fence."""

from __future__ import annotations

import collections
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis
import yaml

from tests.harness import wait_until
from tests.test_manager_process import processes, spawn  # noqa: F401 - the fixture
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.providers.dummy_store import read_inventory

pytestmark = pytest.mark.integration

POOLS = {f"pool{n}": 5 for n in range(9)}
BEAT = 1.0  # manager_heartbeat_interval: the lease TTL is three of them
TTL = 3 * BEAT
CLONED = re.compile(r"\[\*\] \[(\S+)\] '([^']+)' is being cloned")


def write_config(path: Path, *, redis_port: int, inventory: Path, clone_time: float) -> Path:
    document = {
        ":config": {
            "check_loop_delay_min": 1, "check_loop_delay_max": 1, "task_limit": 20,
            "timeout": 10, "manager_heartbeat_interval": BEAT,
        },
        ":redis": {"server": "127.0.0.1", "port": redis_port},
        ":providers": {":dummy": {"provider_class": "dummy", "filename": str(inventory),
                                    "createvm_max_time": clone_time,
                                    "skip_dns_check_before_creating_vm": True}},
        ":dns_configs": {":local": {"dns_class": "dynamic-dns", "domain": "example.test"}},
        ":pools": [{"name": name, "size": size, "provider": "dummy", "dns_plugin": "local"}
                   for name, size in POOLS.items()],
    }
    path.write_text(yaml.safe_dump(document))
    return path


def holders(client: redis.Redis) -> dict[str, int | None]:
    """pool -> pid of the manager holding its lease (None: free)."""
    out: dict[str, int | None] = {}
    for pool in POOLS:
        value = client.get(schema.lease("pool", pool))
        out[pool] = int(value.split(" ", 1)[1].split(":")[1]) if value else None
    return out


class Watch:
    """Samples every pool while waiting: ready + pending never above the size (pending VMs
    are the clones in flight), and no VM in two pools' queues."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.worst: dict[str, int] = collections.defaultdict(int)

    def full(self) -> bool:
        pipe = self.client.pipeline(transaction=False)
        for pool in POOLS:
            pipe.scard(schema.ready(pool))
            pipe.scard(schema.pending(pool))
        counts = pipe.execute()
        done = True
        for n, (pool, size) in enumerate(POOLS.items()):
            ready, pending = counts[2 * n], counts[2 * n + 1]
            self.worst[pool] = max(self.worst[pool], ready + pending)
            done &= ready == size and pending == 0
        return done

    def assert_never_above_size(self) -> None:
        assert all(self.worst[p] <= POOLS[p] for p in POOLS), dict(self.worst)


def clone_counts(logs: list[Path]) -> collections.Counter[str]:
    found: collections.Counter[str] = collections.Counter()
    for log in logs:
        for _pool, vm in CLONED.findall(log.read_text() if log.exists() else ""):
            found[vm] += 1
    return found


def inventory_names(path: Path) -> list[str]:
    doc = read_inventory(path)
    return [vm["name"] for vms in (doc.get("pool") or {}).values() for vm in vms]


def test_three_managers_share_the_pools_then_one_dies_and_a_fourth_joins(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
    processes: list[subprocess.Popen[str]],
) -> None:
    inventory = tmp_path / "dummy.yaml"
    config = write_config(tmp_path / "c.yaml", redis_port=redis_server.port,
                          inventory=inventory, clone_time=0)
    logs = [tmp_path / f"m{n}.log" for n in range(4)]
    managers = [spawn(processes, "manager", "--config", str(config), log=logs[n])
                for n in range(3)]
    watch = Watch(redis_client)
    pids = {m.pid for m in managers}
    wait_until(lambda: watch.full() and set(holders(redis_client).values()) == pids, 40,
               "nine full pools, spread over the three managers")
    watch.assert_never_above_size()
    assert max(clone_counts(logs).values()) == 1, "a VM was cloned twice"
    names = inventory_names(inventory)
    assert len(names) == len(set(names)) == sum(POOLS.values())

    victim = managers[0]
    theirs = [p for p, pid in holders(redis_client).items() if pid == victim.pid]
    victim.kill()  # SIGKILL: its leases are left to expire
    victim.wait(timeout=10)
    killed_at = time.monotonic()
    wait_until(lambda: all(holders(redis_client)[p] in pids - {victim.pid} for p in theirs),
               TTL + 5, "the killed manager's pools to be taken over")
    assert time.monotonic() - killed_at <= TTL + 5
    redis_client.delete(*[schema.ready(p) for p in theirs])  # checked out, say: refill
    wait_until(watch.full, 30, "the others to refill its pools")

    fourth = spawn(processes, "manager", "--config", str(config), log=logs[3])
    wait_until(lambda: fourth.pid in holders(redis_client).values(), 20,
               "the fourth manager to take a share")
    wait_until(lambda: watch.full()
               and set(holders(redis_client).values()) <= pids - {victim.pid} | {fourth.pid},
               30, "every pool full and held by a live manager")
    watch.assert_never_above_size()
    assert max(clone_counts(logs).values()) == 1, "a VM was cloned twice"
    names = inventory_names(inventory)
    assert len(names) == len(set(names))
    for manager in (*managers[1:], fourth):
        manager.send_signal(signal.SIGTERM)
    for manager in (*managers[1:], fourth):
        assert manager.wait(timeout=20) == 0
    assert all("Traceback" not in log.read_text() for log in logs if log.exists())
    assert all(v is None for v in holders(redis_client).values()), "a lease outlived a stop"


def test_a_manager_stopped_past_its_lease_is_fenced(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
    processes: list[subprocess.Popen[str]],
) -> None:
    """SIGSTOP a manager while its clones are in flight, past its lease: the other takes its
    pools; SIGCONT: its clones' answers carry the old lease and the scripts refuse them."""
    inventory = tmp_path / "dummy.yaml"
    config = write_config(tmp_path / "c.yaml", redis_port=redis_server.port,
                          inventory=inventory, clone_time=2)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    a = spawn(processes, "manager", "--config", str(config), log=logs[0])
    b = spawn(processes, "manager", "--config", str(config), log=logs[1])
    wait_until(lambda: set(holders(redis_client).values()) == {a.pid, b.pid}, 30,
               "the pools spread over both managers")

    def a_cloning() -> list[str]:
        text = logs[0].read_text()
        started = {vm for _p, vm in CLONED.findall(text)}
        return [vm for vm in started if f"'{vm}' cloned in" not in text]

    in_flight = wait_until(a_cloning, 20, "a's clones to be in flight")
    a.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: a.pid not in holders(redis_client).values(), TTL + 10,
                   "b to take a's pools")
    finally:
        a.send_signal(signal.SIGCONT)
    wait_until(lambda: "late write refused by the fence" in logs[0].read_text(), 20,
               "a to log its refused writes")
    text = logs[0].read_text()
    assert "lost:" in text
    # the script saw the old token: "... no longer held as '<token> <a's id>'"
    assert re.search(r"late write refused by the fence: lease \S+ no longer held as '\d+ ",
                     text), text
    # a's clones finished while it was stopped; their answers were refused, so the clone's
    # time was never written by a (b adopts the VM from the shared inventory instead).
    refused = [vm for vm in in_flight
               if redis_client.hget(schema.vm(vm), "clone_time") is None]
    assert refused, "every late clone answer was applied"
    assert max(clone_counts(logs).values()) == 1, "a VM was cloned twice"
    for manager in (a, b):
        manager.send_signal(signal.SIGTERM)
        assert manager.wait(timeout=20) == 0
