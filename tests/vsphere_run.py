"""``vmpooler run`` on the vCenter simulator as a real process, for the vSphere process
tests: its configuration (vSphere pools in ``vmpooler/<pool>`` folders of the simulator's
template), the process itself, stopped afterwards, and what Redis and vCenter hold of the
pools (:func:`in_sync`, :func:`orphans`)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import redis
import yaml

from tests import vcsim
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import free_port


def write_config(path: Path, sim: vcsim.Simulator, redis_port: int, *,
                 pools: Mapping[str, Mapping[str, Any]], size: int,
                 config: Mapping[str, Any]) -> Path:
    """A configuration at ``path``: each of ``pools`` (name -> its own keys) of ``size``
    VMs on the simulator, short loops, a breaker of 3 failures, the log beside ``path``;
    ``config`` adds to or overrides ``:config:``."""
    document = {
        ":config": {
            "check_loop_delay_min": 1, "check_loop_delay_max": 2,
            "max_tries": 1, "retry_factor": 0,
            "circuit_breaker_failure_threshold": 3,
            "circuit_breaker_half_open_attempts": 1, "connection_pool_monitor_interval": 1,
            "logfile": str(path.parent / "vmpooler.log"),
            **config,
        },
        ":redis": {"server": "127.0.0.1", "port": redis_port},
        ":providers": {":vsphere": {
            "server": "127.0.0.1", "port": sim.port, "username": sim.username,
            "insecure": True, "datacenter": "DC0", "vm_ready_check": "guest_tools",
            "skip_dns_check_before_creating_vm": True,
        }},
        ":dns_configs": {":lab": {"dns_class": "dynamic-dns", "domain": "vmpooler.test"}},
        ":pools": [
            {"name": name, "size": size, "provider": "vsphere", "dns_plugin": "lab",
             "template": vcsim.TEMPLATE, "folder": f"vmpooler/{name}",
             "datastore": vcsim.DATASTORE, "clone_target": vcsim.CLUSTER, **extra}
            for name, extra in pools.items()
        ],
    }
    path.write_text(yaml.safe_dump(document))
    return path


@contextlib.contextmanager
def running(config: Path, sim: vcsim.Simulator) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """``vmpooler run --config config`` with the simulator's password, serving on a free
    port: ``(process, port)``; its output in ``run.out`` beside ``config``. Terminated
    (killed after 20 s) on the way out."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "VMPOOLER_PROVIDER_VSPHERE_PASSWORD": sim.password}
    with open(config.parent / "run.out", "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "vmpooler.web.cli", "run", "--config", str(config),
             "--bind", f"127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT, text=True,
            env=env)
        try:
            yield process, port
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def log_lines(path: Path, text: str) -> list[str]:
    """The lines of the log at ``path`` containing ``text``."""
    return [line for line in path.read_text().splitlines() if text in line]


def in_sync(client: redis.Redis, si: object, pools: Iterable[str], size: int) -> bool:
    """Every pool full (``size`` ready), nothing pending, and each pool's folder in vCenter
    holding exactly its ready VMs: no VM leaked either way."""
    return all(
        client.scard(schema.ready(p)) == size and not client.scard(schema.pending(p))
        and vcsim.vm_names(si, f"vmpooler/{p}") == client.smembers(schema.ready(p))
        for p in pools)


def orphans(client: redis.Redis, si: object, pools: Iterable[str]) -> set[str]:
    """VMs Redis holds as pending or ready that the vCenter lacks."""
    missing: set[str] = set()
    for pool in pools:
        held = client.smembers(schema.pending(pool)) | client.smembers(schema.ready(pool))
        missing |= held - vcsim.vm_names(si, f"vmpooler/{pool}")
    return missing
