"""``vmpooler replay``: try a sizing policy on a trace of checkouts before turning it on.

It reads the operator's configuration and a CSV trace
(:mod:`vmpooler.actors.sizing.trace`), starts an embedded redis-server for the run, and for
each policy runs the real pool actors on a fake clock against the trace (the simulator,
:mod:`vmpooler.actors.replay`), from an empty Redis each time; then it prints a table per
policy, or one JSON document (:mod:`vmpooler.actors.replay.report`), and with ``--report``
writes the runs' page (:mod:`vmpooler.actors.replay.page`). While it runs, its progress goes
to stderr (:mod:`vmpooler.actors.replay.progress`: a bar redrawn on a terminal, a line every
``--progress-every`` seconds elsewhere, nothing with ``--quiet``); stdout has the report
only. Bad input (the trace, the configuration, the options) is one line on stderr naming the
file, line and column where there is one, and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pykka

from vmpooler.actors.config import ConfigError, ConfigRefusedError, load_config
from vmpooler.actors.replay.configuration import POLICIES, ReplayInputError, replay_config
from vmpooler.actors.replay.page import PageInfo, render_page
from vmpooler.actors.replay.progress import NoProgress, ProgressListener, ProgressReport
from vmpooler.actors.replay.report import STANDBY_COST, RunResult, as_json, as_table
from vmpooler.actors.replay.run import RESUME_TIME_S, replay
from vmpooler.actors.sizing.trace import Checkout, TraceError, parse_moment, read_trace
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, EmbeddedRedisError

__all__ = ["add_parser", "run"]

BAD_INPUT = 2
"""Exit status for a trace, configuration or option that cannot be replayed."""
MAX_SPAN_DAYS = 400
"""The longest window replayed, days of simulated time: the actors' periodic work (a pool's
cycle, its VMs' checks and ``ready_ttl`` renewals) is played however idle the trace is, so
the wall time grows with the simulated time (about 20 s an idle day with
``conf/replay.example.yaml`` on a 2-core machine)."""
MAX_CLONE_TIME_S = 86400.0
"""The longest ``--clone-time`` and ``--resume-time``: a day."""
INTERRUPTED = 130
"""Exit status after Ctrl-C (SIGINT), as a shell reports it."""
PROGRESS_EVERY_S = 5.0
"""The default wall seconds between two progress lines on a pipe (``--progress-every``)."""


def add_parser(sub: Any, parents: Sequence[argparse.ArgumentParser]) -> None:
    """Register ``replay`` under ``sub``."""
    parser = sub.add_parser(
        "replay", parents=list(parents),
        help="replay a trace of checkouts on the configured pools (simulated time) and "
             "report warm hits, waits, idle VM-hours and clones")
    parser.add_argument("--trace", metavar="FILE.csv", required=True,
                        help="CSV with queued_at (or start_time), platform (or pool), "
                             "duration_s")
    parser.add_argument("--clone-time", metavar="S", type=float, default=120.0,
                        help="simulated seconds a clone takes (default 120)")
    parser.add_argument("--resume-time", metavar="S", type=float, default=RESUME_TIME_S,
                        help="simulated seconds a resume of a standby VM takes (default "
                             f"{RESUME_TIME_S:g}; a suspend takes 5)")
    parser.add_argument("--standby-cost", metavar="F", type=float, default=STANDBY_COST,
                        help="price of a standby VM-hour against an idle running one, in "
                             f"the cost VM-hours (default {STANDBY_COST:g})")
    parser.add_argument("--policy", choices=[*POLICIES, "both"], default="static",
                        help="static: every pool at its fixed size; demand: every pool "
                             "sized by demand; both: one after the other (default static)")
    parser.add_argument("--skip-negative-durations", action="store_true",
                        help="leave out rows with a negative duration_s (aborted jobs) "
                             "instead of refusing the trace")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document keyed by policy")
    parser.add_argument("--start", metavar="ISO",
                        help="replay the checkouts from this moment on (default: the first)")
    parser.add_argument("--hours", metavar="H", type=float,
                        help="replay this many hours from the start (default: all)")
    parser.add_argument("--report", metavar="FILE.html",
                        help="also write the runs as one self-contained HTML page: per pool, "
                             "checkouts, ready VMs, demand target and misses over time; the "
                             "waits; the totals")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress on stderr (by default: a bar on a terminal, else "
                             "a line every --progress-every seconds)")
    parser.add_argument("--progress-every", metavar="S", type=float,
                        default=PROGRESS_EVERY_S,
                        help="seconds between two progress lines when stderr is not a "
                             f"terminal (default {PROGRESS_EVERY_S:g})")


def _window(trace: list[Checkout], start: str | None,
            hours: float | None) -> tuple[list[Checkout], float | None]:
    """The checkouts of the chosen window and its end (None: the last checkout's time)."""
    begin = trace[0].t if trace else 0.0
    if start is not None:
        try:
            begin = parse_moment(start)
        except ValueError as exc:
            raise ReplayInputError(f"--start: {exc}") from None
    if hours is not None and not 0 < hours <= MAX_SPAN_DAYS * 24:
        raise ReplayInputError(f"--hours: must be positive and at most {MAX_SPAN_DAYS * 24} "
                               f"({MAX_SPAN_DAYS} days), got {hours}")
    end = None if hours is None else begin + hours * 3600
    chosen = [c for c in trace if c.t >= begin and (end is None or c.t < end)]
    return chosen, end


def _check_span(path: str, trace: list[Checkout], end: float | None) -> None:
    """Refuse a window longer than :data:`MAX_SPAN_DAYS` (``trace`` is not empty)."""
    first, last = trace[0].t, trace[-1].t if end is None else end
    days = (last - first) / 86400
    if days > MAX_SPAN_DAYS:
        raise ReplayInputError(
            f"{path}: the checkouts to replay span {days:,.1f} days ({_utc(first)} to "
            f"{_utc(last)}), more than the {MAX_SPAN_DAYS} a replay covers; choose a part "
            "with --start and --hours")


def _utc(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="seconds").replace(
        "+00:00", "Z")


def _report_path(report: str | None) -> Path | None:
    """The ``--report`` file, refused before any run when it cannot be written."""
    if report is None:
        return None
    path = Path(report)
    if path.is_dir():
        raise ReplayInputError(f"--report: {report} is a directory")
    if not path.parent.is_dir():
        raise ReplayInputError(f"--report: {path.parent} is not a directory")
    return path


def _progress(args: argparse.Namespace, runs: int) -> ProgressListener:
    if args.quiet:
        return NoProgress()
    terminal = sys.stderr.isatty()
    try:
        width = os.get_terminal_size(sys.stderr.fileno()).columns if terminal else 120
    except (OSError, ValueError):
        width = 80
    return ProgressReport(sys.stderr, runs=runs, terminal=terminal, width=width,
                          every=args.progress_every)


def _results(args: argparse.Namespace) -> list[RunResult]:
    if not 0 < args.progress_every <= 86400:
        raise ReplayInputError(f"--progress-every: must be above 0 and at most 86400 seconds, "
                               f"got {args.progress_every}")
    if not 0 <= args.clone_time <= MAX_CLONE_TIME_S:
        raise ReplayInputError(f"--clone-time: must be from 0 to {MAX_CLONE_TIME_S:.0f} "
                               f"seconds, got {args.clone_time}")
    if not 0 <= args.resume_time <= MAX_CLONE_TIME_S:
        raise ReplayInputError(f"--resume-time: must be from 0 to {MAX_CLONE_TIME_S:.0f} "
                               f"seconds, got {args.resume_time}")
    if not 0 < args.standby_cost <= 1:
        raise ReplayInputError("--standby-cost: must be above 0 and at most 1, got "
                               f"{args.standby_cost}")
    skipped: list[int] = []
    trace, end = _window(
        read_trace(args.trace, skip_negative=skipped.append if args.skip_negative_durations
                   else None), args.start, args.hours)
    if not trace:
        raise ReplayInputError(f"{args.trace}: no checkout in the chosen window")
    _check_span(args.trace, trace, end)
    try:
        config = load_config(args.config)
    except ConfigRefusedError as exc:
        raise ReplayInputError(str(exc)) from None
    except ConfigError as exc:
        raise ReplayInputError(f"the configuration is invalid:\n{exc}") from None
    policies = list(POLICIES) if args.policy == "both" else [args.policy]
    platforms = [c.pool for c in trace]
    progress = _progress(args, len(policies))
    with tempfile.TemporaryDirectory(prefix="vmpooler-replay-") as data_dir:
        server = EmbeddedRedis(data_dir=Path(data_dir), persist=False).start()
        try:
            results = []
            for policy in policies:
                setup = replay_config(config, platforms, policy, redis_port=server.port)
                client = server.client(decode_responses=True)
                try:
                    client.flushall()  # each policy starts from an empty Redis
                    result = replay(setup, trace, policy=policy, clone_time=args.clone_time,
                                    resume_time=args.resume_time,
                                    standby_cost=args.standby_cost, client=client, end=end,
                                    progress=progress)
                finally:
                    client.close()
                result.notes[:0] = list(setup.notes)
                if skipped:
                    result.notes.append(f"{len(skipped)} row(s) of {args.trace} with a "
                                        "negative duration_s left out")
                results.append(result)
        finally:
            server.stop()
    return results


def _write_page(path: Path, results: list[RunResult], args: argparse.Namespace) -> None:
    info = PageInfo(trace=args.trace, clone_time=args.clone_time,
                    resume_time=args.resume_time, version=_version())
    path.write_text(render_page(results, info), encoding="utf-8")


def _version() -> str:
    try:
        return version("vmpooler")
    except PackageNotFoundError:
        return "unknown"


def run(args: argparse.Namespace) -> int:
    """Run ``vmpooler replay``; returns the exit status (2 for bad input, 1 when the
    embedded redis-server cannot start or the page cannot be written, 130 after Ctrl-C)."""
    try:
        page = _report_path(args.report)
        results = _results(args)
    except (TraceError, ReplayInputError) as exc:
        print(f"vmpooler replay: {exc}", file=sys.stderr)
        return BAD_INPUT
    except EmbeddedRedisError as exc:
        print(f"vmpooler replay: cannot start redis-server: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the redis-server was stopped on the way out
        # the interrupt may have cut the actors' stop short: stop what is left, or the
        # interpreter would wait for their threads
        pykka.ActorRegistry.stop_all(block=True, timeout=10)
        print("\nvmpooler replay: interrupted", file=sys.stderr)
        return INTERRUPTED
    if page is not None:
        try:
            _write_page(page, results, args)
        except OSError as exc:
            print(f"vmpooler replay: --report: cannot write {page}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 1
    if args.json:
        print(as_json(results))
    else:
        print("\n\n".join(as_table(r) for r in results))
    return 0
