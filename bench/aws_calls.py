"""EC2 API calls of the aws provider: per VM created, and per pool per cycle in steady state.

``vmpooler run`` as a real process with ``--pools`` aws pools of ``--size`` VMs against a
moto server (``moto_server``, started here on a free loopback port), every EC2 call passing
through the counting proxy of ``tests/ec2_faults.py`` (no faults injected). It reports the
calls by action during the fill (from start until every pool is full) divided by the VMs
created, and the calls during a steady window of ``--steady`` seconds (pools full, nothing
checked out) divided by pools and by the cycles of that window (each pool's check loop is
fixed at ``--loop`` seconds). Readiness is ``instance_status``; the watch polls every
``--poll`` seconds (0.2 here; 5 by default in production). About 1 minute.

    .venv/bin/python bench/aws_calls.py [--pools 5] [--size 10] [--steady 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import moto_ec2
from tests.ec2_faults import FaultProxy, Faults
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port


def wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def run(pools: int, size: int, steady: float, loop: float, poll: float) -> dict[str, Any]:
    server = moto_ec2.start()
    proxy = FaultProxy(server.port, Faults()).start()
    data_dir = Path(tempfile.mkdtemp(prefix="vmpooler-bench-aws-"))
    embedded = EmbeddedRedis(data_dir=data_dir, persist=False, hardened=False)
    process: subprocess.Popen[bytes] | None = None
    try:
        embedded.start()
        names = [f"aws-pool{i}" for i in range(pools)]
        document = {
            ":config": {"task_limit": 10, "vm_checktime": 1, "max_tries": 1,
                        "logfile": str(data_dir / "vmpooler.log")},
            ":redis": {"server": "127.0.0.1", "port": embedded.port},
            ":providers": {":aws": {
                "provider_class": "aws", "region": moto_ec2.REGION, "zone": moto_ec2.ZONE,
                "amisize": "t3.micro", "endpoint_url": proxy.url, "state_poll_interval": poll,
                "vm_ready_check": "instance_status",
                "skip_dns_check_before_creating_vm": True}},
            ":pools": [{"name": n, "template": moto_ec2.AMI, "size": size, "provider": "aws",
                        "check_loop_delay_min": loop, "check_loop_delay_max": loop}
                       for n in names],
        }
        config = data_dir / "vmpooler.yaml"
        config.write_text(yaml.safe_dump(document))
        client = redis.Redis(host="127.0.0.1", port=embedded.port, decode_responses=True)
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "vmpooler.web.cli", "run", "--config", str(config),
             "--bind", f"127.0.0.1:{free_port()}"], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env={**os.environ, **moto_ec2.CREDENTIALS})
        wait(lambda: all(client.scard(schema.ready(n)) == size for n in names), 300,
             "every pool full")
        fill_seconds = time.monotonic() - started
        with proxy.lock:
            fill = Counter(proxy.calls)
        time.sleep(steady)  # the steady window: the manager runs its cycles meanwhile
        with proxy.lock:
            window = Counter(proxy.calls) - fill
        vms = pools * size
        cycles = steady / loop
        return {
            "pools": pools, "size": size, "fill_seconds": round(fill_seconds, 2),
            "fill_calls": dict(fill), "calls_per_vm": round(sum(fill.values()) / vms, 2),
            "per_vm_by_action": {k: round(v / vms, 2) for k, v in fill.most_common()},
            "steady_seconds": steady, "loop_seconds": loop, "steady_calls": dict(window),
            "calls_per_pool_per_cycle": round(sum(window.values()) / pools / cycles, 2),
        }
    finally:
        if process is not None:
            process.terminate()
            process.wait(30)
        proxy.stop()
        server.stop()
        embedded.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pools", type=int, default=5)
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--steady", type=float, default=30.0)
    parser.add_argument("--loop", type=float, default=5.0)
    parser.add_argument("--poll", type=float, default=0.2)
    parser.add_argument("--json")
    args = parser.parse_args()
    result = run(args.pools, args.size, args.steady, args.loop, args.poll)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
