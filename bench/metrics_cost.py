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
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="datadog,statsd,graphite")
    parser.add_argument("--concurrency", default="8,32")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("rest", nargs="*", help="more bench/api.py arguments (after --)")
    args = parser.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
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
