"""On-demand requests over three ``vmpooler manager`` processes on one Redis: each request
is run by the manager holding its lease, its VMs cloned by the managers owning their pools
and granted by the one granting every manager's clone slots (messages between them through
the managers' inboxes); the granter is SIGKILLed while its requests' clones are in
flight, and the others take its requests (and the grants) over within the lease TTL. Every
request ends ready with exactly the VMs it asked for, and the clones started, counted
per request and per pool from the managers' logs, show no work done twice."""

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
from tests.test_multi_manager import inventory_names
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.storage.request_store import Entry, RequestStore
from vmpooler.web.commands import StreamCommands

# solo: three managers, a SIGKILL and lease TTLs of seconds, with every clone counted
pytestmark = [pytest.mark.integration, pytest.mark.solo, pytest.mark.timeout(240)]

POOLS = [f"pool{n}" for n in range(12)]
BEAT = 1.0  # manager_heartbeat_interval: the lease TTL is three of them
TTL = 3 * BEAT
REQUESTS = 30  # a manager left without requests: (2/3)**30 * 3, about 2e-5
CLONED = re.compile(r"\[\*\] \[(\S+)\] '([^']+)' is being cloned from '[^']+' for request "
                    r"'([^']+)'")
FINISHED = re.compile(r"\[\+\] \[\S+\] '([^']+)' cloned in")
REFUSED = re.compile(r"\[!\] \[\S+\] '([^']+)' of request '[^']+' not cloned")


def write_config(path: Path, *, redis_port: int, inventory: Path) -> Path:
    document = {
        ":config": {
            "check_loop_delay_min": 1, "check_loop_delay_max": 1, "task_limit": 20,
            "ondemand_clone_limit": 16, "timeout": 10, "manager_heartbeat_interval": BEAT,
            "ondemand_request_ttl": 5, "max_vm_retries": 5,
        },
        ":redis": {"server": "127.0.0.1", "port": redis_port},
        ":providers": {":dummy": {"provider_class": "dummy", "filename": str(inventory),
                                    "createvm_max_time": 1.5,
                                    "skip_dns_check_before_creating_vm": True}},
        ":dns_configs": {":local": {"dns_class": "dynamic-dns", "domain": "example.test"}},
        ":pools": [{"name": name, "size": 0, "provider": "dummy", "dns_plugin": "local"}
                   for name in POOLS],
    }
    path.write_text(yaml.safe_dump(document))
    return path


def request_entries(n: int) -> list[Entry]:
    """Request ``n`` asks for one or two VMs of three pools, rotating over the twelve."""
    return [Entry(POOLS[(n + k) % len(POOLS)], POOLS[(n + k) % len(POOLS)], 1 + (n + k) % 2)
            for k in range(3)]


def request_holders(client: redis.Redis, ids: list[str]) -> dict[str, int | None]:
    """request -> pid of the manager holding its lease (None: free)."""
    values = client.mget([schema.lease("request", r) for r in ids])
    return {r: int(v.split(" ", 1)[1].split(":")[1]) if v else None
            for r, v in zip(ids, values, strict=True)}


def clones(logs: list[Path]) -> list[tuple[str, str, str, int]]:
    """Every clone started for a request: (pool, vm, request, index of the log). A clone
    refused before it reached the provider (its breaker open: the dummy provider's shared
    file is slow on a loaded machine) is not work done and is left out."""
    texts = [log.read_text() if log.exists() else "" for log in logs]
    refused = {vm for text in texts for vm in REFUSED.findall(text)}
    return [(pool, vm, rid, n) for n, text in enumerate(texts)
            for pool, vm, rid in CLONED.findall(text) if vm not in refused]


def test_requests_are_run_once_over_three_managers_and_survive_a_sigkill(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
    processes: list[subprocess.Popen[str]],
) -> None:
    inventory = tmp_path / "dummy.yaml"
    config = write_config(tmp_path / "c.yaml", redis_port=redis_server.port,
                          inventory=inventory)
    logs = [tmp_path / f"m{n}.log" for n in range(3)]
    managers = [spawn(processes, "manager", "--config", str(config), log=logs[n])
                for n in range(3)]
    pids = {m.pid for m in managers}
    # Requests stay with the manager that took them: create them once all three beat.
    wait_until(lambda: redis_client.zcard(schema.manager_heartbeat()) == 3
               and None not in (held := set(pool_holders_of(redis_client).values()))
               and len(held) >= 2, 30, "three heartbeats, every pool held, by several")

    store, commands = RequestStore(redis_client), StreamCommands(redis_client)
    ids = [f"req{n:02d}" for n in range(REQUESTS)]
    asked = {r: request_entries(n) for n, r in enumerate(ids)}
    for r in ids:
        assert store.create(r, asked[r], created=int(time.time()))
        commands.request_changed(r, "created")
    assert commands.flush()

    # Spread: every manager runs some requests; kill one while its clones are in flight.
    wait_until(lambda: set(request_holders(redis_client, ids).values()) == pids, 20,
               "the requests spread over the three managers")
    # The victim is the granter of on-demand clone slots: its queue holds every request's
    # wants; the survivors' requests send theirs again to the next granter.
    granter = wait_until(lambda: redis_client.get(schema.lease("grants", "ondemand")), 10)
    index = next(n for n, m in enumerate(managers) if f":{m.pid}:" in granter)
    victim = managers[index]

    def victim_cloning() -> list[str]:
        text = logs[index].read_text()
        done = set(FINISHED.findall(text))
        return [vm for _p, vm, _r in CLONED.findall(text) if vm not in done]

    wait_until(victim_cloning, 20, "clones in flight in the manager to be killed")
    holders_then = request_holders(redis_client, ids)
    theirs = [r for r, pid in holders_then.items() if pid == victim.pid]
    pools_then = pool_holders_of(redis_client)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    killed_at = time.monotonic()
    victim_text = logs[index].read_text()
    lost_in_victim = {vm for _p, vm, _r in CLONED.findall(victim_text)} - set(
        FINISHED.findall(victim_text))
    survivors = pids - {victim.pid}

    def served_elsewhere() -> bool:
        now = request_holders(redis_client, ids)
        return all(now[r] in survivors or store.status(r) is not None for r in theirs)

    wait_until(served_elsewhere, TTL + 6, "the killed manager's requests to be taken over")
    taken_after = time.monotonic() - killed_at
    wait_until(lambda: all(store.status(r) == "ready" for r in ids), 90,
               "every request to be ready")

    # Exactly what each asked for, each VM running, in the provider, and given once.
    given: collections.Counter[str] = collections.Counter()
    names = set(inventory_names(inventory))
    for r in ids:
        record = store.read(r)
        assert record is not None and record.status == "ready"
        for e in asked[r]:
            vms = record.delivered[e.key]
            assert len(vms) == e.count, (r, e, vms)
            for vm in vms:
                given[vm] += 1
                assert redis_client.sismember(schema.running(e.pool), vm)
                assert vm in names, f"{vm} delivered but not in the provider"
    assert max(given.values()) == 1, "a VM was delivered twice"

    # No work done twice: per request and per pool, the clones started are what was asked
    # for, plus at most the clones the killed manager had in flight (lost with it).
    started = clones(logs)
    by_vm = collections.Counter(vm for _p, vm, _r, _n in started)
    assert max(by_vm.values()) == 1, "a VM was cloned twice"
    lost = {vm for _p, vm, _r, n in started if n == index and vm in lost_in_victim}
    per_request = collections.Counter(r for _p, _vm, r, _n in started)
    lost_per_request = collections.Counter(r for _p, vm, r, _n in started if vm in lost)
    for r in ids:
        wanted = sum(e.count for e in asked[r])
        assert wanted <= per_request[r] <= wanted + lost_per_request[r], (
            r, per_request[r], wanted, lost_per_request[r])
    per_pool = collections.Counter(p for p, _vm, _r, _n in started)
    lost_per_pool = collections.Counter(p for p, vm, _r, _n in started if vm in lost)
    for pool in POOLS:
        wanted = sum(e.count for r in ids for e in asked[r] if e.pool == pool)
        assert wanted <= per_pool[pool] <= wanted + lost_per_pool[pool], pool

    # The requests crossed managers: some were run by one manager while another (the
    # pool's owner) cloned their VMs and told it through its inbox.
    crossed = [r for r in ids if any(pools_then[e.pool] != holders_then[r] for e in asked[r])]
    assert crossed, (holders_then, pools_then)
    assert taken_after <= TTL + 6
    granter_now = redis_client.get(schema.lease("grants", "ondemand")) or ""
    assert any(f":{pid}:" in granter_now for pid in survivors), granter_now
    others = [m for m in managers if m is not victim]
    for m in others:
        m.send_signal(signal.SIGTERM)
    for m in others:
        assert m.wait(timeout=20) == 0
    assert all("Traceback" not in log.read_text() for log in logs if log.exists())
    assert not [k for k in redis_client.scan_iter(schema.lease("request", "*"))], (
        "a request lease outlived its request")


def pool_holders_of(client: redis.Redis) -> dict[str, int | None]:
    """pool -> pid of the manager holding its lease, for this file's pools."""
    values = client.mget([schema.lease("pool", p) for p in POOLS])
    return {p: int(v.split(" ", 1)[1].split(":")[1]) if v else None
            for p, v in zip(POOLS, values, strict=True)}
