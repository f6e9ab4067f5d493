"""The Redis reads behind ``/status``, ``/poolstat``, ``/totalrunning`` and ``/summary``.

Every public method costs exactly one round trip, however many pools or days are asked for
(plus, once per Redis server restart or ``SCRIPT FLUSH``, the reload of a script). A method
with nothing to read sends nothing. Nothing is cached: every call reads Redis.

* ``status`` (and so ``ready_counts``) and ``total_running`` send ONE ``EVALSHA`` of the
  read-only :attr:`~vmpooler.actors.schema.StatusScripts.READ_STATUS` script: the SCARD of
  every queue of every pool, the size overrides, ... gathered inside Redis and returned as a
  few compact arrays. With a pipeline of the same ~400 commands, redis-py packing and parsing
  each command and reply was most of a ``/status`` request's CPU (see BENCHMARKS.md); the
  script also makes the reading one consistent snapshot.
* ``daily`` sends one non-transactional pipeline (``pipeline(transaction=False)``) of
  HGETALLs, one per kind and day: few commands with large replies.

Answers are matched to what was asked for by label (pipeline) or by section, each section's
length checked against the request (script), never by unchecked position arithmetic, so
adding a read cannot shift another's answer (vmpooler 3.9.1 read its pipelined queue counts
in the wrong order).

Methods only read; they may raise ``redis.RedisError`` (the API renders it as a 500). They
are thread-safe: each call takes its own connection from the client's connection pool.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import redis

from vmpooler.actors import schema

__all__ = ["DAILY_KINDS", "QUEUES", "StatusReading", "StatusStore"]

QUEUES: Mapping[str, Callable[[str], str]] = MappingProxyType({
    "ready": schema.ready,
    "running": schema.running,
    "pending": schema.pending,
    "completed": schema.completed,
})
"""Per-pool queue sets whose sizes a reading may count, by name."""

DAILY_KINDS: Mapping[str, Callable[[str], str]] = MappingProxyType({
    "boot": schema.boot_stats,
    "clone": schema.clone_stats,
    "tag": schema.tag_stats,
})
"""Daily statistics hashes, by name: ``"<pool>:<vm>"`` -> seconds, or ``"<vm>:<tag>"`` -> value."""


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class StatusReading:
    """What one ``/status`` round trip found. Parts that were not asked for stay empty.

    ``counts[queue][pool]`` is the size of that queue set; ``size_overrides`` holds the raw
    ``vmpooler__config__poolsize`` value of each pool that has one; ``last_boot[pool]`` is
    the ``vmpooler__lastboot`` field or ``""``. ``ondemand_tasks`` are the members of
    ``vmpooler__odcreate__task`` (``"<name>:<pool>:<count>:<id>"``). ``daily[kind]`` is
    the raw statistics hash of the requested date. ``providers[name]`` is the hash a
    provider actor publishes (``vmpooler__provider__<name>``), absent when none is fresh.
    """

    counts: Mapping[str, Mapping[str, int]] = field(default_factory=_empty)
    size_overrides: Mapping[str, str] = field(default_factory=_empty)
    last_boot: Mapping[str, str] = field(default_factory=_empty)
    clones_in_flight: int = 0
    ondemand_clones_in_flight: int = 0
    requests_waiting: int = 0
    requests_processing: int = 0
    ondemand_tasks: tuple[str, ...] = ()
    daily: Mapping[str, Mapping[str, str]] = field(default_factory=_empty)
    providers: Mapping[str, Mapping[str, str]] = field(default_factory=_empty)


class _Batch:
    """One non-transactional pipeline whose answers are looked up by label."""

    def __init__(self, client: redis.Redis) -> None:
        self._pipe = client.pipeline(transaction=False)
        self._labels: list[Hashable] = []
        self._label_set: set[Hashable] = set()

    def add(self, label: Hashable, command: str, *args: Any) -> None:
        """Queue ``command(*args)``; its answer will be found under ``label``."""
        if label in self._label_set:
            raise ValueError(f"duplicate label {label!r}")
        getattr(self._pipe, command)(*args)
        self._labels.append(label)
        self._label_set.add(label)

    def run(self) -> dict[Hashable, Any]:
        """Send everything in one round trip (none when empty); answers by label."""
        if not self._labels:
            return {}
        answers = self._pipe.execute()
        return dict(zip(self._labels, answers, strict=True))


def _int(value: str | None) -> int:
    """A counter string as an int; missing or unreadable counts as 0 (Ruby ``to_i``-ish)."""
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def _pairs(flat: Sequence[Any]) -> dict[str, Any]:
    """``[field, value, field, value, ...]`` as a dict."""
    if len(flat) % 2:
        raise redis.ResponseError(f"status script: odd field/value list ({len(flat)})")
    return dict(zip(flat[0::2], flat[1::2], strict=True))


@dataclass(frozen=True, slots=True)
class _Raw:
    """The script's answer, each section checked against what was asked for."""

    counts: list[int]
    lookups: list[dict[str, str]]
    totals: list[Any]
    wholes: list[dict[str, str]]


def _expect(name: str, got: Sequence[Any], wanted: int) -> None:
    if len(got) != wanted:
        raise redis.ResponseError(
            f"status script: {name} has {len(got)} entries, expected {wanted}")


class StatusStore:
    """Reads of queue sizes, counters and daily statistics over ``client``, one round trip each.

    ``client`` must decode responses (``decode_responses=True``); RESP2 and RESP3, with or
    without ``hiredis``, give the same readings.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._read_status = client.register_script(schema.StatusScripts.READ_STATUS)

    def _read(self, sets: Sequence[str], lookups: Sequence[str], fields: Sequence[str],
              totals: bool, wholes: Sequence[str]) -> _Raw:
        """One EVALSHA of ``READ_STATUS`` (none when there is nothing to read).

        SCARD of each of ``sets``; the ``fields`` present in each hash of ``lookups``; the
        clone counters and on-demand queues when ``totals``; HGETALL of each of ``wholes``.
        """
        if not lookups:
            fields = ()
        total_keys = (
            [schema.tasks_clone(), schema.tasks_ondemandclone(), schema.provisioning_request(),
             schema.provisioning_processing(), schema.odcreate_task()] if totals else [])
        keys = [*sets, *lookups, *total_keys, *wholes]
        if not keys:
            return _Raw([], [], [], [])
        args = [len(sets), len(lookups), len(total_keys), len(wholes), *fields]
        answer = self._read_status(keys=keys, args=args)
        _expect("the answer", answer, 4)
        counts, found, tot, whole = answer
        _expect("counts", counts, len(sets))
        _expect("lookups", found, len(lookups))
        _expect("totals", tot, len(total_keys))
        _expect("wholes", whole, len(wholes))
        return _Raw(counts=[int(n) for n in counts], lookups=[_pairs(f) for f in found],
                    totals=list(tot), wholes=[_pairs(w) for w in whole])

    def status(
        self,
        pools: Sequence[str],
        *,
        queues: Collection[str] = ("ready",),
        last_boot: bool = False,
        queue_totals: bool = False,
        daily: Collection[str] = (),
        date: str = "",
        providers: Sequence[str] = (),
    ) -> StatusReading:
        """Read what ``/status`` needs in one round trip (one EVALSHA).

        ``queues`` names the sets of :data:`QUEUES` to count for every pool; size overrides
        are always read. ``last_boot`` adds ``vmpooler__lastboot``; ``queue_totals`` adds the
        clone counters and the on-demand queues; ``daily`` names kinds of
        :data:`DAILY_KINDS` to read for ``date`` (``YYYY-MM-DD``); ``providers`` names the
        providers whose published state to read.
        """
        queues, daily, providers = list(queues), list(daily), list(providers)
        labels = [(queue, pool) for queue in queues for pool in pools]
        lookups = []
        if pools:
            lookups.append(schema.config_poolsize())
            if last_boot:
                lookups.append(schema.lastboot())
        raw = self._read(
            sets=[QUEUES[queue](pool) for queue, pool in labels], lookups=lookups,
            fields=list(pools), totals=queue_totals,
            wholes=[*(DAILY_KINDS[kind](date) for kind in daily),
                    *(schema.provider_health(name) for name in providers)])
        counted = dict(zip(labels, raw.counts, strict=True))
        counts = {
            queue: MappingProxyType({pool: counted[(queue, pool)] for pool in pools})
            for queue in queues
        }
        overrides = raw.lookups[0] if pools else {}
        boots = raw.lookups[1] if pools and last_boot else {}
        clones, ondemand_clones, waiting, processing, tasks = raw.totals or ("", "", 0, 0, [])
        return StatusReading(
            counts=MappingProxyType(counts),
            size_overrides=MappingProxyType(overrides),
            last_boot=MappingProxyType({pool: boots.get(pool) or "" for pool in pools}),
            clones_in_flight=_int(clones),
            ondemand_clones_in_flight=_int(ondemand_clones),
            requests_waiting=int(waiting),
            requests_processing=int(processing),
            ondemand_tasks=tuple(tasks),
            daily=MappingProxyType(dict(zip(daily, raw.wholes[:len(daily)], strict=True))),
            providers=MappingProxyType({
                name: whole for name, whole in zip(providers, raw.wholes[len(daily):],
                                                   strict=True) if whole}),
        )

    def ready_counts(self, pools: Sequence[str]) -> tuple[dict[str, int], Mapping[str, str]]:
        """``(ready size per pool, size overrides)`` of ``pools`` in one round trip."""
        reading = self.status(pools, queues=("ready",))
        return dict(reading.counts["ready"]), reading.size_overrides

    def total_running(self, pools: Sequence[str]) -> int:
        """Sum of the running-set sizes of ``pools``, in one round trip (one EVALSHA)."""
        raw = self._read(sets=[schema.running(pool) for pool in pools], lookups=(), fields=(),
                         totals=False, wholes=())
        return sum(raw.counts)

    def daily(
        self, kinds: Collection[str], dates: Sequence[str]
    ) -> dict[str, list[dict[str, str]]]:
        """Raw daily statistics hashes: ``{kind: [hash of dates[0], hash of dates[1], ...]}``.

        ``kinds`` are names of :data:`DAILY_KINDS`; a day without data gives ``{}``. One
        round trip for all kinds and dates.
        """
        batch = _Batch(self._client)
        for kind in kinds:
            key = DAILY_KINDS[kind]
            for date in dates:
                batch.add((kind, date), "hgetall", key(date))
        got = batch.run()
        return {kind: [got[(kind, date)] for date in dates] for kind in kinds}
