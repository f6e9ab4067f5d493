"""``vmpooler dlq list`` and ``vmpooler dlq replay``: the dead-letter queues for operators.

``list`` prints the entries of ``vmpooler__dlq__<queue>`` (oldest first) as a table, or as
JSON with ``--json``; ``--queue``, ``--pool`` and ``--vm`` filter (each may be repeated).

``replay`` hands each selected entry's VM back to its pool's manager and removes the entry
once that is done — never before:

* a VM in none of its pool's queues is put in ``completed``: the pool actor destroys it if
  the provider still has it (nothing of a failed VM is left behind) and forgets it
  otherwise; the entry goes;
* a VM already in one of its pool's queues is being looked after (or its name was taken
  again): nothing is moved, and the entry goes;
* an entry whose pool is not configured here, or that cannot be read, is kept.

Each step is one compare-and-set script, so a replay running next to a manager, or two
replays, never move a VM twice. Nothing is re-cloned: a pool refills itself, and an
on-demand request retries on its own (``max_vm_retries``). ``--dry-run`` reports what each
entry would do and writes nothing. The pool's manager is woken through the command stream;
otherwise its next periodic cycle finds the VM.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import redis

from vmpooler.actors.config import Config
from vmpooler.actors.storage.dlq_store import QUEUES, DeadLetter
from vmpooler.actors.storage.upkeep_store import ReplayOutcome, UpkeepStore
from vmpooler.web.cli.site_redis import site_client

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, parents: Sequence[argparse.ArgumentParser]) -> None:
    """Register ``dlq list`` and ``dlq replay`` under ``sub``."""
    dlq = sub.add_parser("dlq", help="list or replay the dead-letter queues")
    actions = dlq.add_subparsers(dest="dlq_action", metavar="ACTION", required=True)
    filters = argparse.ArgumentParser(add_help=False)
    filters.add_argument("--queue", action="append", choices=QUEUES,
                         help="only this queue (repeatable; default: all)")
    filters.add_argument("--pool", action="append", help="only this pool (repeatable)")
    filters.add_argument("--vm", action="append", help="only this VM (repeatable)")
    listing = actions.add_parser("list", parents=[*parents, filters],
                                 help="print dead-letter entries, oldest first")
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    replay = actions.add_parser(
        "replay", parents=[*parents, filters],
        help="hand the entries' VMs back to their pools (destroyed if they still exist) "
             "and remove the entries")
    replay.add_argument("--dry-run", action="store_true",
                        help="report what would happen, change nothing")


def _selected(store: UpkeepStore, args: argparse.Namespace) -> list[DeadLetter]:
    entries = store.dead_letters(args.queue or QUEUES)
    if args.pool:
        entries = [e for e in entries if e.pool in args.pool]
    if args.vm:
        entries = [e for e in entries if e.vm in args.vm]
    return sorted(entries, key=lambda e: (e.epoch, e.queue, e.vm))


def run(config: Config, args: argparse.Namespace) -> int:
    """Run ``dlq list`` or ``dlq replay``; returns the exit status (1: Redis unreachable)."""
    client = site_client(config)
    if client is None:
        return 1
    try:
        store = UpkeepStore(client)
        entries = _selected(store, args)
        if args.dlq_action == "list":
            _print_list(entries, as_json=args.json)
            return 0
        return _replay(config, client, store, entries, dry_run=args.dry_run)
    except redis.RedisError as exc:
        print(f"vmpooler: redis is unavailable: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()


def _when(entry: DeadLetter) -> str:
    if entry.failed_at:
        return entry.failed_at
    return datetime.fromtimestamp(entry.epoch).astimezone().isoformat(timespec="seconds")


def _print_list(entries: list[DeadLetter], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps([{"queue": e.queue, "epoch": e.epoch, **e.body()} for e in entries],
                         indent=2))
        return
    if not entries:
        print("no dead-letter entries")
        return
    rows = [("QUEUE", "FAILED AT", "POOL", "VM", "RETRIES", "REQUEST", "ERROR")]
    for e in entries:
        error = f"{e.error_class}: {e.error_message}" if e.error_class else e.error_message
        rows.append((e.queue, _when(e), e.pool or "?", e.vm, str(e.retry_count),
                     e.request_id or "-", error.replace("\n", " ")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[-1]]).rstrip())
    print(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}")


def _replay(config: Config, client: redis.Redis, store: UpkeepStore,
            entries: list[DeadLetter], *, dry_run: bool) -> int:
    configured = set(config.pool_names)
    tally = {"requeued": 0, "removed": 0, "kept": 0}
    woken: set[str] = set()
    prefix = "would " if dry_run else ""
    for e in entries:
        label = f"{e.queue} entry of '{e.vm}' ({e.pool or '?'}, {_when(e)})"
        if e.pool not in configured:
            tally["kept"] += 1
            print(f"kept      {label}: pool {e.pool or '(unreadable entry)'!r} is not configured")
            continue
        if dry_run:
            queue = store.queue_of(e.pool, e.vm)
            outcome = ReplayOutcome.REQUEUED if queue is None else ReplayOutcome.ALREADY_QUEUED
        else:
            outcome, queue = store.replay(e)
        if outcome == ReplayOutcome.REQUEUED:
            tally["requeued"] += 1
            woken.add(e.pool)
            print(f"{prefix}requeue {label}: to 'completed', destroyed if it still exists")
        elif outcome == ReplayOutcome.ALREADY_QUEUED:
            tally["removed"] += 1
            print(f"{prefix}remove  {label}: the VM is in '{queue}' already")
        else:
            print(f"gone      {label}: replayed meanwhile by someone else")
    if woken and not dry_run:
        from vmpooler.web.commands import StreamCommands

        commands = StreamCommands(client)
        for pool in sorted(woken):
            commands.pool_changed(pool, "dead letters replayed")
    verb = "would be " if dry_run else ""
    print(f"{len(entries)} selected: {tally['requeued']} {verb}requeued, "
          f"{tally['removed']} {verb}removed (already queued), {tally['kept']} kept")
    return 0
