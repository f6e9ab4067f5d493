"""The ``vmpooler`` command: ``run``, ``api``, ``manager``, ``check-config``, ``dlq``,
``replay`` and ``history export``.

Only this module configures logging and installs signal handlers. SIGTERM and SIGINT stop
the manager cleanly (every Redis transition is one atomic script, so nothing is left
half-written); SIGUSR1 logs every thread's traceback (for diagnosing a stuck actor).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import pykka.debug
import redis

from vmpooler.actors.config import (
    Config,
    ConfigError,
    ConfigRefusedError,
    load_config,
    render_config,
)
from vmpooler.actors.config.unacted import unacted_warnings
from vmpooler.actors.metrics.prometheus import prepare_multiprocess
from vmpooler.actors.service.ruby_guard import ForeignManagerError, refuse_beside_foreign_manager
from vmpooler.actors.storage.connection import connect_configured
from vmpooler.actors.storage.embedded_redis import EmbeddedRedisError
from vmpooler.actors.storage.published_pools import redis_pool_reader
from vmpooler.actors.system import PoolerSystem
from vmpooler.actors.tracing import Tracer, TracingError, build_tracer, check_tracing
from vmpooler.web.cli import dlq, history_export, probe_server, replay
from vmpooler.web.cli.log_setup import LOG_FORMATS, configure_logging, refuse_to_start
from vmpooler.web.cli.startup import Backoff, retry_while_unavailable

__all__ = ["main"]

log = logging.getLogger("vmpooler")

REFUSED = 2
"""Exit status when a configuration file is refused unread (over a limit of reading); an
invalid configuration exits 1."""


def _version() -> str:
    try:
        return version("vmpooler")
    except PackageNotFoundError:
        return "unknown"


def _common(*, defaults: bool) -> argparse.ArgumentParser:
    """The options every command takes, before or after its name. Only the top-level
    parser sets defaults: a command's own copy leaves an option it was not given unset, so
    ``vmpooler --config X check-config`` checks X (argparse would otherwise let the
    command's default None replace it)."""
    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH", default=default(None),
                        help="configuration file (default: $VMPOOLER_CONFIG, "
                             "$VMPOOLER_CONFIG_FILE, ./vmpooler.yaml, then the bundled one)")
    common.add_argument("--log-level", default=default("info"),
                        choices=["debug", "info", "warning", "error"],
                        help="log verbosity (default: info)")
    common.add_argument("--log-format", choices=LOG_FORMATS, default=default(None),
                        help="text: vmpooler's log lines; json: one JSON object per line, "
                             "gunicorn's too (default: $LOG_FORMAT, else text)")
    return common


def _parser() -> argparse.ArgumentParser:
    common = _common(defaults=False)
    parser = argparse.ArgumentParser(
        prog="vmpooler", parents=[_common(defaults=True)],
        description="Keeps pools of ready virtual machines; a drop-in vmpooler 3.x.",
    )
    parser.add_argument("--version", action="version", version=f"vmpooler {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serving = argparse.ArgumentParser(add_help=False)
    serving.add_argument("--bind", metavar="HOST:PORT",
                         help="listen address (default $VMPOOLER_BIND, else 127.0.0.1; "
                              "the port defaults to $PORT, else 4567)")
    serving.add_argument("--threads", type=int, default=8, help="threads per worker (default 8)")
    sub.add_parser("run", parents=[common, serving],
                   help="API and manager in one process (embedded Redis when none is configured)")
    api = sub.add_parser("api", parents=[common, serving],
                         help="serve the REST API only (commands reach managers through Redis)")
    api.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    probe_server.add_bind_argument(sub.add_parser(
        "manager", parents=[common], help="run the pool manager (the actor system)"))
    sub.add_parser("check-config", parents=[common],
                   help="print the effective configuration (secrets masked) or its errors")
    dlq.add_parser(sub, [common])
    replay.add_parser(sub, [common])
    history_export.add_parser(sub, [common])
    return parser


def _log_format(args: argparse.Namespace) -> str | None:
    """``--log-format``, else ``$LOG_FORMAT`` (an empty one is unset), else ``text``; None
    (said on stderr) when the variable names no format."""
    chosen = args.log_format or os.environ.get("LOG_FORMAT") or "text"
    if chosen not in LOG_FORMATS:
        print(f"vmpooler: LOG_FORMAT: expected one of {', '.join(LOG_FORMATS)}, got "
              f"{chosen!r}", file=sys.stderr)
        return None
    return chosen


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    """The command line as parsed; no command is ``run`` with run's own defaults (``bind``,
    ``threads``), as if it had been named last."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args([*argv, "run"])
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``vmpooler`` console script. Returns the exit status."""
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    command = args.command
    args.log_format = _log_format(args)
    if args.log_format is None:
        return 1
    if command == "replay":  # its own configuration handling; logs on stderr, warnings up
        level = "warning" if args.log_level == "info" else args.log_level
        logging.basicConfig(stream=sys.stderr, level=level.upper(),
                            format="%(levelname)s %(name)s: %(message)s")
        return replay.run(args)
    try:
        config = load_config(args.config, pool_reader=redis_pool_reader)
    except ConfigRefusedError as exc:  # a file over a limit of reading: one line
        print(f"vmpooler: {exc}", file=sys.stderr)
        return REFUSED
    except ConfigError as exc:
        print(f"vmpooler: the configuration is invalid:\n{exc}", file=sys.stderr)
        return 1
    warnings = unacted_warnings(config)
    if command == "check-config":
        print(f"# source: {config.source}")
        print(render_config(config), end="")
        for warning in warnings:
            print(f"vmpooler: warning: {warning}", file=sys.stderr)
        try:  # what api, manager and run would refuse at start
            check_tracing(config, "run")
        except TracingError as exc:
            print(f"vmpooler: warning: {exc}", file=sys.stderr)
        return 0
    if command == "dlq":
        return dlq.run(config, args)
    if command == "history":
        return history_export.run(config, args)
    try:
        configure_logging(args.log_level, config.settings.logfile, args.log_format)
    except (OSError, ValueError) as exc:
        cause = exc.__cause__ or exc
        print(f"vmpooler: {config.source}: config.logfile: cannot open "
              f"{config.settings.logfile!r}: {cause}", file=sys.stderr)
        return 1
    for note in config.notes:
        log.warning("[!] [config] %s", note)
    for warning in warnings:
        log.warning("[!] [config] %s", warning)
    try:  # once per command, before anything starts: a missing extra is one line
        traced = check_tracing(config, "run" if command == "run" else
                               "api" if command == "api" else "manager")
    except TracingError as exc:
        print(f"vmpooler: {exc}", file=sys.stderr)
        return 1
    if traced is not None:
        log.info("[*] [tracing] %s", traced)
    prometheus = config.metrics.prometheus
    if prometheus is not None:  # before any backend exists and before gunicorn forks
        prepare_multiprocess(prometheus.multiprocess_dir)
    if command in ("run", "api"):
        return _serve(config, args, with_manager=command == "run")
    return _run_manager(config, args.probe_address)


def _serve(config: Config, args: argparse.Namespace, *, with_manager: bool) -> int:
    from vmpooler.web.cli.serve import ApiServer, ServeOptions
    from vmpooler.web.pool_changes import startup_warning

    options = ServeOptions(
        bind=serve_address(args.bind or os.environ.get("VMPOOLER_BIND"), config.api_port),
        workers=getattr(args, "workers", 1), threads=args.threads, log_level=args.log_level,
        log_format=args.log_format,
    )
    if hasattr(signal, "SIGUSR1"):
        signal.signal(signal.SIGUSR1, pykka.debug.log_thread_tracebacks)
    if with_manager and not config.redis.embedded and _beside_foreign_manager(config):
        return 1
    log.info("[*] [api] vmpooler %s serving on %s with %s", _version(), options.bind,
             config.source)
    if (warning := startup_warning(config, options.bind)) is not None:
        log.warning("[!] [api] %s", warning)
    try:
        ApiServer(config, options, with_manager=with_manager).run()
    except EmbeddedRedisError as exc:
        log.error("[!] [manager] embedded redis-server failed: %s", exc)
        return 1
    return 0


def serve_address(bind: str | None, port: int) -> str:
    """The address to serve on: ``bind`` as given when it names a port (``HOST:PORT``,
    ``[V6]:PORT``) or a socket (``unix:PATH``, ``fd://N``); a bare host (``0.0.0.0``,
    ``[::]``, ``::``) with ``port``; nothing at all as ``127.0.0.1:port``."""
    if not bind:
        return f"127.0.0.1:{port}"
    if bind.startswith(("unix:", "fd://")):
        return bind
    if bind.count(":") > 1 and not bind.startswith("["):
        return f"[{bind}]:{port}"  # a bare IPv6 address
    host, sep, tail = bind.rpartition(":")
    if sep and tail.isdigit() and host:
        return bind
    return f"{bind}:{port}"


def _beside_foreign_manager(config: Config) -> bool:
    """``run`` asks before gunicorn starts (its worker starts the manager and asks again):
    True, said, when a vmpooler (Ruby) manager is running on the configured Redis. An
    unreachable Redis is left to the worker, as before."""
    client = connect_configured(config.redis)
    try:
        refuse_beside_foreign_manager(client, config, time.time())
    except ForeignManagerError as exc:
        refuse_to_start(exc)
        return True
    except redis.RedisError:
        return False
    finally:
        client.close()
    return False


def _run_manager(config: Config, bind: tuple[str, int] | None = None) -> int:
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("[*] [manager] %s received, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if hasattr(signal, "SIGUSR1"):
        signal.signal(signal.SIGUSR1, pykka.debug.log_thread_tracebacks)
    log.info("[*] [manager] vmpooler %s starting with %s", _version(), config.source)
    probes = None
    if bind is not None:
        try:
            probes = probe_server.listen(config, bind)
        except OSError as exc:  # before anything starts: the port in use, a bad address
            refuse_to_start(OSError(f"cannot listen on {probe_server.show_address(bind)}: {exc}"))
            return 1
    with probes or contextlib.nullcontext():
        return _manage(config, stop, probes)


def _manage(config: Config, stop: threading.Event,
            probes: probe_server.ProbeServer | None) -> int:
    """Start the system (retried while Redis is unreachable) and run it until ``stop``; the
    spans not yet sent go at the end (``stop`` is set by SIGTERM and SIGINT)."""
    tracer = build_tracer(config, "manager")
    try:
        return _manage_traced(config, stop, probes, tracer)
    finally:
        tracer.shutdown()  # the spans not yet sent go now (SIGTERM included)


def _manage_traced(config: Config, stop: threading.Event,
                   probes: probe_server.ProbeServer | None, tracer: Tracer) -> int:
    try:  # while Redis does not answer: after 1 s, doubling to 60 s
        system = retry_while_unavailable(lambda: PoolerSystem.start(config, tracer=tracer),
                                         stop, Backoff(cap=60.0))
    except EmbeddedRedisError as exc:
        log.error("[!] [manager] embedded redis-server failed: %s", exc)
        return 1
    except ForeignManagerError as exc:
        refuse_to_start(exc)
        return 1
    if system is None:
        return 0
    if probes is not None:
        probes.probes.attach(system)
    try:
        stop.wait()
    finally:
        system.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
