"""The mass-failure brake in a real ``vmpooler run`` process: the dummy provider's inventory
file holds five ready VMs that are stopped, so all their ready checks fail at once."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import redis
import yaml

from tests.harness import wait_until
from tests.test_manager_process import processes, spawn  # noqa: F401 - a fixture
from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port

pytestmark = pytest.mark.integration

SICK = [f"sick-vm-{n}" for n in range(5)]


def _config(path: Path, *, redis_port: int, brake: bool) -> Path:
    inventory = [{"name": vm, "hostname": vm, "template": "a", "poolname": "a",
                  "ready": False, "dummy_state": "STOPPED", "powerstate": "PoweredOff"}
                 for vm in SICK]
    settings = {"check_loop_delay_min": 1, "check_loop_delay_max": 2, "task_limit": 20,
                "timeout": 10, "check_ready_vm_hostname_for_mismatch": False}
    if brake:
        settings["max_unhealthy"] = "40%"
    document = {
        ":config": settings,
        ":redis": {"server": "127.0.0.1", "port": redis_port},
        ":providers": {":dummy": {"provider_class": "dummy",
                                    "skip_dns_check_before_creating_vm": True,
                                    "filename": str(path.parent / "dummy.yaml")}},
        ":dns_configs": {":local": {"dns_class": "dynamic-dns", "domain": "example.test"}},
        ":pools": [{"name": "a", "size": 5, "provider": "dummy", "dns_plugin": "local"}],
    }
    (path.parent / "dummy.yaml").write_text(yaml.safe_dump({"pool": {"a": inventory}}))
    path.write_text(yaml.safe_dump(document))
    return path


def _seed(client: redis.Redis) -> None:
    """The five VMs are ready in Redis since now (never checked), but they are stopped."""
    stamp = timefmt.format_epoch(time.time())
    for vm in SICK:
        client.sadd(schema.ready("a"), vm)
        client.hset(schema.vm(vm), mapping={"template": "a", "pool": "a", "clone": stamp,
                                             "ready": stamp})


@pytest.mark.parametrize("brake", [True, False])
def test_a_mass_failure_holds_vms_in_a_real_process(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
    processes: list[subprocess.Popen[str]], brake: bool,
) -> None:
    _seed(redis_client)
    config = _config(tmp_path / "f.yaml", redis_port=redis_server.port, brake=brake)
    port = free_port()
    run = spawn(processes, "run", "--config", str(config), "--bind", f"127.0.0.1:{port}",
                cwd=tmp_path, log=tmp_path / "run.log")
    destroyed = lambda: {vm for vm in SICK  # noqa: E731
                         if redis_client.hget(schema.vm(vm), "destroy") is not None}
    if not brake:  # vmpooler's behaviour: every failing VM is destroyed and replaced
        wait_until(lambda: destroyed() == set(SICK), 30, "every sick VM destroyed")
        wait_until(lambda: redis_client.scard(schema.ready("a")) == 5, 30, "a refill")
        assert not redis_client.scard(schema.held("a"))
    else:
        wait_until(lambda: redis_client.scard(schema.held("a")) == 3, 30, "3 VMs held")
        held = set(redis_client.smembers(schema.held("a")))
        wait_until(lambda: len(destroyed()) == 2, 30, "the first 2 sick VMs destroyed")
        assert not destroyed() & held
        # Healthy clones fill the rest of the pool, and no more: held VMs are not replaced.
        wait_until(lambda: redis_client.scard(schema.ready("a")) == 2
                   and not redis_client.scard(schema.pending("a")), 30, "2 healthy clones")
        ready = set(redis_client.smembers(schema.ready("a")))
        assert not ready & set(SICK)

        def status() -> dict:  # type: ignore[type-arg]
            url = f"http://127.0.0.1:{port}/api/v3/status"
            with urllib.request.urlopen(url, timeout=10) as answer:
                return json.load(answer)

        body = wait_until(lambda: _reachable(status), 30, "the API")
        assert body["pools"]["a"]["brake"] == {"engaged": True, "failures": 5, "held": 3}
        assert body["pools"]["a"]["ready"] == 2
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=30) == 0
    log = (tmp_path / "run.log").read_text()
    assert "Traceback" not in log
    assert ("mass-failure brake engaged: 3 VMs" in log) is brake


def _reachable(read):  # type: ignore[no-untyped-def]
    try:
        return read()
    except OSError:
        return None
