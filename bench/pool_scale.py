"""One ``vmpooler manager`` of many pools: its threads, RSS and fill over time, and its stop.

    .venv/bin/python bench/pool_scale.py --pools 10000 --seconds 240

One manager process (the settings of ``multi_manager.py``: the dummy provider at zero delay,
``check_loop_delay_min`` 1 s, ``_max`` 5 s, ``task_limit`` 10, pools of ``--size`` VMs) on a
redis-server of its own. Every ``--every`` seconds for ``--seconds`` it prints the pools
full, the manager's OS threads, RSS and peak RSS and CPU seconds, and whether it logged
"started"; then it sends SIGTERM and reports how long the manager took to exit (SIGKILL
after ``--grace`` seconds). Unlike ``multi_manager.py`` it needs no pool to be full: it
measures a manager that cannot keep up as well as one that can. The manager runs with this
interpreter, so a build is chosen by the virtualenv that runs this script.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import threading
import time
from pathlib import Path

import redis
from managers import Manager, pool_names, write_config

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, default=10000)
    parser.add_argument("--size", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=240.0)
    parser.add_argument("--every", type=float, default=10.0)
    parser.add_argument("--grace", type=float, default=60.0)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="vmpooler-scale-"))
    server = EmbeddedRedis(data_dir=work / "redis", persist=False, hardened=False)
    server.start()
    probe = redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True)
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # statsd, unread
    sink.bind(("127.0.0.1", 0))
    config = write_config(
        work / "m.yaml", redis_port=server.port, pools=args.pools, size=args.size,
        task_limit=10, statsd_port=sink.getsockname()[1], prefix="scale",
        settings={"check_loop_delay_min": 1, "check_loop_delay_max": 5, "vm_checktime": 1,
                  "manager_heartbeat_interval": 5})
    names = pool_names(args.pools)
    manager = Manager("m", config, work / "m.log")
    samples: list[dict[str, object]] = []
    pause = threading.Event()
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.seconds:
            pause.wait(args.every)
            pipe = probe.pipeline(transaction=False)
            for name in names:
                pipe.scard(schema.ready(name))
            full = sum(1 for count in pipe.execute() if count >= args.size)
            sample = {"s": round(time.monotonic() - t0), "full": full, **manager.resources(),
                      "started": "[manager] started" in manager.tail(10**6)}
            samples.append(sample)
            print(json.dumps(sample), flush=True)
        stop_at = time.monotonic()
        code = manager.stop(grace=args.grace)
        result = {"pools": args.pools, "size": args.size, "samples": samples,
                  "stop_seconds": round(time.monotonic() - stop_at, 2), "exit_code": code,
                  "tracebacks": manager.tail(10**6).count("Traceback")}
        print(json.dumps({k: v for k, v in result.items() if k != "samples"}))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
    finally:
        if manager.alive():
            manager.kill()
        probe.close()
        sink.close()
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
