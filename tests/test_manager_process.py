"""``vmpooler manager`` and ``vmpooler run`` as real processes, with the dummy provider."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml

from tests.harness import QUEUES, wait_until
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port
from vmpooler.providers.dummy_store import read_inventory

pytestmark = pytest.mark.integration

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]


def write_config(path: Path, *, redis_port: int, pools: dict[str, int], dummy: dict) -> Path:
    document = {
        ":config": {
            "check_loop_delay_min": 1, "check_loop_delay_max": 2, "task_limit": 20,
            "timeout": 10,
        },
        ":redis": {"server": "127.0.0.1", "port": redis_port},
        ":providers": {":dummy": {"provider_class": "dummy",
                                    "skip_dns_check_before_creating_vm": True, **dummy}},
        ":dns_configs": {":local": {"dns_class": "dynamic-dns", "domain": "example.test"}},
        ":pools": [
            {"name": name, "size": size, "provider": "dummy", "dns_plugin": "local"}
            for name, size in pools.items()
        ],
    }
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def spawn(processes: list[subprocess.Popen[str]], *args: str, cwd: Path | None = None,
          log: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``vmpooler *args`` (its output appended to ``log``), with ``env`` added to the
    environment; the ``processes`` fixture stops it after the test."""
    out = open(log, "a") if log else subprocess.DEVNULL  # noqa: SIM115 - closed by the process
    process = subprocess.Popen([*VMPOOLER, *args], cwd=cwd, stdout=out,
                               stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    processes.append(process)
    return process


def full(client: redis.Redis, pools: dict[str, int]) -> bool:
    return all(client.scard(schema.ready(p)) == n and not client.scard(schema.pending(p))
               for p, n in pools.items())


def accounted(client: redis.Redis, pool: str) -> dict[str, list[str]]:
    where: dict[str, list[str]] = {}
    for queue in QUEUES:
        for vm in client.smembers(getattr(schema, queue)(pool)):
            where.setdefault(vm, []).append(queue)
    return where


def test_manager_fills_pools_of_its_config_and_refills(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
    processes: list[subprocess.Popen[str]],
) -> None:
    pools = {"alpha": 3, "beta": 2}
    config = write_config(tmp_path / "f.yaml", redis_port=redis_server.port, pools=pools,
                          dummy={})
    manager = spawn(processes, "manager", "--config", str(config), log=tmp_path / "m.log")
    wait_until(lambda: full(redis_client, pools), 30, "the pools to fill")
    taken = redis_client.smembers(schema.ready("alpha"))
    for vm in taken:  # what a checkout does
        redis_client.smove(schema.ready("alpha"), schema.running("alpha"), vm)
        redis_client.hset(schema.active("alpha"), vm, "2024-05-01 13:02:11 +0000")
    wait_until(lambda: full(redis_client, pools), 30, "alpha to refill")
    assert redis_client.smembers(schema.running("alpha")) == taken
    manager.send_signal(signal.SIGTERM)
    assert manager.wait(timeout=20) == 0
    log = (tmp_path / "m.log").read_text()
    assert "Traceback" not in log
    assert "SIGTERM received, stopping" in log


def test_kill_9_mid_clone_then_restart_leaves_nothing_unaccounted(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
    processes: list[subprocess.Popen[str]],
) -> None:
    pools = {"alpha": 6, "beta": 6}
    inventory_file = tmp_path / "dummy.yaml"
    config = write_config(tmp_path / "f.yaml", redis_port=redis_server.port, pools=pools,
                          dummy={"filename": str(inventory_file), "createvm_max_time": 3})
    first = spawn(processes, "manager", "--config", str(config), log=tmp_path / "m.log")

    def cloning() -> bool:
        doc = read_inventory(inventory_file)
        states = [vm.get("dummy_state") for vms in (doc.get("pool") or {}).values()
                  for vm in vms]
        return states.count("CLONING") >= 2

    wait_until(cloning, 30, "clones to be in flight")
    first.kill()  # SIGKILL: no chance to clean up
    first.wait(timeout=10)
    spawn(processes, "manager", "--config", str(config), log=tmp_path / "m.log")

    def reconciled() -> bool:
        doc = read_inventory(inventory_file)
        for pool, vms in (doc.get("pool") or {}).items():
            where = accounted(redis_client, pool)
            if any(vm["name"] not in where for vm in vms):
                return False
        return True

    wait_until(reconciled, 30, "every inventory VM to be in a queue")
    wait_until(lambda: full(redis_client, pools), 30, "the pools to fill again")
    doc = read_inventory(inventory_file)
    for pool, vms in (doc.get("pool") or {}).items():
        where = accounted(redis_client, pool)
        for vm in vms:
            assert vm["name"] in where, f"{vm['name']} is in the provider but in no queue"
        doubled = {vm: qs for vm, qs in where.items() if len(qs) > 1}
        assert not doubled, f"VMs in two queues: {doubled}"
    assert "Traceback" not in (tmp_path / "m.log").read_text()


def test_run_on_embedded_defaults_fills_every_default_pool(
    tmp_path: Path, processes: list[subprocess.Popen[str]], repo_root: Path,
) -> None:
    env_free = {k: v for k, v in os.environ.items() if not k.startswith(("VMPOOLER", "REDIS"))}
    port = free_port()
    process = subprocess.Popen([*VMPOOLER, "run", "--bind", f"127.0.0.1:{port}"],
                               cwd=tmp_path, env=env_free,
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, text=True)
    processes.append(process)
    port_file = tmp_path / "var" / "redis" / "redis.port"
    wait_until(port_file.exists, 15, "the embedded redis-server")
    password = (tmp_path / "var" / "redis" / "redis.password").read_text()  # as README says
    client = redis.Redis(port=int(port_file.read_text()), password=password,
                         decode_responses=True)
    bundled = yaml.safe_load((repo_root / "conf" / "vmpooler.yaml").read_text())
    pools = {p["name"]: p["size"] for p in bundled[":pools"]}
    wait_until(lambda: full(client, pools), 30, "every default pool to fill")
    client.close()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v3/vm", timeout=10) as answer:
        assert json.load(answer) == list(pools)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    assert (tmp_path / "var" / "redis" / "appendonly.aof").exists()


BROKEN = {
    "missing name": ("- {size: 1}", "pools[0].name"),
    "missing size": ("- {name: p}", "pools[0].size"),
    "negative size": ("- {name: p, size: -1}", "pools[0].size"),
    "size not a number": ("- {name: p, size: five}", "pools[0].size"),
    "unknown provider": ("- {name: p, size: 1, provider: nowhere}", "pools[0].provider"),
    "unknown dns plugin": ("- {name: p, size: 1, dns_plugin: nowhere}", "pools[0].dns_plugin"),
    "duplicate pool": ("- {name: p, size: 1}\n- {name: p, size: 2}", "pools[1].name"),
    "alias not a string": ("- {name: p, size: 1, alias: {a: 1}}", "pools[0].alias"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
@pytest.mark.parametrize("command", ["check-config", "manager"])
def test_broken_config_exits_non_zero_naming_the_key(
    tmp_path: Path, case: str, command: str,
) -> None:
    pools, key = BROKEN[case]
    config = tmp_path / "broken.yaml"
    config.write_text(f":config:\n  task_limit: 2\n:pools:\n{pools}\n")
    result = subprocess.run([*VMPOOLER, command, "--config", str(config)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert key in result.stderr
    assert str(config) in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_vmpoolers_integration_spec_pools_load_with_a_warning(tmp_path: Path) -> None:
    """'pool2' is a pool and an alias of 'pool1' (vmpooler's spec/integration pools)."""
    config = tmp_path / "spec.yaml"
    config.write_text(":pools:\n- {name: pool1, size: 1, alias: [poolone, pool2, genericpool]}\n"
                      "- {name: pool2, size: 1}\n- {name: pool3, size: 1, alias: genericpool}\n")
    result = subprocess.run([*VMPOOLER, "check-config", "--config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "'pool2' is also the name of a pool" in result.stderr + result.stdout


def test_unknown_provider_class_is_reported(tmp_path: Path) -> None:
    config = tmp_path / "broken.yaml"
    config.write_text(":providers:\n  :cloud:\n    provider_class: nosuch\n"
                      ":pools:\n- {name: p, size: 1, provider: cloud}\n")
    result = subprocess.run([*VMPOOLER, "check-config", "--config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "provider_class" in result.stderr and "Traceback" not in result.stderr


def test_check_config_prints_effective_config_with_secrets_masked(tmp_path: Path) -> None:
    config = tmp_path / "ok.yaml"
    config.write_text(":redis:\n  server: redis.example\n  password: hunter2\n"
                      ":pools:\n- {name: p, size: 1}\n")
    result = subprocess.run([*VMPOOLER, "check-config", "--config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "hunter2" not in result.stdout
    assert "redis.example" in result.stdout
    effective = yaml.safe_load(result.stdout)
    assert effective[":config"]["task_limit"] == 10


def test_version() -> None:
    result = subprocess.run([*VMPOOLER, "--version"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stdout.startswith("vmpooler ")


def test_logfile_gets_vmpooler_formatted_lines(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
    processes: list[subprocess.Popen[str]],
) -> None:
    config = write_config(tmp_path / "f.yaml", redis_port=redis_server.port,
                          pools={"alpha": 1}, dummy={})
    document = yaml.safe_load(config.read_text())
    document[":config"]["logfile"] = str(tmp_path / "vmpooler.log")
    config.write_text(yaml.safe_dump(document))
    manager = spawn(processes, "manager", "--config", str(config))
    wait_until(lambda: full(redis_client, {"alpha": 1}), 30)
    manager.send_signal(signal.SIGTERM)
    assert manager.wait(timeout=20) == 0
    lines = (tmp_path / "vmpooler.log").read_text().splitlines()
    assert any("moved from 'pending' to 'ready'" in line for line in lines)
    import re
    assert all(re.match(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ", line) for line in lines)


def test_unwritable_logfile_is_a_clear_error(tmp_path: Path) -> None:
    config = tmp_path / "f.yaml"
    config.write_text(f":config:\n  logfile: {tmp_path}/no/such/dir/x.log\n"
                      ":pools:\n- {name: p, size: 0}\n")
    result = subprocess.run([*VMPOOLER, "manager", "--config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "logfile" in result.stderr and "Traceback" not in result.stderr
