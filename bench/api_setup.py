"""What one run of ``bench/api.py`` stands on: its settings and targets, the configuration
and the Redis seed it serves, the CPU and Redis counters it reads, and :class:`Server`, one
served API (``vmpooler api``, the bare app, or a baseline build) and its processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import redis
import yaml

from vmpooler.actors.storage import schema, timefmt

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
API_PREFIX = "/api/v3"
DOMAIN = "example.test"

TARGET_RATIO = 0.5                 # vmpooler checkout throughput / bare throughput
TARGET_ROUND_TRIPS = 1.0           # Redis round trips per checkout
VMPOOLER_391_STATUS_RPS = 45.0     # vmpooler 3.9.1, /status on a cache miss (from the issue)
TARGET_STATUS_RPS = 10 * VMPOOLER_391_STATUS_RPS
TARGET_STATUS_P99_MS = 50.0
# vmpooler 3.9.1 on this size of machine (from the issue): checkouts/s and p99 (ms)
VMPOOLER_391_CHECKOUT = {8: (115.0, 500.0), 32: (120.0, 3300.0)}

_OWN_COMMANDS = {"info", "config"}  # the benchmark's own reads of the statistics
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- Redis seeding ------------------------------------------------------------------------------
def pool_names(pools: int) -> list[str]:
    return [f"bench-{i:03d}" for i in range(pools)]


def write_config(path: Path, redis_port: int, sizes: dict[str, int],
                 logfile: Path | None = None) -> Path:
    """A vmpooler config in the style of tests/test_manager_process.py::write_config;
    ``logfile`` sets ``:config: logfile`` (Ruby vmpooler refuses to start without it)."""
    settings: dict[str, Any] = {"check_loop_delay_min": 1, "check_loop_delay_max": 5,
                                "task_limit": 10, "timeout": 10}
    if logfile is not None:
        settings["logfile"] = str(logfile)
    document = {
        ":config": settings,
        ":redis": {"server": "127.0.0.1", "port": redis_port},
        ":providers": {":dummy": {"provider_class": "dummy",
                                    "skip_dns_check_before_creating_vm": True}},
        ":dns_configs": {":local": {"dns_class": "dynamic-dns", "domain": DOMAIN}},
        ":pools": [{"name": name, "size": size, "provider": "dummy", "dns_plugin": "local"}
                   for name, size in sizes.items()],
    }
    path.write_text(yaml.safe_dump(document))
    return path


def _now_text() -> str:
    return time.strftime(timefmt.RUBY_FORMAT, time.gmtime())


def seed_pool(client: redis.Redis, pool: str, count: int, tag: str) -> list[str]:
    """``count`` ready VMs in ``pool``, each with its hash, as the manager leaves them."""
    now = _now_text()
    names = [f"{tag}{i:06d}" for i in range(count)]
    for start in range(0, count, 2000):
        chunk = names[start:start + 2000]
        pipe = client.pipeline(transaction=False)
        pipe.sadd(schema.ready(pool), *chunk)
        for name in chunk:
            pipe.hset(schema.vm(name), mapping={
                "clone": now, "template": pool, "pool": pool, "domain": DOMAIN,
                "clone_time": "1.5", "ip": "192.0.2.1", "ready": now, "check": now})
        pipe.execute()
    return names


def seed_all(client: redis.Redis, sizes: dict[str, int]) -> dict[str, list[str]]:
    now = _now_text()
    today = timefmt.date_bucket(time.time())
    seeded = {}
    for index, (pool, size) in enumerate(sizes.items()):
        seeded[pool] = seed_pool(client, pool, size, f"p{index:03d}r00v")
    pipe = client.pipeline(transaction=False)
    for pool, names in seeded.items():
        pipe.hset(schema.lastboot(), pool, now)
        for name in names[:5]:
            pipe.hset(schema.boot_stats(today), f"{pool}:{name}", "12.5")
            pipe.hset(schema.clone_stats(today), f"{pool}:{name}", "1.5")
    pipe.execute()
    return seeded


def reset_hot(client: redis.Redis, pool: str, count: int, old: list[str],
              round_no: int) -> list[str]:
    """Empty the hot pool's queues, forget its old VMs, seed ``count`` fresh ready VMs."""
    pipe = client.pipeline(transaction=False)
    for key in (schema.ready(pool), schema.running(pool), schema.active(pool),
                schema.migrating(pool), schema.completed(pool)):
        pipe.delete(key)
    for start in range(0, len(old), 5000):
        pipe.unlink(*[schema.vm(n) for n in old[start:start + 5000]])
    pipe.delete(schema.commands())
    pipe.execute()
    return seed_pool(client, pool, count, f"hot{round_no:02d}v")


def command_stats(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()
            if k.removeprefix("cmdstat_") not in _OWN_COMMANDS}


def reads_processed(client: redis.Redis) -> int:
    """redis-server's socket reads so far (this INFO's own read included)."""
    return int(client.info("stats")["total_reads_processed"])


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


# -- servers --------------------------------------------------------------------------------------
def machine_busy() -> float:
    """CPU seconds (all cores) the machine spent busy since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


class Server:
    """A gunicorn master (a subprocess) and its workers."""

    def __init__(self, name: str, cmd: list[str], port: int, probe_path: str,
                 log_path: Path, workers: int) -> None:
        self.name = name
        self.expected_workers = workers
        self.cmd = cmd
        self.port = port
        self.probe_path = probe_path
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> Server:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("REDIS_", "VMPOOLER_")) and k != "PORT"}
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.cmd, cwd=ROOT, stdout=log,
                                            stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.port}{self.probe_path}"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"{self.name} exited with {self.process.returncode}; "
                                 f"see {self.log_path}:\n{self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    answer.read()
                answered = True
            except urllib.error.HTTPError:
                answered = True  # any HTTP status (405 for a GET on a POST route) is an answer
            except OSError:
                answered = False
            if answered and len(self.workers()) >= self.expected_workers:
                return self
            time.sleep(0.1)
        raise SystemExit(f"{self.name} did not answer {url} within {timeout:.0f}s")

    def workers(self) -> list[int]:
        return _children(self.process.pid) if self.process else []

    def cpu_by_worker(self) -> dict[int, float]:
        """CPU seconds used so far by each worker (the master only supervises)."""
        return {pid: _cpu_of(pid) for pid in self.workers()}

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        workers = _children(process.pid)
        process.terminate()  # gunicorn: graceful stop of the workers, then the master exits
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # its own session: only its workers
            process.wait()
        for pid in workers:  # never leave a worker behind, even if the master died first
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
