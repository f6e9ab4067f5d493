"""Helpers for benchmarks that run real ``vmpooler manager`` processes on one Redis.

* :func:`write_config`: a manager's YAML config (the dummy provider at zero delay, the
  settings of ``bench/fill.py``, metrics as plain statsd to the benchmark's UDP port under a
  prefix of the manager's own, so pool cycles are counted per manager);
* :class:`Manager`: one ``vmpooler manager --config FILE`` subprocess, optionally in a UTS
  namespace of its own (``unshare --uts``) with a host name of its own, so the others see it
  as a manager of another host; its RSS, peak RSS, threads and CPU from ``/proc``;
* :class:`CycleCounter`: a statsd listener counting ``vmpooler_performance.check_pool``
  gauges (one per pool cycle, the definition of ``bench/fill.py``) per manager and pool;
* :class:`LogWatch`: reads a manager's log incrementally and notes when markers appear;
* :func:`pool_counts`, :func:`lease_holders`, :func:`ready_members`: pipelined reads of the
  pools' queues and leases (one round trip each), counting the commands sent, so a phase's
  figures can leave them out.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import redis
import yaml

from vmpooler.actors.storage import schema

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]
# Environment handed to every manager: nothing of vmpooler's overrides (REDIS_SERVER, ...).
ENV_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "VIRTUAL_ENV")
CHECK_POOL = b"vmpooler_performance.check_pool."


def pool_names(pools: int) -> list[str]:
    return [f"bench-{i:04d}" for i in range(pools)]


def write_config(path: Path, *, redis_port: int, pools: int, size: int, task_limit: int,
                 statsd_port: int, prefix: str, settings: dict[str, Any]) -> Path:
    """Write one manager's config: ``pools`` pools of ``size`` on the dummy provider (its
    inventory in the process's memory: no ``filename``), every sample of its metrics sent as
    statsd to ``127.0.0.1:statsd_port`` under ``prefix``."""
    document = {
        ":config": {**settings, "task_limit": task_limit},
        ":redis": {"server": "127.0.0.1", "port": redis_port},
        ":statsd": {"server": "127.0.0.1", "port": statsd_port, "prefix": prefix},
        ":providers": {":dummy": {"provider_class": "dummy",
                                    "skip_dns_check_before_creating_vm": True}},
        ":pools": [{"name": name, "size": size, "template": f"tpl-{name}", "ready_ttl": 600,
                    "provider": "dummy"} for name in pool_names(pools)],
    }
    path.write_text(yaml.safe_dump(document))
    return path


def separate_hosts_available() -> bool:
    """Whether managers can run in UTS namespaces of their own (root and ``unshare``)."""
    return os.geteuid() == 0 and shutil.which("unshare") is not None


class Manager:
    """One ``vmpooler manager`` process; ``hostname`` (with root) runs it in a UTS namespace
    of its own under that name (``unshare --uts``, no other namespace: the pid is the same)."""

    def __init__(self, name: str, config: Path, log: Path, hostname: str | None = None) -> None:
        self.name = name
        self.log = log
        self.hostname = hostname or socket.gethostname()
        cmd = [*VMPOOLER, "manager", "--config", str(config)]
        if hostname:
            cmd = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname, *cmd]
        env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
        env["PYTHONUNBUFFERED"] = "1"
        self.started = time.monotonic()
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.pid = self.proc.pid
        self._ps = psutil.Process(self.pid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def cpu_seconds(self) -> float:
        t = self._ps.cpu_times()
        return t.user + t.system

    def resources(self) -> dict[str, Any]:
        """RSS, peak RSS (MiB), kernel threads and CPU seconds so far."""
        status: dict[str, int] = {}
        with open(f"/proc/{self.pid}/status") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    status[key] = round(int(value.split()[0]) / 1024)
                elif key == "Threads":
                    status[key] = int(value)
        return {"rss_mib": status.get("VmRSS"), "peak_rss_mib": status.get("VmHWM"),
                "threads": status.get("Threads"), "cpu_seconds": round(self.cpu_seconds(), 2)}

    def kill(self) -> None:
        """SIGKILL, and reap it (a zombie's pid would still look alive)."""
        self.proc.kill()
        self.proc.wait()

    def stop(self, grace: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class LogWatch:
    """Reads a log file from where it last stopped; ``seen[marker]`` is the monotonic time a
    marker was first found (at the granularity of :meth:`poll`)."""

    def __init__(self, path: Path, markers: tuple[str, ...]) -> None:
        self.path = path
        self.markers = tuple(m.encode() for m in markers)
        self.offset = 0
        self.rest = b""
        self.seen: dict[str, float] = {}

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return
        self.offset += len(data)
        text, _, self.rest = (self.rest + data).rpartition(b"\n")
        now = time.monotonic()
        for marker in self.markers:
            if marker.decode() not in self.seen and marker in text:
                self.seen[marker.decode()] = now


class CycleCounter:
    """Listens for statsd datagrams on a free loopback UDP port (``port``) and counts the
    ``check_pool`` gauges (pool cycles) by (prefix, pool). Thread-safe; stop with :meth:`close`."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:  # a deep buffer: the benchmark's own thread may lag behind a burst
            self.sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33),
                                 16 << 20)
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self._lock = threading.Lock()
        self.cycles: Counter[tuple[str, str]] = Counter()
        self.datagrams = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="statsd-counter", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            found = []
            for line in data.split(b"\n"):
                at = line.find(CHECK_POOL)
                if at > 0:  # <prefix>.vmpooler_performance.check_pool.<pool>:<ms>|g
                    pool = line[at + len(CHECK_POOL):].partition(b":")[0]
                    found.append((line[:at - 1].decode(), pool.decode()))
            with self._lock:
                self.datagrams += 1
                self.cycles.update(found)

    def snapshot(self) -> Counter[tuple[str, str]]:
        with self._lock:
            return Counter(self.cycles)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


def pool_counts(client: redis.Redis, names: list[str],
                own: Counter[str] | None = None) -> list[tuple[int, int]]:
    """(ready, pending) of every pool, in one pipelined round trip."""
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.scard(schema.ready(name))
        pipe.scard(schema.pending(name))
    r = pipe.execute()
    if own is not None:
        own["scard"] += 2 * len(names)
    return [(r[i], r[i + 1]) for i in range(0, len(r), 2)]


def lease_holders(client: redis.Redis, names: list[str],
                  own: Counter[str] | None = None) -> dict[str, str | None]:
    """pool -> holder of its lease (the manager id ``host:pid:started``; None: free)."""
    values = client.mget([schema.lease("pool", n) for n in names])
    if own is not None:
        own["mget"] += 1
    return {n: (v.partition(" ")[2] if v else None) for n, v in zip(names, values, strict=True)}


def holder_pid(holder: str | None) -> int | None:
    """The pid in a manager id ``host:pid:started``."""
    if not holder:
        return None
    pid = holder.rsplit(":", 2)[-2]
    return int(pid) if pid.isdigit() else None


def ready_members(client: redis.Redis, names: list[str],
                  own: Counter[str] | None = None) -> dict[str, set[str]]:
    """pool -> its ready VMs, in one pipelined round trip."""
    if not names:
        return {}
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.smembers(schema.ready(name))
    if own is not None:
        own["smembers"] += len(names)
    return dict(zip(names, pipe.execute(), strict=True))
