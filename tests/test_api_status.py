"""``/status``, ``/poolstat``, ``/totalrunning`` and ``/summary`` through Falcon over real Redis."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import date, timedelta
from typing import Any

import pytest
import redis

from tests.api_harness import Api, api, api_config, api_pool
from vmpooler.actors.config import PoolConfig
from vmpooler.actors.storage import schema, timefmt
from vmpooler.web.stats import round1

STATUS = "/api/v3/status"
ALL_SECTIONS = ["boot", "capacity", "clone", "pools", "providers", "queue", "status"]
VMPOOLER_SECTIONS = ["boot", "capacity", "clone", "pools", "queue", "status"]
"""The sections without a ``view``: vmpooler 3.9.1's; ``providers`` (ours) only on request."""


class CountingRedis(redis.Redis):
    """The real client, counting round trips: ``direct`` commands, and per pipeline executed
    ``(transaction?, number of commands)`` in ``pipelines``."""

    def __init__(self, base: redis.Redis) -> None:
        super().__init__(connection_pool=base.connection_pool)
        self.direct = 0
        self.pipelines: list[tuple[bool, int]] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.direct += 1
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction=transaction, shard_hint=shard_hint)
        run = pipe.execute

        def execute(raise_on_error: bool = True) -> Any:
            self.pipelines.append((transaction, len(pipe.command_stack)))
            return run(raise_on_error)

        pipe.execute = execute  # type: ignore[method-assign]
        return pipe


def three_pools() -> list[PoolConfig]:
    """vmpooler's status_spec pools: two aliases, no alias, and a string alias."""
    pool3 = api_pool("pool3", 1, alias=("NotArray",))
    return [api_pool("pool1", 5, alias=("poolone", "poolun")), api_pool("pool2", 10),
            dataclasses.replace(pool3, raw={**pool3.raw, "alias": "NotArray"})]


@pytest.fixture
def a(redis_client: redis.Redis) -> Api:
    return api(redis_client, api_config(three_pools()))


def today(a: Api) -> str:
    return timefmt.date_bucket(a.clock.now())


def shift(day: str, days: int) -> str:
    return (date.fromisoformat(day) + timedelta(days=days)).isoformat()


def seed(a: Api, pool: str, queue: str, *vms: str) -> None:
    for vm in vms:
        a.add_vm(pool, vm, queue)


def get(a: Api, path: str, query: str = "") -> Any:
    resp = a.client.simulate_get(path, query_string=query)
    assert resp.headers["content-type"] == "application/json"
    return resp


# -- /status ---------------------------------------------------------------------------------
def test_status_has_every_section_sorted_and_counts_per_pool(a: Api) -> None:
    seed(a, "pool1", "ready", "r1", "r2")
    seed(a, "pool1", "running", "u1")
    seed(a, "pool2", "pending", "p1")
    seed(a, "pool3", "ready", "r3")
    a.redis.hset(schema.lastboot(), "pool1", "2023-11-14 10:00:00 +0000")
    resp = get(a, f"{STATUS}/")
    assert resp.status_code == 200
    body = resp.json
    assert list(body) == VMPOOLER_SECTIONS
    assert body["pools"] == {
        "pool1": {"ready": 2, "running": 1, "pending": 0, "max": 5,
                  "lastBoot": "2023-11-14 10:00:00 +0000", "alias": ["poolone", "poolun"]},
        "pool2": {"ready": 0, "running": 0, "pending": 1, "max": 10, "lastBoot": ""},
        "pool3": {"ready": 1, "running": 0, "pending": 0, "max": 1, "lastBoot": "",
                  "alias": "NotArray"},
    }
    assert list(body["pools"]["pool1"]) == ["ready", "running", "pending", "max", "lastBoot",
                                            "alias"]


@pytest.mark.parametrize(("query", "sections"), [
    ("", VMPOOLER_SECTIONS),
    ("view", VMPOOLER_SECTIONS),
    ("view=providers", ["providers", "status"]),
    ("view=pools,providers", ["pools", "providers", "status"]),
    ("view=boot,capacity,clone,pools,providers,queue", ALL_SECTIONS),
    ("view=capacity", ["capacity", "status"]),
    ("view=queue,pools", ["pools", "queue", "status"]),
    ("view=boot,clone,bogus", ["boot", "clone", "status"]),
    ("view=bogus", ["status"]),
    ("view=", ["status"]),
])
def test_status_view_selects_sections(a: Api, query: str, sections: list[str]) -> None:
    assert list(get(a, STATUS, query).json) == sections


def test_status_lists_empty_pools_whatever_the_view(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool("pool1", 5), api_pool("pool2", 2),
                                      api_pool("pool3", 0), api_pool("pool4", 1)]))
    a.add_vm("pool4", "r1")
    for query in ("", "view=capacity", "view="):
        status = get(a, STATUS, query).json["status"]
        assert status == {"ok": False, "message": "Found 2 empty pools.",
                          "empty": ["pool1", "pool2"], "uptime": 0.0}
        assert list(status) == ["ok", "message", "empty", "uptime"]


def test_status_ok_when_no_pool_is_empty_and_uptime_follows_the_clock(a: Api) -> None:
    for pool in ("pool1", "pool2", "pool3"):
        seed(a, pool, "ready", f"{pool}-vm")
    a.clock.advance(12.34)
    assert get(a, STATUS, "view=").json == {"status": {
        "ok": True, "message": "Battle station fully armed and operational.", "uptime": 12.3}}


def test_capacity_percent_and_size_overrides(a: Api) -> None:
    seed(a, "pool1", "ready", "r1")
    seed(a, "pool2", "ready", "r2", "r3")
    assert get(a, STATUS, "view=capacity").json["capacity"] == {
        "current": 3, "total": 16, "percent": 18.8}
    a.redis.hset(schema.config_poolsize(), mapping={"pool2": "4", "pool3": "zero?"})
    body = get(a, STATUS).json
    assert body["capacity"] == {"current": 3, "total": 10, "percent": 30.0}
    assert [body["pools"][p]["max"] for p in ("pool1", "pool2", "pool3")] == [5, 4, 1]
    assert body["status"]["empty"] == ["pool3"]
    a.redis.hset(schema.config_poolsize(), "pool3", "0")
    status = get(a, STATUS, "view=").json["status"]
    assert (status["ok"], "empty" in status) == (True, False)
    a.redis.hset(schema.config_poolsize(), "pool1", "7")
    assert get(a, "/api/v3/poolstat", "pool=poolone").json["pools"]["pool1"]["max"] == 7


@pytest.mark.parametrize("pools", [[], [api_pool("pool1", 0)]])
def test_endpoints_answer_without_any_size(redis_client: redis.Redis,
                                           pools: list[PoolConfig]) -> None:
    a = api(redis_client, api_config(pools))
    body = get(a, STATUS).json
    assert body["capacity"] == {"current": 0, "total": 0, "percent": 0}
    assert body["status"]["ok"] is True
    assert get(a, "/api/v3/totalrunning").json == {"running": 0}
    assert get(a, "/api/v3/poolstat", "pool=x").json == {"pools": {}}


def test_queue_counts_several_pools_in_the_right_places(a: Api) -> None:
    seed(a, "pool1", "ready", "r1", "r2")
    seed(a, "pool1", "running", "u1")
    assert get(a, STATUS, "view=queue").json["queue"] == {
        "requested": 0, "pending": 0, "cloning": 0, "booting": 0, "ready": 2, "running": 1,
        "completed": 0, "total": 3}


def test_queue_counts_the_on_demand_backlog_and_clones(a: Api) -> None:
    a.redis.zadd(schema.provisioning_request(), {"req-a": 1, "req-b": 2})
    a.redis.zadd(schema.provisioning_processing(), {"req-c": 3})
    a.redis.zadd(schema.odcreate_task(), {"poolone:pool1:3:req-c": 3, "pool2:pool2:1:req-d": 1,
                                          "pool2:pool2:0:req-e": 0, "garbage": 5})
    a.redis.set(schema.tasks_clone(), "2")
    a.redis.set(schema.tasks_ondemandclone(), "1")
    seed(a, "pool2", "pending", "p0", "p1", "p2", "p3")
    seed(a, "pool3", "completed", "c1")
    seed(a, "pool1", "ready", "r1")
    assert get(a, STATUS, "view=queue").json["queue"] == {
        "requested": 4, "pending": 4, "cloning": 3, "booting": 1, "ready": 1, "running": 0,
        "completed": 1, "total": 10}
    a.redis.set(schema.tasks_clone(), "9")
    assert get(a, STATUS, "view=queue").json["queue"]["booting"] == 0


def test_clone_and_boot_sections_are_todays_metrics(a: Api) -> None:
    day = today(a)
    a.redis.hset(schema.clone_stats(day), mapping={"pool1:vm1": "2.5", "pool2:vm2": "3.25"})
    a.redis.hset(schema.clone_stats(shift(day, -1)), "pool1:old", "100")
    a.redis.hset(schema.boot_stats(day), "pool1:vm1", "60")
    body = get(a, STATUS, "view=clone,boot").json
    assert body["clone"] == {"duration": {"average": 2.9, "min": 2.5, "max": 3.25,
                                          "total": 5.75}, "count": {"total": 2}}
    assert body["boot"] == {"duration": {"average": 60.0, "min": 60.0, "max": 60.0,
                                         "total": 60.0}, "count": {"total": 1}}


def test_status_for_100_pools_is_one_evalsha_round_trip(redis_client: redis.Redis) -> None:
    pools = [api_pool(f"pool{n}", 2) for n in range(100)]
    counting = CountingRedis(redis_client)
    a = api(counting, api_config(pools))
    for n in range(0, 100, 2):
        redis_client.sadd(schema.ready(f"pool{n}"), f"vm{n}")
    redis_client.sadd(schema.running("pool1"), "vm-r")
    every = "view=boot,capacity,clone,pools,providers,queue"  # ours too
    # loads the script if this server does not have it yet
    a.client.simulate_get(STATUS, query_string=every)
    redis_client.config_resetstat()
    counting.direct = 0
    body = a.client.simulate_get(STATUS, query_string=every).json
    stats = redis_client.info("commandstats")
    # the call is written pre-encoded on a connection of the client's pool (PreparedCall),
    # not through execute_command; redis-server saw one EVALSHA and nothing else
    assert counting.direct == 0
    assert counting.pipelines == []
    assert stats["cmdstat_evalsha"]["calls"] == 1
    # redis-server counts the commands the script ran: SCARD of 4 queues x 100 pools, ...
    assert stats["cmdstat_scard"]["calls"] == 4 * 100
    # INFO and CONFIG RESETSTAT are the test's own; Redis 7 counts subcommands apart
    # ("cmdstat_config|resetstat"), older servers under the command ("cmdstat_config")
    ours = {k: v["calls"] for k, v in stats.items()
            if k.split("|")[0] not in ("cmdstat_info", "cmdstat_config")}
    # ... plus 9 for the rest, one HGETALL of the one provider's published state and one
    # HMGET of the pools' configuration errors
    assert sum(ours.values()) == 1 + 4 * 100 + 9 + 1 + 1
    # the day's clone and boot durations are summed inside Redis (HVALS), the provider's
    # published state read whole
    assert stats["cmdstat_hvals"]["calls"] == 2
    assert stats["cmdstat_hgetall"]["calls"] == 1
    assert (body["queue"]["ready"], body["queue"]["running"]) == (50, 1)
    assert body["capacity"] == {"current": 50, "total": 200, "percent": 25.0}
    assert len(body["status"]["empty"]) == 50


# -- /poolstat and /totalrunning ------------------------------------------------------------
@pytest.mark.parametrize(("query", "expected"), [
    ("", {}),
    ("pool", {}),
    ("pool=nope", {}),
    ("pool=pool1", {"pool1": {"max": 5, "alias": ["poolone", "poolun"], "ready": 1}}),
    ("pool=poolun", {"pool1": {"max": 5, "alias": ["poolone", "poolun"], "ready": 1}}),
    ("pool=pool2", {"pool2": {"max": 10, "ready": 0}}),
    ("pool=NotArray,pool2", {"pool2": {"max": 10, "ready": 0},
                             "pool3": {"max": 1, "alias": "NotArray", "ready": 0}}),
])
def test_poolstat_by_name_or_alias(a: Api, query: str, expected: dict[str, Any]) -> None:
    a.add_vm("pool1", "r1")
    resp = get(a, "/api/v3/poolstat/", query)
    assert resp.status_code == 200
    assert resp.json == {"pools": expected}
    for name, entry in resp.json["pools"].items():
        assert list(entry) == list(expected[name])


def test_totalrunning_sums_configured_pools(a: Api) -> None:
    assert get(a, "/api/v3/totalrunning").json == {"running": 0}
    seed(a, "pool1", "running", "u1", "u2")
    seed(a, "pool3", "running", "u3")
    seed(a, "elsewhere", "running", "u4")
    assert get(a, "/api/v3/totalrunning/").json == {"running": 3}


# -- /summary ---------------------------------------------------------------------------------
@pytest.fixture
def seeded(a: Api) -> Iterator[tuple[Api, str, str]]:
    """Two days of boot, clone and tag data: yesterday and today."""
    day2 = today(a)
    day1 = shift(day2, -1)
    a.redis.hset(schema.boot_stats(day1), mapping={
        "pool1:vm1": "10", "pool1:vm2": "20", "pool2:vm3": "30"})
    a.redis.hset(schema.boot_stats(day2), mapping={"pool1:vm4": "40", "novm": "5"})
    a.redis.hset(schema.clone_stats(day2), "pool2:vm5", "1.25")
    a.redis.hset(schema.tag_stats(day1), mapping={
        "vm1:user": "jdoe", "vm2:user": "jdoe", "vm3:user": "alice", "vm1:project": "x"})
    a.redis.hset(schema.tag_stats(day2), mapping={"vm4:user": "jdoe", "weird": "v"})
    yield a, day1, day2


def test_summary_defaults_to_today(seeded: tuple[Api, str, str]) -> None:
    a, _, day2 = seeded
    body = get(a, "/api/v3/summary").json
    assert list(body) == ["daily", "boot", "clone", "tag"]
    assert [day["date"] for day in body["daily"]] == [day2]
    assert list(body["daily"][0]) == ["date", "boot", "clone", "tag"]
    assert body["daily"][0]["clone"] == {
        "duration": {"average": 1.3, "min": 1.25, "max": 1.25, "total": 1.25,
                     "pool": {"pool2": {"total": 1.25, "average": 1.3, "min": 1.25,
                                        "max": 1.25}}},
        "count": {"total": 1, "pool": {"pool2": {"total": 1}}}}


def test_summary_daily_entries_and_per_pool_breakdowns(seeded: tuple[Api, str, str]) -> None:
    a, day1, day2 = seeded
    body = get(a, "/api/v3/summary", f"from={shift(day1, -1)}&to={day2}").json
    assert [day["date"] for day in body["daily"]] == [shift(day1, -1), day1, day2]
    empty_day = body["daily"][0]
    assert empty_day["boot"] == {"duration": {"average": 0, "min": 0, "max": 0, "total": 0},
                                 "count": {"total": 0}}
    assert empty_day["tag"] == {}
    assert body["daily"][1]["boot"] == {
        "duration": {"average": 20.0, "min": 10.0, "max": 30.0, "total": 60.0, "pool": {
            "pool1": {"total": 30.0, "average": 15.0, "min": 10.0, "max": 20.0},
            "pool2": {"total": 30.0, "average": 30.0, "min": 30.0, "max": 30.0}}},
        "count": {"total": 3, "pool": {"pool1": {"total": 2}, "pool2": {"total": 1}}}}
    assert body["daily"][2]["boot"]["count"]["pool"] == {"pool1": {"total": 1},
                                                         "unknown": {"total": 1}}


def test_summary_range_level_statistics(seeded: tuple[Api, str, str]) -> None:
    a, day1, day2 = seeded
    boot = get(a, "/api/v3/summary", f"from={day1}&to={day2}").json["boot"]
    assert boot == {
        "duration": {"average": 21.0, "min": 5.0, "max": 40.0, "total": 105.0, "pool": {
            "pool1": {"total": 70.0, "average": 23.3, "min": 10.0, "max": 40.0},
            "pool2": {"total": 30.0, "average": 30.0, "min": 30.0, "max": 30.0},
            "unknown": {"total": 5.0, "average": 5.0, "min": 5.0, "max": 5.0}}},
        "count": {"average": 2.5, "min": 2, "max": 3, "total": 5, "pool": {
            "pool1": {"total": 3}, "pool2": {"total": 1}, "unknown": {"total": 1}}}}


def test_summary_tag_counts(seeded: tuple[Api, str, str]) -> None:
    a, day1, day2 = seeded
    body = get(a, "/api/v3/summary", f"from={day1}&to={day2}").json
    assert body["daily"][0]["tag"] == {"user": {"jdoe": 2, "total": 3, "alice": 1},
                                       "project": {"x": 1, "total": 1}}
    assert body["tag"] == {"user": {"jdoe": 3, "total": 4, "alice": 1},
                           "project": {"x": 1, "total": 1},
                           "unknown": {"v": 1, "total": 1}}


def invalid_dates(day: str) -> list[tuple[str, str]]:
    bad = "Invalid date format '{}', must match YYYY-MM-DD."
    return [
        ("from=2023-1-1", bad.format("2023-1-1")),
        ("to=yesterday", bad.format("yesterday")),
        ("from=", bad.format("")),
        ("from=2023-02-30", bad.format("2023-02-30")),
        (f"from={day}&to={shift(day, -1)}",
         "Date range is invalid, 'to' cannot come before 'from'."),
        (f"from={shift(day, 1)}&to={shift(day, 2)}",
         "Date range is invalid, 'from' must be in the past."),
        (f"from={shift(day, -366)}&to={day}",
         "Date range is too large, it may span at most 366 days."),
        (f"from={day}&to={shift(day, 9999)}",
         "Date range is too large, it may span at most 366 days."),
    ]


@pytest.mark.parametrize("path", ["/api/v3/summary", "/api/v3/summary/boot",
                                  "/api/v3/summary/tag/user/"])
def test_summary_date_validation(a: Api, path: str) -> None:
    for query, message in invalid_dates(today(a)):
        resp = get(a, path, query)
        assert (resp.status_code, resp.json) == (400, {"ok": False, "error": message}), query


def test_summary_accepts_a_366_day_range_in_one_round_trip(redis_client: redis.Redis) -> None:
    counting = CountingRedis(redis_client)
    a = api(counting, api_config(three_pools()))
    counting.direct = 0
    resp = get(a, "/api/v3/summary", f"from={shift(today(a), -365)}&to={today(a)}")
    assert resp.status_code == 200
    assert len(resp.json["daily"]) == 366
    assert counting.direct == 0
    assert counting.pipelines == [(False, 3 * 366)]


def test_summary_route_sections_and_keys(seeded: tuple[Api, str, str]) -> None:
    a, day1, day2 = seeded
    query = f"from={day1}&to={day2}"
    boot = get(a, "/api/v3/summary/boot/", query).json
    assert list(boot) == ["boot", "daily"]
    assert boot["boot"]["count"]["total"] == 5
    assert [list(day) for day in boot["daily"]] == [["date", "boot"]] * 2
    duration = get(a, "/api/v3/summary/boot/duration", query).json
    assert list(duration["boot"]) == ["duration"]
    assert all(list(day["boot"]) == ["duration"] for day in duration["daily"])
    count = get(a, "/api/v3/summary/clone/count", query).json
    assert count["clone"] == {"count": {"average": 0.5, "min": 0, "max": 1, "total": 1,
                                        "pool": {"pool2": {"total": 1}}}}
    assert get(a, "/api/v3/summary/clone/nothing", query).json["clone"] == {}
    tags = get(a, "/api/v3/summary/tag", query).json
    assert list(tags) == ["tag", "daily"]
    assert tags["tag"]["user"]["total"] == 4
    user = get(a, "/api/v3/summary/tag/user", query).json
    assert user["tag"] == {"user": {"jdoe": 3, "total": 4, "alice": 1}}
    assert user["daily"][1] == {"date": day2, "tag": {"user": {"jdoe": 1, "total": 1}}}


@pytest.mark.parametrize("path", ["/api/v3/summary/daily", "/api/v3/summary/nope/key/"])
def test_summary_unknown_route_is_404(a: Api, path: str) -> None:
    resp = get(a, path)
    assert (resp.status_code, resp.json) == (404, {"ok": False})


def test_round1_rounds_halves_away_from_zero() -> None:
    assert [round1(0.25), round1(2.875), round1(-0.25), round1(1 / 3)] == [0.3, 2.9, -0.3, 0.3]

