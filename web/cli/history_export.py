"""``vmpooler history export``: a site's own recorded checkouts as a trace for ``replay``.

It reads the per-pool checkout logs (:mod:`vmpooler.actors.storage.demand_export`) from the
configured Redis and writes CSV with the columns ``vmpooler replay`` reads:
``queued_at`` (ISO 8601, UTC), ``pool``, ``duration_s`` (whole seconds; empty when unknown:
a checkout that found no VM, a VM still out, or one whose record has expired).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import IO, Any

import redis

from vmpooler.actors.config import Config
from vmpooler.actors.sizing.trace import parse_moment
from vmpooler.actors.storage.demand_export import DemandLog, DemandRow
from vmpooler.web.cli.site_redis import site_client

__all__ = ["add_parser", "run", "write_rows"]

HEADER = ("queued_at", "pool", "duration_s")


def add_parser(sub: Any, parents: Sequence[argparse.ArgumentParser]) -> None:
    """Register ``history export`` under ``sub``."""
    history = sub.add_parser("history", help="the site's recorded checkouts")
    actions = history.add_subparsers(dest="history_action", metavar="ACTION", required=True)
    export = actions.add_parser(
        "export", parents=list(parents),
        help="write the recorded checkouts as CSV (queued_at,pool,duration_s), the trace "
             "form vmpooler replay reads")
    export.add_argument("--pool", action="append", metavar="P",
                        help="only this pool (repeatable; default: every configured pool)")
    export.add_argument("--since", metavar="ISO",
                        help="only checkouts from this moment on (ISO 8601; UTC without zone)")
    export.add_argument("--output", metavar="FILE", help="write here (default: stdout)")


def _moment(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_rows(rows: Iterable[DemandRow], out: IO[str]) -> int:
    """Write the CSV (header first) to ``out``; returns the number of rows."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    count = 0
    for row in rows:
        duration = "" if row.duration_s is None else f"{round(row.duration_s):d}"
        writer.writerow((_moment(row.t), row.pool, duration))
        count += 1
    return count


def run(config: Config, args: argparse.Namespace) -> int:
    """Run ``history export``; returns the exit status (1: Redis or the output file
    unavailable, 2: a bad ``--since``)."""
    since = None
    if args.since is not None:
        try:
            since = parse_moment(args.since)
        except ValueError as exc:
            print(f"vmpooler history export: --since: {exc}", file=sys.stderr)
            return 2
    pools = list(dict.fromkeys(args.pool or config.pool_names))
    client = site_client(config)
    if client is None:
        return 1
    try:
        rows = DemandLog(client).rows(pools, since=since)
    except redis.RedisError as exc:
        print(f"vmpooler: redis is unavailable: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    if args.output is None:
        write_rows(rows, sys.stdout)
        return 0
    try:
        with open(args.output, "w", newline="", encoding="utf-8") as out:
            count = write_rows(rows, out)
    except OSError as exc:
        print(f"vmpooler history export: cannot write {args.output}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    print(f"{count} checkout(s) of {len(pools)} pool(s) written to {args.output}",
          file=sys.stderr)
    return 0
