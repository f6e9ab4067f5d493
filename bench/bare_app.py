"""A bare Falcon application served exactly as ``vmpooler api`` serves its own, for comparison.

    .venv/bin/python bench/bare_app.py --bind 127.0.0.1:PORT --workers 2 --threads 8 \\
                                       --redis-port N

Two endpoints, nothing else (no middleware, error handlers, sink, metrics or commands):

* ``POST /x``: a small JSON body, the size and shape of a one-VM checkout answer;
* ``POST /redis``: the same after one Redis ``GET``, so it pays the one round trip a
  vmpooler checkout pays (its EVALSHA) through the same kind of client.

gunicorn runs with the settings :meth:`vmpooler.web.cli.serve.ApiServer.load_config` uses for
``vmpooler api`` (gthread workers, ``--workers``, ``--threads``, timeouts, no access log),
and each worker builds its Redis client after the fork with
:func:`vmpooler.actors.storage.connection.connect` and the default ``:redis:`` pool settings, as
``ApiServer.load`` does. ``bench/api.py`` starts this as a subprocess next to ``vmpooler api``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import falcon
from gunicorn.app.base import BaseApplication

from vmpooler.actors.config import RedisSettings
from vmpooler.actors.storage.connection import connect

BODY = {"ok": True, "bench-000": {"hostname": "abcdefghijklmno.example.test"}}
KEY = "bench__bare__key"


class Trivial:
    """``POST /x``."""

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = "application/json"
        resp.text = json.dumps(BODY, indent=2)


class OneGet:
    """``POST /redis``: one ``GET`` of a small string key, then the same small body."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        value = self.client.get(KEY)
        resp.content_type = "application/json"
        resp.text = json.dumps({**BODY, "value": value}, indent=2)


def create_app(redis_port: int) -> falcon.App:
    settings = RedisSettings()
    client = connect("127.0.0.1", redis_port, pool_size=settings.connection_pool_size,
                     pool_timeout=settings.connection_pool_timeout)
    app = falcon.App(media_type="application/json")
    app.add_route("/x", Trivial())
    app.add_route("/redis", OneGet(client))
    return app


class BareServer(BaseApplication):  # type: ignore[misc]
    """gunicorn with ``vmpooler api``'s settings; the app is built in each worker."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        super().__init__()

    def load_config(self) -> None:
        a = self.args
        settings: dict[str, Any] = {
            "bind": [a.bind],
            "workers": max(1, a.workers),
            "threads": max(1, a.threads),
            "worker_class": "gthread",
            "timeout": 60,
            "graceful_timeout": 10,
            "loglevel": a.log_level,
            "accesslog": None,
            "proc_name": "bench-bare",
            "control_socket_disable": True,
        }
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> falcon.App:
        return create_app(self.args.redis_port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bind", default="127.0.0.1:4568")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--redis-port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    BareServer(parser.parse_args(argv)).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
