"""The Redis reads behind ``/status``, ``/poolstat``, ``/totalrunning`` and ``/summary``.

Every public method costs exactly one round trip, however many pools or days are asked for
(plus, once per Redis server restart or ``SCRIPT FLUSH``, the reload of a script). A method
with nothing to read sends nothing. Nothing is cached: every call reads Redis.

* ``status`` (and so ``ready_counts``) and ``total_running`` send ONE ``EVALSHA`` of the
  read-only :attr:`~vmpooler.actors.storage.schema.StatusScripts.READ_STATUS` script: the SCARD of
  every queue of every pool, the size overrides, ... gathered inside Redis and returned as a
  few compact arrays, the call encoded once per distinct request
  (:class:`~vmpooler.actors.storage.prepared_call.PreparedCall`). With a pipeline of the same
  ~400 commands, redis-py packing and parsing each command and reply was most of a
  ``/status`` request's CPU (see BENCHMARKS.md); the script also makes the reading one
  consistent snapshot.
* ``daily`` sends one non-transactional pipeline (``pipeline(transaction=False)``) of
  HGETALLs, one per kind and day: few commands with large replies.

Identical ``status`` readings asked for at the same time by several threads of one process
share one round trip (:class:`~vmpooler.actors.storage.shared_reads.SharedReads`, re-exported
here), and a caller is never given a reading that began before it asked: it either starts a
read or joins one that has not started yet. So every answer reflects Redis as it was at some
moment after the call, as if each call had read for itself; under concurrent ``/status``
requests Redis and the process do the reading once per batch of callers instead of once per
caller.

Answers are matched to what was asked for by label (pipeline) or by section, each section's
length checked against the request (script), never by unchecked position arithmetic, so
adding a read cannot shift another's answer (vmpooler 3.9.1 read its pipelined queue counts
in the wrong order).

Methods only read; they may raise ``redis.RedisError`` (the API renders it as a 500). They
are thread-safe: each read takes its own connection from the client's connection pool.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.durations import DurationTotals, duration_totals
from vmpooler.actors.storage.prepared_call import PreparedCall
from vmpooler.actors.storage.queues import Queue
from vmpooler.actors.storage.shared_reads import SharedReads

__all__ = ["DAILY_KINDS", "SharedReads", "StatusReading", "StatusStore"]

DAILY_KINDS: Mapping[str, Callable[[str], str]] = MappingProxyType({
    "boot": schema.boot_stats,
    "clone": schema.clone_stats,
    "tag": schema.tag_stats,
})
"""Daily statistics hashes, by name: ``"<pool>:<vm>"`` -> seconds, or ``"<vm>:<tag>"`` -> value."""


def _empty() -> Mapping[Any, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class StatusReading:
    """What one ``/status`` round trip found. Parts that were not asked for stay empty.

    ``counts[queue][pool]`` is the size of that queue set; ``size_overrides`` holds the raw
    ``vmpooler__config__poolsize`` value of each pool that has one; ``last_boot[pool]`` is
    the ``vmpooler__lastboot`` field or ``""``. ``ondemand_tasks`` are the members of
    ``vmpooler__odcreate__task`` (``"<name>:<pool>:<count>:<id>"``). ``daily[kind]`` is
    the raw statistics hash of the requested date; ``durations[kind]`` the totals of such a
    hash of durations, summed in Redis. ``providers[name]`` is the hash a provider actor
    publishes (``vmpooler__provider__<name>``), absent when none is fresh; ``brakes[pool]``
    the hash a pool actor publishes for its mass-failure brake (``vmpooler__brake__<pool>``),
    absent before the first write; ``config_errors[pool]`` the raw field of a pool in the
    configuration-error state (``vmpooler__configerror``, JSON), absent otherwise;
    ``failovers[pool]`` the hash a failover pool's actor publishes
    (``vmpooler__failover__<pool>``), absent when none is fresh; ``sizings[pool]`` the hash a
    demand-sized pool's owner publishes (``vmpooler__sizing__<pool>``), absent when none is;
    ``standby[pool]`` the size of the pool's standby set (``vmpooler__standby__<pool>``), for
    the pools asked for.
    """

    counts: Mapping[Queue, Mapping[str, int]] = field(default_factory=_empty)
    size_overrides: Mapping[str, str] = field(default_factory=_empty)
    last_boot: Mapping[str, str] = field(default_factory=_empty)
    clones_in_flight: int = 0
    ondemand_clones_in_flight: int = 0
    requests_waiting: int = 0
    requests_processing: int = 0
    ondemand_tasks: tuple[str, ...] = ()
    daily: Mapping[str, Mapping[str, str]] = field(default_factory=_empty)
    durations: Mapping[str, DurationTotals] = field(default_factory=_empty)
    providers: Mapping[str, Mapping[str, str]] = field(default_factory=_empty)
    brakes: Mapping[str, Mapping[str, str]] = field(default_factory=_empty)
    config_errors: Mapping[str, str] = field(default_factory=_empty)
    failovers: Mapping[str, Mapping[str, str]] = field(default_factory=_empty)
    sizings: Mapping[str, Mapping[str, str]] = field(default_factory=_empty)
    standby: Mapping[str, int] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class _Layout:
    """What a ``status`` reading sends, worked out once per distinct request; ``call`` sends
    it, encoded once (set by the store)."""

    keys: list[str]
    args: list[Any]
    lookups: int
    totals: int
    wholes: int
    sums: int
    call: PreparedCall | None = None


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


def _totals(entry: Sequence[Any]) -> DurationTotals:
    """A ``sums`` entry of the script's answer: ``[0, count, sum, min, max]`` summed in
    Redis, or ``[1, value, ...]``, the values to read here."""
    if not entry or int(entry[0]) not in (0, 1):
        raise redis.ResponseError(f"status script: malformed sums entry {entry[:3]!r}")
    if int(entry[0]) == 1:
        return duration_totals(entry[1:])
    if len(entry) != 5:
        raise redis.ResponseError(f"status script: sums entry of {len(entry)} items")
    count = int(entry[1])
    if not count:
        return DurationTotals()
    return DurationTotals(count, float(entry[2]), float(entry[3]), float(entry[4]))


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
    sums: list[DurationTotals]


def _expect(name: str, got: Sequence[Any], wanted: int) -> None:
    if len(got) != wanted:
        raise redis.ResponseError(
            f"status script: {name} has {len(got)} entries, expected {wanted}")


class StatusStore:
    """Reads of queue sizes, counters and daily statistics over ``client``, one round trip each.

    ``client`` must decode responses (``decode_responses=True``); RESP2 and RESP3, with or
    without ``hiredis``, give the same readings.
    """

    _LAYOUTS_KEPT = 64  # distinct status requests whose layout is remembered

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._read_status = client.register_script(schema.StatusScripts.READ_STATUS)
        self._layouts: dict[Hashable, _Layout] = {}
        self._shared: SharedReads[StatusReading] = SharedReads()

    @staticmethod
    def _layout(sets: Sequence[str], lookups: Sequence[str], fields: Sequence[str],
                totals: bool, wholes: Sequence[str], sums: Sequence[str] = ()) -> _Layout:
        if not lookups:
            fields = ()
        total_keys = (
            [schema.tasks_clone(), schema.tasks_ondemandclone(), schema.provisioning_request(),
             schema.provisioning_processing(), schema.odcreate_task()] if totals else [])
        return _Layout(keys=[*sets, *lookups, *total_keys, *sums, *wholes],
                       args=[len(sets), len(lookups), len(total_keys), len(wholes), len(sums),
                             *fields],
                       lookups=len(lookups), totals=len(total_keys), wholes=len(wholes),
                       sums=len(sums))

    def _read(self, sets: Sequence[str], lookups: Sequence[str], fields: Sequence[str],
              totals: bool, wholes: Sequence[str], sums: Sequence[str] = ()) -> _Raw:
        """One EVALSHA of ``READ_STATUS`` (none when there is nothing to read).

        SCARD of each of ``sets``; the ``fields`` present in each hash of ``lookups``; the
        clone counters and on-demand queues when ``totals``; HGETALL of each of ``wholes``;
        the :class:`DurationTotals` of each hash of durations in ``sums``.
        """
        return self._run(self._layout(sets, lookups, fields, totals, wholes, sums), len(sets))

    def _run(self, layout: _Layout, sets: int) -> _Raw:
        if not layout.keys:
            return _Raw([], [], [], [], [])
        if layout.call is not None:
            answer = layout.call()
        else:
            answer = self._read_status(keys=layout.keys, args=layout.args)
        _expect("the answer", answer, 5)
        counts, found, tot, whole, summed = answer
        _expect("counts", counts, sets)
        _expect("lookups", found, layout.lookups)
        _expect("totals", tot, layout.totals)
        _expect("wholes", whole, layout.wholes)
        _expect("sums", summed, layout.sums)
        return _Raw(counts=list(map(int, counts)), lookups=[_pairs(f) for f in found],
                    totals=list(tot), wholes=[_pairs(w) for w in whole],
                    sums=[_totals(entry) for entry in summed])

    def status(
        self,
        pools: Sequence[str],
        *,
        queues: Collection[Queue] = (Queue.READY,),
        last_boot: bool = False,
        queue_totals: bool = False,
        daily: Collection[str] = (),
        durations: Collection[str] = (),
        date: str = "",
        providers: Sequence[str] = (),
        brakes: Sequence[str] = (),
        config_errors: bool = False,
        failovers: Sequence[str] = (),
        sizings: Sequence[str] = (),
        standby: Sequence[str] = (),
    ) -> StatusReading:
        """Read what ``/status`` needs in one round trip (one EVALSHA).

        ``queues`` names the queues to count for every pool; size overrides
        are always read. ``last_boot`` adds ``vmpooler__lastboot``; ``queue_totals`` adds the
        clone counters and the on-demand queues; ``daily`` names kinds of
        :data:`DAILY_KINDS` to read whole for ``date`` (``YYYY-MM-DD``), ``durations`` the
        kinds (``clone``, ``boot``) whose totals to read, summed in Redis; ``providers``
        names the providers whose published state to read, ``brakes`` the pools whose brake
        state to read; ``config_errors`` adds every pool's configuration error,
        ``failovers`` the pools whose failover state to read, ``sizings`` the demand-sized
        pools whose target to read, ``standby`` the pools whose standby set to count (SCARD,
        in the same script call).

        Concurrent calls with equal arguments may share one reading (see
        :class:`SharedReads`): it is read-only, and was read after each of them was made.
        """
        request = (tuple(pools), tuple(queues), bool(last_boot), bool(queue_totals),
                   tuple(daily), tuple(durations), date, tuple(providers), tuple(brakes),
                   bool(config_errors), tuple(failovers), tuple(sizings), tuple(standby))
        return self._shared.read(request, lambda: self._status(*request))

    def _status(self, pools: tuple[str, ...], queues: tuple[Queue, ...], last_boot: bool,
                queue_totals: bool, daily: tuple[str, ...], durations: tuple[str, ...],
                date: str, providers: tuple[str, ...],
                brakes: tuple[str, ...] = (),
                config_errors: bool = False,
                failovers: tuple[str, ...] = (),
                sizings: tuple[str, ...] = (),
                standby: tuple[str, ...] = ()) -> StatusReading:
        request = (pools, queues, last_boot, queue_totals, daily, durations, date, providers,
                   brakes, config_errors, failovers, sizings, standby)
        layout = self._layouts.get(request)
        if layout is None:
            lookups = []
            if pools:
                lookups.append(schema.config_poolsize())
                if last_boot:
                    lookups.append(schema.lastboot())
                if config_errors:
                    lookups.append(schema.config_errors())
            layout = self._layout(
                sets=[*(schema.queue(queue, pool) for queue in queues for pool in pools),
                      *(schema.standby(pool) for pool in standby)],
                lookups=lookups, fields=list(pools), totals=queue_totals,
                wholes=[*(DAILY_KINDS[kind](date) for kind in daily),
                        *(schema.provider_health(name) for name in providers),
                        *(schema.brake(pool) for pool in brakes),
                        *(schema.failover(pool) for pool in failovers),
                        *(schema.sizing(pool) for pool in sizings)],
                sums=[DAILY_KINDS[kind](date) for kind in durations])
            layout = replace(layout, call=PreparedCall(self._client, self._read_status,
                                                       layout.keys, layout.args))
            if len(self._layouts) >= self._LAYOUTS_KEPT:
                self._layouts.clear()
            self._layouts[request] = layout
        n = len(pools)
        raw = self._run(layout, len(queues) * n + len(standby))
        counts = {
            queue: MappingProxyType(dict(zip(pools, raw.counts[i * n:(i + 1) * n],
                                             strict=True)))
            for i, queue in enumerate(queues)
        }
        overrides = raw.lookups[0] if pools else {}
        boots = raw.lookups[1] if pools and last_boot else {}
        errors = raw.lookups[1 + last_boot] if pools and config_errors else {}
        clones, ondemand_clones, waiting, processing, tasks = raw.totals or ("", "", 0, 0, [])
        published = raw.wholes[len(daily):]
        provider_wholes = published[:len(providers)]
        brake_wholes = published[len(providers):len(providers) + len(brakes)]
        start = len(providers) + len(brakes)
        failover_wholes = published[start:start + len(failovers)]
        sizing_wholes = published[start + len(failovers):]
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
            durations=MappingProxyType(dict(zip(durations, raw.sums, strict=True))),
            providers=MappingProxyType({
                name: whole for name, whole in zip(providers, provider_wholes, strict=True)
                if whole}),
            brakes=MappingProxyType({
                pool: whole for pool, whole in zip(brakes, brake_wholes, strict=True)
                if whole}),
            config_errors=MappingProxyType(dict(errors)),
            failovers=MappingProxyType({
                pool: whole for pool, whole in zip(failovers, failover_wholes, strict=True)
                if whole}),
            sizings=MappingProxyType({
                pool: whole for pool, whole in zip(sizings, sizing_wholes, strict=True)
                if whole}),
            standby=MappingProxyType(dict(zip(standby, raw.counts[len(queues) * n:],
                                              strict=True))),
        )

    def ready_counts(self, pools: Sequence[str]) -> tuple[dict[str, int], Mapping[str, str]]:
        """``(ready size per pool, size overrides)`` of ``pools`` in one round trip."""
        reading = self.status(pools, queues=(Queue.READY,))
        return dict(reading.counts[Queue.READY]), reading.size_overrides

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
