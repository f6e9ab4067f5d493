"""On-demand requests end to end: ``vmpooler api`` (gunicorn, 2 workers) and ``vmpooler
manager`` as separate processes over the session's redis-server, spoken to over real HTTP.

Fifty requests of 1-5 VMs: ten ask for a pool whose VMs never become ready (a second dummy
provider with ``vmready_fail_percent: 100``) and must fail at ``ondemand_request_ttl``; ten
are deleted over HTTP while one of their VMs is being cloned; the other thirty (a pool, an
alias over two pools, or both pools) must become ready. ``ondemand_request_ttl`` is in whole
minutes, so the expiring requests are created first and the rest is done while they wait:
the file takes a little over a minute.
"""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.harness import wait_until
from tests.test_api_processes import call
from tests.test_manager_process import accounted, spawn, write_config
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port
from vmpooler.providers.dummy_store import read_inventory

pytestmark = pytest.mark.integration

GOOD = ("good-a", "good-b")  # both carry the alias "good"; the dummy clones in 1-2 s
NEVER = "never"  # provider "stuck": vm_ready always raises, so its VMs stay pending
POOLS = (*GOOD, NEVER)
ALIAS = "good"
DOMAIN = "example.test"
TTL_MINUTES = 1


@dataclass
class Stack:
    base: str
    inventories: tuple[Path, ...]
    logs: tuple[Path, ...]
    processes: list[subprocess.Popen[str]] = field(default_factory=list)


def _config(tmp_path: Path, redis_port: int) -> tuple[Path, tuple[Path, Path]]:
    good_file, stuck_file = tmp_path / "dummy-good.yaml", tmp_path / "dummy-stuck.yaml"
    path = write_config(tmp_path / "ondemand.yaml", redis_port=redis_port,
                        pools=dict.fromkeys(POOLS, 0),
                        dummy={"filename": str(good_file), "createvm_max_time": 2})
    document = yaml.safe_load(path.read_text())
    document[":config"].update({"ondemand_request_ttl": TTL_MINUTES,
                                "ondemand_request_grace": 0})
    document[":providers"][":stuck"] = {
        "provider_class": "dummy", "skip_dns_check_before_creating_vm": True,
        "filename": str(stuck_file), "vmready_fail_percent": 100,
    }
    for pool in document[":pools"]:
        if pool["name"] in GOOD:
            pool["alias"] = [ALIAS]
        if pool["name"] == NEVER:
            pool["provider"] = "stuck"
    path.write_text(yaml.safe_dump(document))
    return path, (good_file, stuck_file)


@pytest.fixture
def stack(tmp_path: Path, redis_server: EmbeddedRedis,
          redis_client: redis.Redis) -> Iterator[Stack]:
    """A manager and a 2-worker API, started together (the API answers first)."""
    config, inventories = _config(tmp_path, redis_server.port)
    port = free_port()
    running = Stack(f"http://127.0.0.1:{port}/api/v3", inventories,
                    (tmp_path / "manager.log", tmp_path / "api.log"))
    spawn(running.processes, "manager", "--config", str(config), log=running.logs[0])
    spawn(running.processes, "api", "--config", str(config), "--bind", f"127.0.0.1:{port}",
          "--workers", "2", log=running.logs[1])

    def answering() -> bool:
        try:
            return call("GET", f"{running.base}/vm")[0] == 200
        except OSError:
            return False

    try:
        wait_until(answering, 30, "the API to answer")
        yield running
    finally:
        for process in running.processes:
            process.terminate()
        for process in running.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _inventory(paths: tuple[Path, ...]) -> dict[str, set[str]]:
    """pool -> VM names, as the dummy providers' persistence files hold them."""
    found: dict[str, set[str]] = {}
    for path in paths:
        document = read_inventory(path)
        for pool, vms in (document.get("pool") or {}).items():
            found.setdefault(pool, set()).update(vm["name"] for vm in vms or [])
    return found


def _vms_by_request(client: redis.Redis) -> dict[str, set[str]]:
    """request id -> every VM ever cloned for it (the VM hashes outlive the VMs)."""
    owners: dict[str, set[str]] = {}
    for key in client.scan_iter(match=schema.vm("*"), count=1000):
        owner = client.hget(key, "request_id")
        if owner:
            owners.setdefault(owner, set()).add(key.removeprefix(schema.vm("")))
    return owners


def _post(base: str, order: dict[str, int]) -> str:
    status, body = call("POST", f"{base}/ondemandvm", order)
    assert status == 201, (order, body)
    return str(body["request_id"])


@pytest.mark.timeout(TTL_MINUTES * 60 + 60)
def test_fifty_requests_end_ready_failed_or_deleted_with_nothing_left_behind(
    stack: Stack, redis_client: redis.Redis,
) -> None:
    base = stack.base
    sizes = itertools.cycle([1, 2, 3, 4, 5])
    started = time.monotonic()
    wanted: dict[str, dict[str, int]] = {}  # id -> order
    expiring = []
    for _ in range(10):  # first: their TTL is what the test waits for
        order = {NEVER: next(sizes)}
        request_id = _post(base, order)
        expiring.append(request_id)
        wanted[request_id] = order
    ready = []
    for i in range(30):
        n = next(sizes)
        order = ({ALIAS: n}, {"good-a": n}, {"good-a": max(1, n - 2), "good-b": 2})[i % 3]
        request_id = _post(base, order)
        ready.append(request_id)
        wanted[request_id] = order
    doomed = []
    for i in range(10):
        order = {ALIAS if i % 2 else NEVER: next(sizes)}
        request_id = _post(base, order)
        doomed.append(request_id)
        wanted[request_id] = order
    intended = {**dict.fromkeys(expiring, "failed"), **dict.fromkeys(ready, "ready"),
                **dict.fromkeys(doomed, "deleted")}

    # Delete each doomed request while one of its VMs is being cloned or booting.
    deleted: set[str] = set()

    def delete_in_flight() -> bool:
        owners = _vms_by_request(redis_client)  # the slow part first: pending is fresh
        in_pending = {vm for pool in POOLS for vm in redis_client.smembers(schema.pending(pool))}
        for request_id in doomed:
            if request_id in deleted or not owners.get(request_id, set()) & in_pending:
                continue
            status, body = call("GET", f"{base}/ondemandvm/{request_id}")
            assert status == 202, (request_id, body)  # still provisioning
            status, body = call("DELETE", f"{base}/ondemandvm/{request_id}")
            assert (status, body) == (200, {"ok": True}), (request_id, body)
            deleted.add(request_id)
        return len(deleted) == len(doomed)

    wait_until(delete_in_flight, 30, "every doomed request to have a VM in flight")

    statuses: dict[str, str] = {}
    answers: dict[str, Any] = {}

    def all_terminal() -> bool:
        for request_id in wanted.keys() - statuses.keys():
            status, body = call("GET", f"{base}/ondemandvm/{request_id}")
            state = redis_client.hget(schema.odrequest(request_id), "status")
            if status == 200 and state:
                statuses[request_id], answers[request_id] = state, body
        return len(statuses) == len(wanted)

    try:
        wait_until(all_terminal, TTL_MINUTES * 60 + 30,
                   "every request to be ready, failed or deleted")
    except AssertionError as error:  # say which requests, and what the manager was doing
        stuck = {rid: redis_client.hgetall(schema.odrequest(rid))
                 for rid in wanted.keys() - statuses.keys()}
        tail = stack.logs[0].read_text().splitlines()[-60:]
        raise AssertionError(f"{error}\nnot finished: {stuck}\nmanager log:\n"
                             + "\n".join(tail)) from None
    assert statuses == intended

    for request_id in expiring:
        reason = redis_client.hget(schema.odrequest(request_id), "failure_reason") or ""
        assert "ondemand_request_ttl" in reason, (request_id, reason)
        assert answers[request_id]["ready"] is False
    for request_id in doomed:
        assert answers[request_id]["message"] == "The request has been deleted"

    running = {pool: redis_client.smembers(schema.running(pool)) for pool in POOLS}
    delivered_vms: set[str] = set()
    for request_id in ready:
        body = answers[request_id]
        assert body["ready"] is True
        for name, count in wanted[request_id].items():
            hostnames = body[name]["hostname"]
            assert len(hostnames) == count, (request_id, name, body)
            assert all(h.endswith(f".{DOMAIN}") for h in hostnames), hostnames
            pools = GOOD if name == ALIAS else (name,)
            vms = {h.removesuffix(f".{DOMAIN}") for h in hostnames}
            assert len(vms) == count
            for vm in vms:
                assert any(vm in running[pool] for pool in pools), (request_id, vm)
            assert not vms & delivered_vms, "a VM was delivered to two requests"
            delivered_vms |= vms

    owners = _vms_by_request(redis_client)
    for request_id in (*expiring, *doomed):
        for pool in POOLS:
            leaked = owners.get(request_id, set()) & (
                redis_client.smembers(schema.running(pool))
                | redis_client.smembers(schema.ready(pool)))
            assert not leaked, f"{request_id} ({statuses[request_id]}): {leaked} in {pool}"
    for pool in POOLS:
        doubled = {vm: qs for vm, qs in accounted(redis_client, pool).items() if len(qs) > 1}
        assert not doubled, f"VMs in two queues: {doubled}"

    # The manager destroys what was retired; then the providers hold exactly the delivered VMs.
    def reaped() -> bool:
        if any(redis_client.scard(getattr(schema, queue)(pool))
               for pool in POOLS for queue in ("pending", "completed")):
            return False
        held = set().union(*_inventory(stack.inventories).values())
        return held == delivered_vms

    with contextlib.suppress(AssertionError):  # on timeout, the asserts below say what is left
        wait_until(reaped, 30, "retired VMs to be destroyed")
    for pool in POOLS:
        for queue in ("pending", "completed"):
            left = redis_client.smembers(getattr(schema, queue)(pool))
            assert not left, f"still in {queue} of {pool}: {left}"
    for pool, vms in _inventory(stack.inventories).items():
        where = accounted(redis_client, pool)
        unaccounted = {vm for vm in vms if vm not in where}
        assert not unaccounted, f"in provider pool {pool} but in no queue: {unaccounted}"
        assert vms == running[pool]
    assert set().union(*running.values()) == delivered_vms
    assert redis_client.zcard(schema.provisioning_request()) == 0
    assert redis_client.zcard(schema.provisioning_processing()) == 0
    assert time.monotonic() - started < TTL_MINUTES * 60 + 30
    for log in stack.logs:
        assert "Traceback" not in log.read_text(), log
