"""A small WSGI app served by gunicorn with :class:`GuardedThreadWorker`, for its tests.

Run as ``python -m tests.worker_app PORT [--threads N] [--read-timeout S] ...`` from the
checkout's top directory. One worker process. Routes:

* ``GET /`` → ``ok``; ``POST /echo`` → the request body; ``GET /big?mb=N`` → N MiB;
* ``GET /hold`` → waits (at most 30 s) until the file named by ``--release`` exists;
* ``GET /counts`` → JSON of the refusals the worker reported so far, by reason.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from gunicorn.app.base import BaseApplication

from vmpooler.web.connections import ConnectionLimits
from vmpooler.web.intake import IntakeLimits


class _Observer:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()

    def refused(self, reason: str) -> None:
        with self.lock:
            self.counts[reason] += 1

    def open_connections(self, count: int) -> None:
        pass


def make_app(observer: _Observer, release: Path) -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        path, method = environ["PATH_INFO"], environ["REQUEST_METHOD"]
        body = b"ok"
        if method == "POST" and path == "/echo":
            body = environ["wsgi.input"].read()
        elif path == "/big":
            mb = int(environ.get("QUERY_STRING", "mb=1").partition("=")[2] or 1)
            body = b"x" * (mb * 1024 * 1024)
        elif path == "/hold":
            gate = threading.Event()
            for _ in range(300):
                if release.exists() or gate.wait(0.1):
                    break
        elif path == "/counts":
            with observer.lock:
                body = json.dumps(dict(observer.counts)).encode()
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(len(body)))])
        return [body]

    return app


class WorkerApp(BaseApplication):  # type: ignore[misc]
    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.connection_observer = _Observer()
        self.connection_limits = ConnectionLimits(
            read_timeout=options.read_timeout, keepalive_timeout=options.keepalive_timeout,
            write_timeout=options.write_timeout, max_connections=options.max_connections,
            max_buffered=options.max_buffered,
            intake=IntakeLimits(max_body=options.max_body))
        super().__init__()

    def load_config(self) -> None:
        opts = self.options
        for key, value in {"bind": [f"127.0.0.1:{opts.port}"], "workers": 1,
                           "threads": opts.threads,
                           "worker_class": "vmpooler.web.worker.GuardedThreadWorker",
                           "keepalive": 5, "graceful_timeout": 2, "loglevel": "warning",
                           "control_socket_disable": True}.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return make_app(self.connection_observer, Path(self.options.release))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--read-timeout", type=float, default=10.0)
    parser.add_argument("--keepalive-timeout", type=float, default=5.0)
    parser.add_argument("--write-timeout", type=float, default=30.0)
    parser.add_argument("--max-connections", type=int, default=1000)
    parser.add_argument("--max-buffered", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--max-body", type=int, default=1024 * 1024)
    parser.add_argument("--release", default="/nonexistent")
    WorkerApp(parser.parse_args()).run()


if __name__ == "__main__":
    main()
