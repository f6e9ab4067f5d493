"""How long a well-formed request waits while other clients stall their connections.

Starts ``vmpooler run`` (each build given with ``--build LABEL=COMMAND``; by default this
tree's) on the embedded defaults, then, for each kind of stalled connection and each count,
opens that many connections that stall, sends ``--probes`` plain ``GET /api/v3/vm`` on
fresh connections one after another, and reports each probe's answer time (or that none
came within ``--probe-timeout`` seconds). Kinds: ``silent`` (connect, send nothing),
``head`` (half a request head), ``body`` (a head announcing 1,000 bytes, then one).

    .venv/bin/python bench/slow_clients.py
    .venv/bin/python bench/slow_clients.py --build before=/tmp/vmp-before/vmpooler \\
        --build after=.venv/bin/vmpooler --counts 8,80,500

Nothing is sent after the stall: a client trickling a byte every few seconds is no
different to the server until the read deadline, which this measures too (``--deadline``:
how long until a stalled connection is closed by the server).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAYLOADS = {
    "silent": b"",
    "head": b"GET /api/v3/status HTTP/1.1\r\nHost: pooler\r\nX-Slow: 1\r\n",
    "body": b"POST /api/v3/vm HTTP/1.1\r\nHost: pooler\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{",
}
PROBE = b"GET /api/v3/vm HTTP/1.1\r\nHost: pooler\r\nConnection: close\r\n\r\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def probe(port: int, timeout: float) -> float | None:
    """Seconds until a whole answer to ``GET /api/v3/vm`` came, or None."""
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(PROBE)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
                if time.monotonic() - started > timeout:
                    return None
    except OSError:
        return None
    return time.monotonic() - started if data.startswith(b"HTTP/1.1 200") else None


def stall(port: int, count: int, payload: bytes) -> list[socket.socket]:
    held = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if payload:
            sock.sendall(payload)
        held.append(sock)
    return held


def closed_after(sock: socket.socket, limit: float) -> float | None:
    """Seconds until the server closed ``sock`` (None: still open after ``limit``)."""
    started = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(65536):
            pass
    except OSError:
        return None
    return time.monotonic() - started


def start(command: str, work: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    config = work / "vmpooler.yaml"
    shutil.copy(ROOT / "conf" / "vmpooler.yaml", config)
    text = config.read_text().replace("./var/redis", str(work / "redis"))
    config.write_text(text)
    log = open(work / "run.log", "ab")  # noqa: SIM115 - the child owns it
    program, *rest = command.split()
    if Path(program).exists():
        program = str(Path(program).resolve())
    process = subprocess.Popen([program, *rest, "run", "--config", str(config), "--bind",
                                f"127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
                               cwd=work, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 60
    while probe(port, 2) is None:
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{command} run did not answer: see {work / 'run.log'}")
        time.sleep(0.2)
    return process, port


def measure(command: str, args: argparse.Namespace) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="vmpooler-bench-slow-"))
    process, port = start(command, work)
    results: dict[str, object] = {}
    try:
        for kind in args.kinds.split(","):
            for count in (int(c) for c in args.counts.split(",")):
                held = stall(port, count, PAYLOADS[kind])
                times = [probe(port, args.probe_timeout) for _ in range(args.probes)]
                for sock in held:
                    sock.close()
                results[f"{kind}/{count}"] = times
                recovery = time.monotonic() + 120
                while probe(port, 2) is None and time.monotonic() < recovery:
                    time.sleep(0.2)
        if args.deadline:
            sock = stall(port, 1, PAYLOADS["head"])[0]
            results["deadline"] = closed_after(sock, 60)
            sock.close()
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    return results


def show(label: str, results: dict[str, object], timeout: float) -> None:
    for case, times in results.items():
        if case == "deadline":
            print(f"{label:>10}  a stalled head closed by the server after: "
                  f"{'never (60 s)' if times is None else f'{times:.1f} s'}")
            continue
        cells = ", ".join(f"> {timeout:g} s" if t is None else f"{t * 1000:.1f} ms"
                          for t in times)  # type: ignore[union-attr]
        print(f"{label:>10}  {case:>12}  {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="append", default=[], metavar="LABEL=COMMAND",
                        help="a vmpooler command to measure (default: this tree's)")
    parser.add_argument("--counts", default="8,80,500", help="stalled connections per case")
    parser.add_argument("--kinds", default="silent,head,body")
    parser.add_argument("--probes", type=int, default=3)
    parser.add_argument("--probe-timeout", type=float, default=10.0)
    parser.add_argument("--deadline", action="store_true",
                        help="also time how long a stalled head stays open")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    builds = [spec.partition("=")[::2] for spec in args.build] or [
        ("this", str(Path(sys.executable).parent / "vmpooler"))]
    everything = {}
    for label, command in builds:
        everything[label] = measure(command, args)
        show(label, everything[label], args.probe_timeout)
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=2))


if __name__ == "__main__":
    main()
