"""What metrics cost on the checkout path: ``vmpooler api`` with each backend on, beside the
same build with metrics off, in one run.

    .venv/bin/python bench/metrics_cost.py [--backends datadog,statsd,graphite]
                                           [--concurrency 8,32] [--duration 10] [-- ARGS]

Starts one sink per backend (a UDP socket read and discarded for DogStatsD and statsd, a
TCP listener read and discarded for graphite — what a local agent does, costing this
machine's CPU as an agent would), then runs ``bench/api.py --only checkout --no-ruby`` with
one ``--baseline`` per backend: the same ``vmpooler`` with the backend switched on through
vmpooler's environment variables (``DATADOG_HOST``/``DATADOG_PORT``, ``STATSD_SERVER``/
``STATSD_PORT``, ``GRAPHITE_SERVER``/``GRAPHITE_PORT``); the unlabelled rounds are metrics
off. bench/api.py measures each baseline's round right before ours at each concurrency and
prints the table; this script then prints each backend's checkout rate against metrics off
and the datagrams or bytes its sink received (so a backend that sent nothing shows). ARGS
after ``--`` go to bench/api.py.

Throughput on this 2-core machine moves by more than the few per cent metrics cost, so the
script first measures the cost exactly where it is paid: the CPU one checkout's samples
(the four metric calls an API worker makes per checkout, with their real names and tags)
take in this process, flushing threads included, each backend sending to a sink in another
process — median of 7 runs of 20,000 — printed against the worker CPU per checkout that
bench/api.py measures with metrics off. ``--calls-only`` stops there.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VMPOOLER = ROOT / ".venv" / "bin" / "vmpooler"
ENV = {
    "datadog": ("DATADOG_HOST", "DATADOG_PORT", socket.SOCK_DGRAM),
    "statsd": ("STATSD_SERVER", "STATSD_PORT", socket.SOCK_DGRAM),
    "graphite": ("GRAPHITE_SERVER", "GRAPHITE_PORT", socket.SOCK_STREAM),
}


class Sink:
    """A loopback socket whose input is read and thrown away; counts what arrived."""

    def __init__(self, kind: int) -> None:
        self.sock = socket.socket(socket.AF_INET, kind)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.packets = 0
        self.bytes = 0
        self._stop = threading.Event()
        target = self._udp if kind == socket.SOCK_DGRAM else self._tcp
        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def _udp(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            self.packets += 1
            self.bytes += len(data)

    def _tcp(self) -> None:
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn: socket.socket) -> None:
        with conn:
            while not self._stop.is_set():
                data = conn.recv(65536)
                if not data:
                    return
                self.packets += data.count(b"\n")
                self.bytes += len(data)

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


SINK = """
import socket, threading
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("127.0.0.1", 0))
t = socket.socket(); t.bind(("127.0.0.1", 0)); t.listen(1)
print(u.getsockname()[1], t.getsockname()[1], flush=True)
def tcp():
    c, _ = t.accept()
    while c.recv(65536):
        pass
threading.Thread(target=tcp, daemon=True).start()
while True:
    u.recv(65536)
"""


def checkout_samples(metrics: Any) -> None:
    """The metric calls an API worker makes for one checkout (see tests/test_api_vm.py)."""
    metrics.increment("http_requests_vm_total",
                      tags={"method": "post", "subpath": "vm", "operation": "checkout"})
    metrics.increment("checkout.success", tags={"pool": "bench-000"})
    metrics.timing("checkout.duration", 0.00042, tags={"pool": "bench-000"})
    metrics.timing("http_request", 0.00051, tags={"method": "POST", "status": "200"})


def sample_cost(backends: list[str], runs: int = 7, calls: int = 20_000) -> dict[str, float]:
    """Microseconds of this process's CPU per checkout's samples, by backend (``off``: the
    no-op backend); the sinks run in another process so that their CPU is not counted."""
    from vmpooler.actors.metrics.backends import NullMetrics
    from vmpooler.actors.metrics.factory import create_metrics

    sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None
        udp, tcp = map(int, sink.stdout.readline().split())
        made = {"off": NullMetrics()}
        for name in backends:
            made[name] = create_metrics(name, "127.0.0.1", tcp if name == "graphite" else udp,
                                        "vmpooler", ())
        cost = {}
        for name, metrics in made.items():
            times = []
            for _ in range(runs):
                t0 = time.process_time()
                for _ in range(calls):
                    checkout_samples(metrics)
                times.append((time.process_time() - t0) / calls * 1e6)
            metrics.close()
            cost[name] = statistics.median(times)
        return cost
    finally:
        sink.kill()
        sink.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="datadog,statsd,graphite")
    parser.add_argument("--concurrency", default="8,32")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--calls-only", action="store_true",
                        help="only the per-checkout cost of the metric calls")
    parser.add_argument("rest", nargs="*", help="more bench/api.py arguments (after --)")
    args = parser.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    cost = sample_cost(backends)
    print("CPU of one checkout's 4 metric samples in an API worker (median of 7 x 20,000):")
    for name, us in cost.items():
        print(f"  {name:9s} {us:6.1f} us")
    if args.calls_only:
        return 0
    sinks = {name: Sink(ENV[name][2]) for name in backends}
    out = Path(tempfile.mkdtemp(prefix="metrics-cost-")) / "api.json"
    cmd = [sys.executable, str(ROOT / "bench" / "api.py"), "--only", "checkout", "--no-ruby",
           "--concurrency", args.concurrency, "--duration", str(args.duration),
           "--json", str(out), *args.rest]
    for name, sink in sinks.items():
        host_var, port_var, _ = ENV[name]
        cmd += ["--baseline",
                f"{name}=env {host_var}=127.0.0.1 {port_var}={sink.port} {VMPOOLER}"]
    try:
        code = subprocess.call(cmd, cwd=ROOT)
    finally:
        for sink in sinks.values():
            sink.close()
    if code != 0 or not out.exists():
        return code or 1
    rounds = json.loads(out.read_text())["rounds"]
    off = {r["concurrency"]: r["rps"] for r in rounds if r["key"] == "checkout"}
    worker = [r["server_cpu_ms_per_req"] for r in rounds if r["key"] == "checkout"]
    if worker:
        base = 1000.0 * min(worker)
        print(f"\nworker CPU per checkout with metrics off: {base:.0f} us; the samples add:")
        for name in backends:
            print(f"  {name:9s} {100.0 * (cost[name] - cost['off']) / base:4.1f} %")
    print("\ncheckout with a metrics backend on, against metrics off (same build, same run):")
    for name, sink in sinks.items():
        for r in rounds:
            conc = r["concurrency"]
            if r["key"] == f"checkout@{name}" and conc in off:
                cost = 100.0 * (1.0 - r["rps"] / off[conc])
                print(f"  {name:9s} c={conc:<3d} {r['rps']:8.1f}/s against "
                      f"{off[conc]:8.1f}/s off: {cost:+5.1f} % slower")
        print(f"  {name:9s} sink received {sink.packets} samples, {sink.bytes} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
