"""The dummy provider's inventory under a steady mixed load: in memory against shared.

``vmpooler run`` as a real process (its own redis-server, ``--pools`` dummy pools of
``--size`` VMs, clones and destroys of 1 s as in ``conf/vmpooler.yaml``, ``task_limit``
10), once with the in-memory inventory and once with ``filename`` set (the inventory shared
by processes, as in ``compose.yaml``), one after the other in this run; with ``--before
DIR`` (the folders of an older build, as ``git archive`` writes them) also ``file-before``:
the shared inventory of that build's code, run from a temporary ``vmpooler/`` first on
``PYTHONPATH`` whose folders link to DIR's (as ``bench/same_behaviour.py`` does). Against
each, a client keeps ``--rate`` operations a second for ``--duration`` seconds, in the
repeating mix: checkout, tag it, return one held VM, GET /status, checkout, tag, return,
POST /ondemandvm of 1 or 2 VMs (alternately). Each on-demand request is then polled every
0.5 s until ready, for at most ``--ready-timeout`` seconds (the VMs it got are kept, as a
test run would hold them, so the inventory grows as it does for a site). Reported per
variant: on-demand time to ready (median, p99; a request not ready counts at the timeout),
the share not ready within the timeout, checkout latency (median, p99) and its failures,
the inventory's size at the end, and the CPU seconds of ``vmpooler run`` and its children.

    .venv/bin/python bench/dummy_inventory.py                 # 2 x (240 s + drain), ~10 min
    .venv/bin/python bench/dummy_inventory.py --quick         # 2 x (15 s + drain), ~1 min
    .venv/bin/python bench/dummy_inventory.py --json out.json --variants memory,file
    mkdir /tmp/old && git archive d398a24 actors web providers conf | tar -x -C /tmp/old
    .venv/bin/python bench/dummy_inventory.py --before /tmp/old         # 3 variants, ~18 min
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port
from vmpooler.providers.dummy_store import read_inventory

MIX = ("checkout", "tag", "return", "status", "checkout", "tag", "return", "ondemand")


class Client:
    """JSON over one keep-alive HTTP connection per thread."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.local = threading.local()

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """``(status, parsed body)``; ``(0, error)`` when nothing answers."""
        for _attempt in range(2):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                                    timeout=30)
            try:
                payload = None if body is None else json.dumps(body)
                conn.request(method, f"/api/v3{path}", body=payload,
                             headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                raw = response.read()
                try:
                    return response.status, json.loads(raw)
                except ValueError:
                    return response.status, raw.decode("utf-8", "replace")
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self.local.conn = None
                error = str(exc)
        return 0, error


class Load:
    """The mixed load against one running ``vmpooler run``; figures from :meth:`report`."""

    def __init__(self, client: Client, pools: list[str], ready_timeout: float) -> None:
        self.client, self.pools, self.ready_timeout = client, pools, ready_timeout
        self.lock = threading.Lock()
        self.held: list[str] = []
        self.checkouts: list[float] = []
        self.checkout_failures = 0
        self.ondemand: list[float | None] = []  # seconds to ready; None: not in time
        self.errors: dict[str, int] = {}
        self.pool_cycle = itertools.cycle(pools)
        self.size_cycle = itertools.cycle((1, 2))

    def _error(self, what: str) -> None:
        with self.lock:
            self.errors[what] = self.errors.get(what, 0) + 1

    def checkout(self) -> None:
        pool = next(self.pool_cycle)
        started = time.monotonic()
        status, body = self.client.call("POST", f"/vm/{pool}")
        elapsed = time.monotonic() - started
        with self.lock:
            self.checkouts.append(elapsed)
            if status == 200 and isinstance(body, dict) and body.get("ok"):
                hostname = body[pool]["hostname"]
                name = hostname if isinstance(hostname, str) else hostname[0]
                self.held.append(name.split(".")[0])
            else:
                self.checkout_failures += 1

    def tag(self) -> None:
        with self.lock:
            name = self.held[-1] if self.held else None
        if name is not None:
            status, _ = self.client.call("PUT", f"/vm/{name}", {"tags": {"bench": "mixed"}})
            if status != 200:
                self._error(f"tag {status}")

    def give_back(self) -> None:
        with self.lock:
            name = self.held.pop(0) if self.held else None
        if name is not None:
            status, _ = self.client.call("DELETE", f"/vm/{name}")
            if status != 200:
                self._error(f"return {status}")

    def status(self) -> None:
        status, _ = self.client.call("GET", "/status")
        if status != 200:
            self._error(f"status {status}")

    def request(self) -> None:
        with self.lock:
            pool, count = next(self.pool_cycle), next(self.size_cycle)
        started = time.monotonic()
        status, body = self.client.call("POST", "/ondemandvm", {pool: count})
        if status != 201 or not isinstance(body, dict):
            self._error(f"ondemand {status}")
            return
        request_id = body["request_id"]
        deadline = started + self.ready_timeout
        while time.monotonic() < deadline:
            status, body = self.client.call("GET", f"/ondemandvm/{request_id}")
            if status == 200 and isinstance(body, dict) and body.get("ready"):
                with self.lock:
                    self.ondemand.append(time.monotonic() - started)
                return
            time.sleep(0.5)
        with self.lock:
            self.ondemand.append(None)

    def run(self, rate: float, duration: float) -> None:
        """Issue the mix at ``rate`` a second for ``duration`` s, then wait for the polls."""
        actions: dict[str, Callable[[], None]] = {
            "checkout": self.checkout, "tag": self.tag, "return": self.give_back,
            "status": self.status, "ondemand": self.request}
        ops = int(rate * duration)
        with ThreadPoolExecutor(max_workers=256) as workers:
            started = time.monotonic()
            for n, op in zip(range(ops), itertools.cycle(MIX), strict=False):
                pause = started + n / rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                workers.submit(actions[op])

    def report(self) -> dict[str, Any]:
        """The figures of the run (seconds)."""
        waits = [self.ready_timeout if w is None else w for w in self.ondemand]
        late = sum(1 for w in self.ondemand if w is None)
        return {
            "ondemand_requests": len(self.ondemand),
            "ondemand_median_s": _quantile(waits, 0.5),
            "ondemand_p99_s": _quantile(waits, 0.99),
            "ondemand_not_ready": late,
            "ondemand_not_ready_share": round(late / len(waits), 3) if waits else None,
            "checkouts": len(self.checkouts),
            "checkout_failures": self.checkout_failures,
            "checkout_median_ms": _ms(_quantile(self.checkouts, 0.5)),
            "checkout_p99_ms": _ms(_quantile(self.checkouts, 0.99)),
            "errors": dict(self.errors),
        }


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 3)
    return round(statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]
                 if q < 1 else max(values), 3)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its live descendants (gunicorn's)."""
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
    tree, grew = {pid}, True
    while grew:
        more = {p for p, f in stats.items() if int(f[1]) in tree} - tree
        tree |= more
        grew = bool(more)
    ticks = sum(int(stats[p][11]) + int(stats[p][12]) for p in tree if p in stats)
    return ticks / os.sysconf("SC_CLK_TCK")


def package_of(checkout: Path, work: Path) -> str:
    """A directory that, first on ``PYTHONPATH``, makes ``vmpooler`` the checkout's code."""
    shim = work / "before-package"
    (shim / "vmpooler").mkdir(parents=True)
    (shim / "vmpooler" / "__init__.py").write_text("")
    for name in ("actors", "web", "providers", "conf"):
        (shim / "vmpooler" / name).symlink_to(checkout.resolve() / name)
    return str(shim)


def run_variant(variant: str, pools: int, size: int, rate: float, duration: float,
                ready_timeout: float, work: Path, pythonpath: str | None = None,
                ) -> dict[str, Any]:
    """One ``vmpooler run`` with the inventory in memory (``memory``) or shared (``file``,
    ``file-before``: the code first on ``pythonpath``)."""
    data_dir = work / variant
    data_dir.mkdir()
    embedded = EmbeddedRedis(data_dir=data_dir / "redis", persist=False, hardened=False)
    inventory = data_dir / "dummy-inventory.yaml"
    dummy: dict[str, Any] = {"provider_class": "dummy", "createvm_max_time": 1,
                             "destroyvm_max_time": 1, "skip_dns_check_before_creating_vm": True}
    if variant.startswith("file"):
        dummy["filename"] = str(inventory)
    names = [f"pool{i}" for i in range(pools)]
    process: subprocess.Popen[bytes] | None = None
    try:
        embedded.start()
        config = data_dir / "vmpooler.yaml"
        config.write_text(yaml.safe_dump({
            ":config": {"task_limit": 10, "vm_checktime": 1, "check_loop_delay_min": 1,
                        "check_loop_delay_max": 10, "vm_lifetime": 2, "timeout": 5,
                        "logfile": str(data_dir / "vmpooler.log")},
            ":redis": {"server": "127.0.0.1", "port": embedded.port},
            ":providers": {":dummy": dummy},
            ":pools": [{"name": n, "template": f"templates/{n}", "size": size,
                        "provider": "dummy"} for n in names],
        }))
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "vmpooler.web.cli", "run", "--config", str(config),
             "--bind", f"127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {})})
        client = Client(port)
        deadline = time.monotonic() + 60
        while True:
            status, body = client.call("GET", "/status")
            if status == 200 and all(p["ready"] >= size for p in body["pools"].values()):
                break
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit(f"{variant}: the pools did not fill within 60 s")
            time.sleep(0.2)
        cpu_before = _cpu_seconds(process.pid)
        load = Load(client, names, ready_timeout)
        load.run(rate, duration)
        result = {"variant": variant, **load.report(),
                  "manager_cpu_s": round(_cpu_seconds(process.pid) - cpu_before, 1)}
        if variant.startswith("file"):
            result["inventory_vms"] = sum(
                len(vms) for vms in read_inventory(inventory)["pool"].values())
            result["inventory_kept_as"] = (  # which code ran: the layouts differ
                "one file per VM" if Path(f"{inventory}.d").is_dir() else "one YAML file")
        return result
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        embedded.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pools", type=int, default=4)
    parser.add_argument("--size", type=int, default=3)
    parser.add_argument("--rate", type=float, default=8.0, help="operations a second")
    parser.add_argument("--duration", type=float, help="seconds of load (240; --quick 15)")
    parser.add_argument("--ready-timeout", type=float,
                        help="seconds an on-demand request may take (120; --quick 30)")
    parser.add_argument("--variants", default="memory,file",
                        help="of memory, file, file-before (the default adds file-before "
                             "with --before)")
    parser.add_argument("--before", type=Path, metavar="DIR",
                        help="a checkout of the build to run as file-before")
    parser.add_argument("--quick", action="store_true",
                        help="15 s of load and a 30 s timeout unless given: a smoke run")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.duration is None:
        args.duration = 15.0 if args.quick else 240.0
    if args.ready_timeout is None:
        args.ready_timeout = 30.0 if args.quick else 120.0
    variants = args.variants.split(",")
    if args.before is not None and "file-before" not in variants:
        variants.append("file-before")
    results = []
    with tempfile.TemporaryDirectory(prefix="vmpooler-bench-dummy-") as work:
        before = None if args.before is None else package_of(args.before, Path(work))
        for variant in variants:
            if variant == "file-before" and before is None:
                raise SystemExit("file-before needs --before DIR")
            print(f"{variant}: {args.duration:.0f} s of load at {args.rate} ops/s ...",
                  flush=True)
            results.append(run_variant(variant, args.pools, args.size, args.rate,
                                       args.duration, args.ready_timeout, Path(work),
                                       before if variant == "file-before" else None))
    rows = [("variant", "variant"), ("on-demand requests", "ondemand_requests"),
            ("to ready, median s", "ondemand_median_s"), ("to ready, p99 s", "ondemand_p99_s"),
            ("not ready in time", "ondemand_not_ready"),
            ("checkouts (failed)", None), ("checkout median ms", "checkout_median_ms"),
            ("checkout p99 ms", "checkout_p99_ms"), ("manager CPU s", "manager_cpu_s")]
    for label, key in rows:
        cells = [f"{r['checkouts']} ({r['checkout_failures']})" if key is None else str(r[key])
                 for r in results]
        print(f"{label:<22}" + "".join(f"{c:>16}" for c in cells))
    document = {"settings": {**vars(args), "before": str(args.before)}, "results": results}
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
