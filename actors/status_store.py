"""The Redis reads behind ``/status``, ``/poolstat``, ``/totalrunning`` and ``/summary``.

Every public method costs exactly one round trip: all of its commands go into one
non-transactional pipeline (``pipeline(transaction=False).execute()``), however many pools
or days are asked for. A method with nothing to read sends nothing.

Results are matched to the commands that produced them by label, never by position
arithmetic, so adding a command cannot shift another's answer (vmpooler 3.9.1 read its
pipelined queue counts in the wrong order).

Methods only read; they may raise ``redis.RedisError`` (the API renders it as a 500). They
are thread-safe: each call takes its own pipeline from the client's connection pool.
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
    the raw statistics hash of the requested date.
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


def _overrides(pools: Sequence[str], values: Sequence[str | None]) -> Mapping[str, str]:
    found = {pool: value for pool, value in zip(pools, values, strict=True) if value is not None}
    return MappingProxyType(found)


class StatusStore:
    """Pipelined reads of queue sizes, counters and daily statistics over ``client``.

    ``client`` must decode responses (``decode_responses=True``).
    """

    def __init__(self, client: redis.Redis) -> None:
        self._client = client

    def status(
        self,
        pools: Sequence[str],
        *,
        queues: Collection[str] = ("ready",),
        last_boot: bool = False,
        queue_totals: bool = False,
        daily: Collection[str] = (),
        date: str = "",
    ) -> StatusReading:
        """Read what ``/status`` needs in one round trip.

        ``queues`` names the sets of :data:`QUEUES` to count for every pool; size overrides
        are always read. ``last_boot`` adds ``vmpooler__lastboot``; ``queue_totals`` adds the
        clone counters and the on-demand queues; ``daily`` names kinds of
        :data:`DAILY_KINDS` to read for ``date`` (``YYYY-MM-DD``).
        """
        batch = _Batch(self._client)
        for queue in queues:
            key = QUEUES[queue]
            for pool in pools:
                batch.add(("count", queue, pool), "scard", key(pool))
        if pools:
            batch.add("overrides", "hmget", schema.config_poolsize(), list(pools))
            if last_boot:
                batch.add("lastboot", "hmget", schema.lastboot(), list(pools))
        if queue_totals:
            batch.add("clones", "get", schema.tasks_clone())
            batch.add("ondemand_clones", "get", schema.tasks_ondemandclone())
            batch.add("waiting", "zcard", schema.provisioning_request())
            batch.add("processing", "zcard", schema.provisioning_processing())
            batch.add("tasks", "zrange", schema.odcreate_task(), 0, -1)
        for kind in daily:
            batch.add(("daily", kind), "hgetall", DAILY_KINDS[kind](date))
        got = batch.run()
        counts = {
            queue: MappingProxyType({pool: int(got[("count", queue, pool)]) for pool in pools})
            for queue in queues
        }
        boots = got.get("lastboot") or [None] * len(pools)
        return StatusReading(
            counts=MappingProxyType(counts),
            size_overrides=_overrides(pools, got.get("overrides") or [None] * len(pools)),
            last_boot=MappingProxyType(
                {pool: value or "" for pool, value in zip(pools, boots, strict=True)}
            ),
            clones_in_flight=_int(got.get("clones")),
            ondemand_clones_in_flight=_int(got.get("ondemand_clones")),
            requests_waiting=int(got.get("waiting", 0)),
            requests_processing=int(got.get("processing", 0)),
            ondemand_tasks=tuple(got.get("tasks", ())),
            daily=MappingProxyType({kind: got[("daily", kind)] for kind in daily}),
        )

    def ready_counts(self, pools: Sequence[str]) -> tuple[dict[str, int], Mapping[str, str]]:
        """``(ready size per pool, size overrides)`` of ``pools`` in one round trip."""
        reading = self.status(pools, queues=("ready",))
        return dict(reading.counts["ready"]), reading.size_overrides

    def total_running(self, pools: Sequence[str]) -> int:
        """Sum of the running-set sizes of ``pools``, in one round trip."""
        batch = _Batch(self._client)
        for pool in pools:
            batch.add(pool, "scard", schema.running(pool))
        return sum(int(value) for value in batch.run().values())

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
