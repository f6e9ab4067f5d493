"""Serving the API with gunicorn: ``vmpooler api`` and ``vmpooler run``.

``api``: gunicorn workers, each with its own Redis client (made after the fork), sending
commands to a separately running manager through the Redis stream.

``run``: everything for one machine. The gunicorn master starts the embedded redis-server
(when no Redis server is configured) so it outlives worker restarts; the single worker
process runs the actor system next to the API, and the API tells the actors directly. When
a configured Redis does not answer as the worker boots, the API serves at once (503 where it
needs Redis) and a thread starts the actor system once Redis answers
(:class:`~vmpooler.web.cli.startup.ManagerStarter`: after 1 s, doubling to 30 s).

Tracing (docs/tracing.md): each worker builds its own tracer after the fork and shuts it
down (sending what is left) when it exits; under ``run`` its actor system shares it.

Metrics: each worker builds its own backend from the configuration after the fork (a
socket is never shared between processes) and closes it when the worker exits; under
``run`` the worker's actor system and its API send through that same backend.
"""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import falcon
import gunicorn.util
import redis
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter

from vmpooler.actors.config import Config
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.metrics.factory import create_metrics
from vmpooler.actors.metrics.prometheus import mark_process_dead, multiprocess_dir
from vmpooler.actors.service.ruby_guard import ForeignManagerError
from vmpooler.actors.storage.connection import connect_configured
from vmpooler.actors.storage.embedded_files import DataDirError, read_port
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.system import PoolerSystem
from vmpooler.actors.tracing import NULL_TRACER, Tracer, build_tracer
from vmpooler.web.api_context import ApiContext
from vmpooler.web.app import create_app
from vmpooler.web.cli.log_json import JsonGunicornLogger
from vmpooler.web.cli.log_setup import refuse_to_start
from vmpooler.web.cli.startup import ManagerStarter
from vmpooler.web.commands import DirectCommands, StreamCommands
from vmpooler.web.connections import ConnectionLimits, error_response
from vmpooler.web.logsafe import SafeGunicornLogger
from vmpooler.web.pool_changes import listens_beyond_loopback

__all__ = ["ApiServer", "ServeOptions", "redis_address"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeOptions:
    """How gunicorn serves: ``bind`` address, process ``workers``, ``threads`` per worker;
    gunicorn's own log lines at ``log_level`` in ``log_format`` (``text`` or ``json``)."""

    bind: str = "127.0.0.1:4567"
    workers: int = 2
    threads: int = 8
    timeout: int = 60
    log_level: str = "info"
    log_format: str = "text"


def redis_address(config: Config) -> tuple[str, int] | None:
    """Where the configured Redis is; for the embedded one, where a running vmpooler put
    it (``<data_dir>/redis.port``), or None when none is running. With sentinels, the
    placeholder ``("sentinel", 0)``: each client asks the sentinels for the master."""
    if config.redis.sentinels:
        return "sentinel", 0
    if not config.redis.embedded:
        return str(config.redis.server), config.redis.port
    port = read_port(Path(config.redis.data_dir))
    return None if port is None else ("127.0.0.1", port)


def _client(config: Config, address: tuple[str, int]) -> redis.Redis:
    """A client of the configured Redis; for the embedded server, with the password it keeps
    in its data directory (a file this user cannot read stops the worker, saying so)."""
    try:
        return connect_configured(config.redis,
                                  address=None if config.redis.sentinels else address)
    except DataDirError as exc:
        raise SystemExit(f"vmpooler: the embedded redis-server's password: {exc}") from None


def _write_json_error(sock: Any, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's ``util.write_error`` with a JSON body ``{"ok": false, "error": ...}``."""
    gunicorn.util.write_nonblock(sock, error_response(status_int, reason, mesg))


REFUSED_METRIC = "api.connections.refused"
OPEN_METRIC = "api.connections.open"


class _MetricsObserver:
    """The worker's connection reports, sent through this process's metrics backend."""

    def __init__(self, state: _State) -> None:
        self._state = state

    def refused(self, reason: str) -> None:
        if self._state.metrics is not None:
            self._state.metrics.increment(REFUSED_METRIC, tags={"reason": reason})

    def open_connections(self, count: int) -> None:
        if self._state.metrics is not None:
            self._state.metrics.gauge(OPEN_METRIC, count)


@dataclass
class _State:
    """What one process of the server holds (the master's or a worker's copy)."""

    embedded: EmbeddedRedis | None = None
    address: tuple[str, int] | None = None
    system: PoolerSystem | None = None
    starter: ManagerStarter | None = None
    boot_failed: bool = False
    metrics: Metrics | None = None
    tracer: Tracer = NULL_TRACER
    contexts: list[ApiContext] = field(default_factory=list)


class ApiServer(BaseApplication):  # type: ignore[misc]
    """gunicorn application for ``vmpooler api`` (``with_manager=False``) or ``run``."""

    def __init__(self, config: Config, options: ServeOptions, *, with_manager: bool) -> None:
        self.config = config
        self.options = options
        self.with_manager = with_manager
        self.state = _State()
        settings = config.settings
        self.connection_limits = ConnectionLimits(
            read_timeout=settings.api_read_timeout, write_timeout=settings.api_write_timeout,
            keepalive_timeout=settings.api_keepalive_timeout,
            max_connections=settings.api_max_connections)
        """Read by the worker (:class:`vmpooler.web.worker.GuardedThreadWorker`)."""
        self.connection_observer = _MetricsObserver(self.state)
        super().__init__()

    def load_config(self) -> None:
        opts = self.options
        settings: dict[str, Any] = {
            "bind": [opts.bind],
            "workers": 1 if self.with_manager else max(1, opts.workers),
            "threads": max(1, opts.threads),
            "worker_class": "vmpooler.web.worker.GuardedThreadWorker",
            "worker_connections": self.connection_limits.max_connections,
            "keepalive": max(1, math.ceil(self.connection_limits.keepalive_timeout)),
            "timeout": opts.timeout,
            "graceful_timeout": 10,
            "loglevel": opts.log_level,
            "accesslog": None,
            # gunicorn's own lines escaped like ours, or JSON like ours
            "logger_class": (JsonGunicornLogger if opts.log_format == "json"
                             else SafeGunicornLogger),
            "proc_name": "vmpooler",
            "control_socket_disable": True,  # one shared ~/.gunicorn socket would clash
            "on_starting": self._on_starting,
            "post_worker_init": self._post_worker_init,
            "worker_exit": self._worker_exit,
            "child_exit": self._child_exit,
            "on_exit": self._on_exit,
        }
        for key, value in settings.items():
            self.cfg.set(key, value)

    # -- hooks (master) -----------------------------------------------------------------
    def _on_starting(self, _arbiter: Any) -> None:
        if self.config.redis.embedded and self.with_manager:
            self.state.embedded = EmbeddedRedis(data_dir=Path(self.config.redis.data_dir),
                                                password=self.config.redis.password).start()
            self.state.address = ("127.0.0.1", self.state.embedded.port)
        else:
            self.state.address = redis_address(self.config)

    def _child_exit(self, _arbiter: Any, worker: Any) -> None:
        directory = multiprocess_dir()
        if directory is not None:  # a dead worker's live Prometheus gauges go with it
            mark_process_dead(worker.pid, directory)

    def _on_exit(self, _arbiter: Any) -> None:
        if self.state.embedded is not None:
            self.state.embedded.stop()

    # -- worker ---------------------------------------------------------------------------
    def load(self) -> falcon.App:
        address = self.state.address or redis_address(self.config)
        if address is None:
            raise SystemExit(
                f"no Redis: set :redis: server, or start `vmpooler manager` first so the "
                f"embedded redis-server in {self.config.redis.data_dir} is running")
        client = _client(self.config, address)
        m = self.config.metrics
        self.state.metrics = create_metrics(m.backend, m.host, m.port, m.prefix, m.tags)
        # the worker's own exporter thread, after the fork (checked before gunicorn started)
        self.state.tracer = build_tracer(self.config, "run" if self.with_manager else "api")
        ctx = ApiContext(config=self.config, redis=client,
                         commands=StreamCommands(client, background=True),
                         metrics=self.state.metrics, tracer=self.state.tracer,
                         public_listener=listens_beyond_loopback(self.options.bind))
        ctx.started_at = ctx.clock.now()
        self.state.contexts.append(ctx)
        return create_app(ctx)

    def _post_worker_init(self, worker: Any) -> None:
        # Requests gunicorn cannot parse are answered by gunicorn itself, in HTML; in this
        # worker process, answer them in JSON like everything else.
        gunicorn.util.write_error = _write_json_error
        if not self.with_manager:
            return
        ctx = self.state.contexts[-1]

        def start() -> PoolerSystem:
            # the backend itself: the API's bounds on request values are the API's
            return PoolerSystem.start(self.config, redis_client=ctx.redis,
                                      metrics=self.state.metrics, consume_commands=False,
                                      tracer=self.state.tracer)

        def started(system: PoolerSystem) -> None:
            self.state.system = system
            ctx.commands = DirectCommands(system)

        def failed(exc: BaseException) -> None:  # a later attempt: the worker stops, exit 3
            if isinstance(exc, ForeignManagerError):
                refuse_to_start(exc)
            else:
                log.error("[!] [manager] could not start: %s", exc, exc_info=exc)
            self.state.boot_failed = True
            worker.alive = False

        # Until Redis answers, the API serves (503 where it needs Redis) and a thread tries
        # again with back-off; commands go to the stream meanwhile (load()).
        self.state.starter = ManagerStarter(start, on_started=started, on_failed=failed)
        try:
            self.state.starter.begin()
        except ForeignManagerError as exc:  # gunicorn halts: "Worker failed to boot", 3
            refuse_to_start(exc)
            sys.exit(Arbiter.WORKER_BOOT_ERROR)

    def _worker_exit(self, _arbiter: Any, _worker: Any) -> None:
        if self.state.starter is not None:
            self.state.starter.stop()
            self.state.starter = None
        if self.state.system is not None:
            self.state.system.stop()
            self.state.system = None
        if self.state.metrics is not None:
            self.state.metrics.close()
            self.state.metrics = None
        self.state.tracer.shutdown()  # the spans not yet sent go now
        self.state.tracer = NULL_TRACER
        if self.state.boot_failed:  # gunicorn halts: "Worker failed to boot", exit 3
            raise SystemExit(Arbiter.WORKER_BOOT_ERROR)
