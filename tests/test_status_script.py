"""The one-EVALSHA status reading (``StatusScripts.READ_STATUS``) against a plain pipeline.

``PipelineStatusStore`` below reads the same data with one command per value, as the store
did before the script (one SCARD per queue and pool, HMGET, GET, ZCARD, ZRANGE, HGETALL).
Both must give equal readings and byte-identical ``/status`` bodies, with RESP2 and RESP3
clients, with and without hiredis.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator, Sequence
from types import MappingProxyType
from typing import Any

import pytest
import redis
from redis._parsers import _HiredisParser, _RESP2Parser, _RESP3Parser
from redis.utils import HIREDIS_AVAILABLE

from tests.api_harness import api, api_config, api_pool
from vmpooler.actors.config.model import StandbyTier
from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.durations import DurationTotals, duration_totals
from vmpooler.actors.storage.queues import Queue
from vmpooler.actors.storage.status_store import DAILY_KINDS, StatusReading, StatusStore
from vmpooler.web.resources import status as status_resource

ALL_QUEUES = (Queue.READY, Queue.RUNNING, Queue.PENDING, Queue.COMPLETED)
VIEWS = ["", "view=", "view=capacity", "view=pools", "view=queue", "view=boot,clone",
         "view=queue,pools", "view=boot,capacity,clone,pools,queue"]


class PipelineStatusStore(StatusStore):
    """The reference: every value read by its own command, in one pipeline."""

    def status(self, pools: Sequence[str], *, queues: Collection[Queue] = (Queue.READY,),
               last_boot: bool = False, queue_totals: bool = False,
               daily: Collection[str] = (), durations: Collection[str] = (), date: str = "",
               providers: Sequence[str] = (), brakes: Sequence[str] = (),
               config_errors: bool = False,
               failovers: Sequence[str] = (),
               sizings: Sequence[str] = (),
               standby: Sequence[str] = ()) -> StatusReading:
        pipe = self._client.pipeline(transaction=False)
        for queue in queues:
            for pool in pools:
                pipe.scard(schema.queue(queue, pool))
        for pool in standby:
            pipe.scard(schema.standby(pool))
        if pools:
            pipe.hmget(schema.config_poolsize(), list(pools))
            if last_boot:
                pipe.hmget(schema.lastboot(), list(pools))
            if config_errors:
                pipe.hmget(schema.config_errors(), list(pools))
        if queue_totals:
            pipe.get(schema.tasks_clone())
            pipe.get(schema.tasks_ondemandclone())
            pipe.zcard(schema.provisioning_request())
            pipe.zcard(schema.provisioning_processing())
            pipe.zrange(schema.odcreate_task(), 0, -1)
        for kind in daily:
            pipe.hgetall(DAILY_KINDS[kind](date))
        for kind in durations:
            pipe.hvals(DAILY_KINDS[kind](date))
        for name in providers:
            pipe.hgetall(schema.provider_health(name))
        for pool in brakes:
            pipe.hgetall(schema.brake(pool))
        for pool in failovers:
            pipe.hgetall(schema.failover(pool))
        for pool in sizings:
            pipe.hgetall(schema.sizing(pool))
        got = iter(pipe.execute() if len(pipe) else [])
        counts = {queue: {pool: int(next(got)) for pool in pools} for queue in queues}
        tiers = {pool: int(next(got)) for pool in standby}
        overrides: dict[str, str] = {}
        boots: list[str | None] = [None] * len(pools)
        errors: dict[str, str] = {}
        if pools:
            overrides = {p: v for p, v in zip(pools, next(got), strict=True) if v is not None}
            if last_boot:
                boots = next(got)
            if config_errors:
                errors = {p: v for p, v in zip(pools, next(got), strict=True) if v is not None}
        totals: dict[str, Any] = {}
        if queue_totals:
            clones, od_clones = next(got), next(got)
            totals = dict(clones_in_flight=int(clones or 0),
                          ondemand_clones_in_flight=int(od_clones or 0),
                          requests_waiting=next(got), requests_processing=next(got),
                          ondemand_tasks=tuple(next(got)))
        days = {kind: dict(next(got)) for kind in daily}
        sums = {kind: duration_totals(next(got)) for kind in durations}
        published = {name: dict(next(got)) for name in providers}
        braked = {pool: dict(next(got)) for pool in brakes}
        failing = {pool: dict(next(got)) for pool in failovers}
        sized = {pool: dict(next(got)) for pool in sizings}
        assert next(got, None) is None
        return StatusReading(
            counts=MappingProxyType({q: MappingProxyType(c) for q, c in counts.items()}),
            size_overrides=MappingProxyType(overrides),
            last_boot=MappingProxyType(
                {pool: value or "" for pool, value in zip(pools, boots, strict=True)}),
            daily=MappingProxyType(days), durations=MappingProxyType(sums),
            providers=MappingProxyType({k: v for k, v in published.items() if v}),
            brakes=MappingProxyType({k: v for k, v in braked.items() if v}),
            config_errors=MappingProxyType(errors),
            failovers=MappingProxyType({k: v for k, v in failing.items() if v}),
            sizings=MappingProxyType({k: v for k, v in sized.items() if v}),
            standby=MappingProxyType(tiers), **totals)

    def total_running(self, pools: Sequence[str]) -> int:
        pipe = self._client.pipeline(transaction=False)
        for pool in pools:
            pipe.scard(schema.running(pool))
        return sum(pipe.execute()) if pools else 0


def plain(reading: StatusReading) -> dict[str, Any]:
    """A reading as plain dicts (MappingProxyType compares equal to dicts, but be explicit)."""
    out = {f.name: getattr(reading, f.name) for f in dataclasses.fields(reading)}
    return {
        name: ({k: dict(v) if hasattr(v, "items") else v for k, v in value.items()}
               if hasattr(value, "items") else value)
        for name, value in out.items()
    }


PARSERS = [("resp2", 2, _RESP2Parser), ("resp3", 3, _RESP3Parser)]
if HIREDIS_AVAILABLE:
    PARSERS += [("resp2-hiredis", 2, _HiredisParser), ("resp3-hiredis", 3, _HiredisParser)]


@pytest.fixture(params=PARSERS, ids=[p[0] for p in PARSERS])
def client(request: pytest.FixtureRequest, redis_client: redis.Redis) -> Iterator[redis.Redis]:
    """A client of the test server with the given protocol and reply parser."""
    _, protocol, parser = request.param
    kwargs = redis_client.connection_pool.connection_kwargs
    pool = redis.ConnectionPool(host=kwargs["host"], port=kwargs["port"],
                                decode_responses=True, protocol=protocol, parser_class=parser)
    c = redis.Redis(connection_pool=pool)
    c.ping()
    conn = pool.get_connection()
    assert isinstance(conn._parser, parser)
    pool.release(conn)
    yield c
    c.close()
    pool.disconnect()


NAMES = ["pool-a", "pool b", "ünïcode", "colon:pool", "empty", "x" * 60]
TODAY = "2024-03-01"


def seed(r: redis.Redis, names: Sequence[str]) -> None:
    for n, pool in enumerate(names):
        for q, queue in enumerate(ALL_QUEUES):
            members = [f"{pool}-{queue}-{i}" for i in range((n + 2 * q) % 5)]
            if members and pool != "empty":
                r.sadd(schema.queue(queue, pool), *members)
    r.hset(schema.config_poolsize(), mapping={names[0]: "7", names[2]: "zero?", names[3]: "",
                                               "not-configured": "3"})
    r.hset(schema.lastboot(), mapping={names[1]: "2024-03-01 10:00:00 +0000", names[3]: "",
                                       "not-configured": "x"})
    r.set(schema.tasks_clone(), "3")
    r.zadd(schema.provisioning_request(), {"req-a": 1, "req-b": 2})
    r.zadd(schema.odcreate_task(), {"a:pool-a:2:req-c": 3, "garbage": 1})
    r.hset(schema.clone_stats(TODAY), mapping={"pool-a:vm1": "2.5", "colon:pool:vm2": "3"})
    r.hset(schema.boot_stats(TODAY), mapping={"pool b:vm3": "60"})
    r.sadd(schema.standby(names[1]), "standby-1", "standby-2")


@pytest.mark.parametrize("last_boot", [False, True])
@pytest.mark.parametrize("queue_totals", [False, True])
@pytest.mark.parametrize("queues", [("ready",), ALL_QUEUES, ()])
def test_script_reading_equals_the_pipeline_reading(
        client: redis.Redis, queues: tuple[str, ...], queue_totals: bool,
        last_boot: bool) -> None:
    seed(client, NAMES)
    for pools in (NAMES, NAMES[::-1], NAMES[:1], []):
        for daily in ((), ("clone", "boot", "tag")):
            options: dict[str, Any] = dict(queues=queues, last_boot=last_boot,
                                           queue_totals=queue_totals, daily=daily,
                                           durations=daily[:2], date=TODAY,
                                           standby=pools[:3])
            got = StatusStore(client).status(pools, **options)
            expected = PipelineStatusStore(client).status(pools, **options)
            assert plain(got) == plain(expected), (pools, daily)


def test_script_reading_by_hand(redis_client: redis.Redis) -> None:
    seed(redis_client, NAMES)
    redis_client.hset(schema.provider_health("vsphere"),
                      mapping={"circuit_breaker": "open", "failures": "5"})
    redis_client.hset(schema.brake("pool b"), mapping={"engaged": "1", "held": "2"})
    redis_client.hset(schema.config_errors(), "ünïcode", '{"error_class": "E"}')
    redis_client.hset(schema.failover("pool-a"), mapping={"state": "down", "size": "3"})
    redis_client.hset(schema.sizing("colon:pool"), mapping={"target": "4", "reason": "floor"})
    reading = StatusStore(redis_client).status(
        NAMES[:4], queues=ALL_QUEUES, last_boot=True, queue_totals=True,
        daily=("clone", "tag"), date=TODAY, providers=("dummy", "vsphere"),
        brakes=("pool-a", "pool b"), config_errors=True, failovers=("pool-a", "ünïcode"),
        sizings=("pool b", "colon:pool"), standby=("pool b", "colon:pool"))
    assert plain(reading) == {
        # (n + 2q) % 5 members for pool n, queue q (ready 0, running 1, pending 2, completed 3)
        "counts": {"ready": {"pool-a": 0, "pool b": 1, "ünïcode": 2, "colon:pool": 3},
                   "running": {"pool-a": 2, "pool b": 3, "ünïcode": 4, "colon:pool": 0},
                   "pending": {"pool-a": 4, "pool b": 0, "ünïcode": 1, "colon:pool": 2},
                   "completed": {"pool-a": 1, "pool b": 2, "ünïcode": 3, "colon:pool": 4}},
        "size_overrides": {"pool-a": "7", "ünïcode": "zero?", "colon:pool": ""},
        "last_boot": {"pool-a": "", "pool b": "2024-03-01 10:00:00 +0000", "ünïcode": "",
                      "colon:pool": ""},
        "clones_in_flight": 3, "ondemand_clones_in_flight": 0,
        "requests_waiting": 2, "requests_processing": 0,
        "ondemand_tasks": ("garbage", "a:pool-a:2:req-c"),
        "daily": {"clone": {"pool-a:vm1": "2.5", "colon:pool:vm2": "3"}, "tag": {}},
        "durations": {},
        "providers": {"vsphere": {"circuit_breaker": "open", "failures": "5"}},
        "brakes": {"pool b": {"engaged": "1", "held": "2"}},
        "config_errors": {"ünïcode": '{"error_class": "E"}'},
        "failovers": {"pool-a": {"state": "down", "size": "3"}},
        "sizings": {"colon:pool": {"target": "4", "reason": "floor"}},
        "standby": {"pool b": 2, "colon:pool": 0},
    }
    assert StatusStore(redis_client).total_running(NAMES) == 2 + 3 + 4 + 0 + 0 + 2
    assert StatusStore(redis_client).ready_counts(NAMES[:2]) == (
        {"pool-a": 0, "pool b": 1}, {"pool-a": "7"})


# Durations as vmpooler writes them, and what else a hash may hold: the script sums plain
# decimals itself and hands anything else back for duration_totals() to read.
DURATIONS = {
    "plain": ["12.5", "3", "0.25", "7.", ".5", "-0", "-1.5", "12.5", "0", "1" * 30],
    "equal extremes": ["1.0", "1", "-0", "0", "1.00"],
    "exponent": ["1e3", "2.5"], "spaces": [" 1.5", "2"], "hex": ["0x10", "1"],
    "plus sign": ["+2", "1"], "words": ["fast", "1.5"], "nan": ["nan", "2"], "inf": ["inf"],
    "overflow": ["1" * 400, "2"], "sum overflows": ["1" + "0" * 308] * 2,
    "underscore": ["1_000", "2"], "empty text": ["", "3"], "unicode digits": ["٣", "1"],
    "empty": [],
}


@pytest.mark.parametrize("case", list(DURATIONS))
def test_durations_summed_in_redis_equal_the_ones_read_here(client: redis.Redis,
                                                            case: str) -> None:
    """Equal :class:`DurationTotals`, bit for bit, whichever path the values take."""
    values = DURATIONS[case]
    if values:
        client.hset(schema.clone_stats(TODAY),
                    mapping={f"pool:vm{i}": value for i, value in enumerate(values)})
    got = StatusStore(client).status([], durations=("clone",), date=TODAY).durations["clone"]
    expected = duration_totals(client.hvals(schema.clone_stats(TODAY)))
    assert got == expected
    assert [repr(x) for x in (got.total, got.low, got.high)] == [
        repr(x) for x in (expected.total, expected.low, expected.high)]
    if case == "plain":
        assert got.count == 10 and got.high == float("1" * 30) and got.low == -1.5
    if case == "empty":
        assert got == DurationTotals()


def test_many_pools_in_one_script_call(redis_client: redis.Redis) -> None:
    """More pools than one HMGET chunk (500 fields) of the script."""
    names = [f"p{n}" for n in range(1234)]
    pipe = redis_client.pipeline(transaction=False)
    for n, pool in enumerate(names):
        if n % 4:
            pipe.sadd(schema.ready(pool), *[f"vm{n}-{i}" for i in range(n % 4)])
        if n % 7 == 0:
            pipe.hset(schema.config_poolsize(), pool, str(n))
    pipe.execute()
    got = StatusStore(redis_client).status(names, queues=("ready", "running"), last_boot=True)
    expected = PipelineStatusStore(redis_client).status(
        names, queues=("ready", "running"), last_boot=True)
    assert plain(got) == plain(expected)
    assert len(got.size_overrides) == len(range(0, 1234, 7))


def test_nothing_to_read_sends_nothing(redis_client: redis.Redis) -> None:
    store = StatusStore(redis_client)
    before = int(redis_client.info("stats")["total_commands_processed"])
    assert plain(store.status([], queues=ALL_QUEUES, last_boot=True)) == plain(
        StatusReading(counts=MappingProxyType({q: MappingProxyType({}) for q in ALL_QUEUES})))
    assert store.total_running([]) == 0
    after = int(redis_client.info("stats")["total_commands_processed"])
    assert after - before == 1  # the first INFO itself


def test_script_is_reloaded_after_script_flush(redis_client: redis.Redis) -> None:
    redis_client.sadd(schema.running("p"), "vm")
    store = StatusStore(redis_client)
    assert store.total_running(["p"]) == 1
    redis_client.script_flush()
    assert store.total_running(["p"]) == 1


def test_script_sees_writes_immediately(redis_client: redis.Redis) -> None:
    """No cache: each reading is fresh."""
    store = StatusStore(redis_client)
    for n in range(3):
        assert store.status(["p"]).counts["ready"]["p"] == n
        redis_client.sadd(schema.ready("p"), f"vm{n}")


def test_status_bodies_equal_through_the_script_and_the_pipeline(
        client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    pools = [api_pool(name, size) for name, size in zip(NAMES, (5, 0, 2, 3, 1, 4), strict=True)]
    pools[0] = dataclasses.replace(pools[0], alias=("alpha", "first"))
    pools[1] = dataclasses.replace(pools[1], standby=StandbyTier(count=2))  # 2 on standby
    pools[3] = dataclasses.replace(pools[3], alias=("alpha",),
                                   standby=StandbyTier(count=None, state="powered_off"))
    config = api_config(pools)
    by_script = api(client, config)
    monkeypatch.setattr(status_resource, "StatusStore", PipelineStatusStore)
    by_pipeline = api(client, config)
    seed(client, NAMES)
    today = timefmt.date_bucket(by_script.clock.now())
    client.hset(schema.clone_stats(today), mapping={"pool-a:vm1": "2.5", "pool b:vm2": "3.25"})
    client.hset(schema.boot_stats(today), mapping={"pool-a:vm1": "61", "ünïcode:vm9": "9"})
    for path, queries in (("/api/v3/status", VIEWS), ("/api/v3/totalrunning", [""]),
                          ("/api/v3/poolstat", ["pool=alpha,colon:pool,empty,nope"])):
        for query in queries:
            one = by_script.client.simulate_get(path, query_string=query)
            two = by_pipeline.client.simulate_get(path, query_string=query)
            assert (one.status_code, one.text) == (two.status_code, two.text), (path, query)
            assert one.status_code == 200
