"""The recorded history (actors/history*.py) and the dashboard endpoints that read it."""

from __future__ import annotations

from pathlib import Path

import pykka
import pytest
import redis

from tests.api_harness import Api, api, api_config, api_pool
from tests.harness import make_config, started
from tests.harness import pool as dummy_pool
from vmpooler.actors.config import load_config
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.service.history_recorder import HistoryRecorder, next_delay
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.dlq_store import DeadLetter
from vmpooler.actors.storage.history_store import RETENTION, HistoryStore, Point, rates
from vmpooler.actors.storage.wait_store import Wait, WaitStore
from vmpooler.web.resources.dashboard_data import REPEAT, vmpooler_history

START = 1_700_000_040.0  # a minute boundary


def seed(client: redis.Redis, pool: str, queue: str, count: int) -> None:
    for n in range(count):
        client.sadd(getattr(schema, queue)(pool), f"{pool}-{queue}-{n}")
        client.hset(schema.vm(f"{pool}-{queue}-{n}"), mapping={"template": pool})


# -- the store ------------------------------------------------------------------------------
def test_a_point_holds_the_counts_and_the_counters(redis_client: redis.Redis) -> None:
    seed(redis_client, "a", "ready", 3)
    seed(redis_client, "a", "running", 2)
    seed(redis_client, "a", "pending", 1)
    redis_client.hset(schema.history_checkouts(), "a", 7)
    redis_client.hset(schema.history_clones(), "a", 4)
    store = HistoryStore(redis_client)
    assert store.record(["a", "b"], START + 59.9, 60) == START
    assert store.read(["a", "b"], 0) == {"a": [Point(int(START), 3, 2, 1, 7, 4)],
                                         "b": [Point(int(START), 0, 0, 0, 0, 0)]}
    store.record(["a"], START + 30, 60)  # the same interval again: replaced, not added
    assert redis_client.zcard(schema.history("a")) == 1


def test_points_older_than_24_hours_are_trimmed(redis_client: redis.Redis) -> None:
    store = HistoryStore(redis_client)
    for n in range(3):
        store.record(["a"], START + n * 60, 60)
    store.record(["a"], START + RETENTION + 60, 60)
    ts = [p.t for p in store.read(["a"], 0)["a"]]
    assert ts == [int(START) + 60, int(START) + 120, int(START) + RETENTION + 60]
    assert 0 < redis_client.ttl(schema.history("a")) <= RETENTION + 60


def test_the_size_is_bounded(redis_client: redis.Redis) -> None:
    store = HistoryStore(redis_client, max_points=5)
    for n in range(12):
        store.record(["a"], START + n, 1)
    points = store.read(["a"], 0)["a"]
    assert [p.t for p in points] == [int(START) + n for n in range(7, 12)]


def test_read_skips_what_it_cannot_parse(redis_client: redis.Redis) -> None:
    redis_client.zadd(schema.history("a"), {"junk": 1, "1:2:3": 2, "5:1:1:1:x:1": 5,
                                            "9:1:2:3:4:5": 9})
    assert HistoryStore(redis_client).read(["a"], 0)["a"] == [Point(9, 1, 2, 3, 4, 5)]


def test_rates_are_differences_and_survive_a_reset() -> None:
    assert rates([]) == []
    assert rates([5, 7, 7, 10, 2]) == [0, 2, 0, 3, 2]


def test_the_scripts_count_into_the_history_counters() -> None:
    from vmpooler.actors.storage.schema import CheckoutScripts, Scripts
    assert f"'{schema.history_checkouts()}'" in CheckoutScripts.CHECKOUT
    assert f"'{schema.history_clones()}'" in Scripts.CLONE_SUCCEEDED
    assert len(schema.ready("")) + 1 == 18  # the script's string.sub offset


def test_clone_succeeded_counts_per_pool(redis_client: redis.Redis) -> None:
    from vmpooler.actors.storage.schema import Scripts
    script = redis_client.register_script(Scripts.CLONE_SUCCEEDED)
    for vm in ("v1", "v2"):
        script(keys=[schema.tasks_clone(), schema.vm(vm), schema.clone_stats("2024-01-01"),
                     schema.tasks_clone_slots("m")],
               args=[f"debian-12:{vm}", "1.5", "", vm])
    assert redis_client.hget(schema.history_clones(), "debian-12") == "2"


# -- the recorder -----------------------------------------------------------------------------
def test_next_delay_lands_on_the_interval_boundary() -> None:
    assert next_delay(START + 15, 60) == 45
    assert next_delay(START, 60) == 60
    assert next_delay(START + 59.9999, 60) == pytest.approx(60.0001)


def test_the_recorder_writes_one_point_per_interval_on_the_fake_clock(
        redis_client: redis.Redis) -> None:
    clock = FakeClock(start=START + 10)
    seed(redis_client, "a", "ready", 1)
    ref = HistoryRecorder.start(pools=["a"], store=HistoryStore(redis_client, max_points=30),
                                interval=60, clock=clock, scheduler=clock)
    try:
        def drain() -> None:
            ref.ask(None)  # handled after every earlier message

        drain()
        clock.advance(60 * 40, after_each=drain)
        points = HistoryStore(redis_client).read(["a"], 0)["a"]
        assert len(points) == 30  # bounded
        ts = [p.t for p in points]
        assert ts == list(range(ts[0], ts[0] + 30 * 60, 60))
        assert ts[-1] == int(START) + 40 * 60 and all(p.ready == 1 for p in points)
        assert [due for due, _ in clock.pending()] == [pytest.approx(50.0)]
    finally:
        ref.stop()
    assert pykka.ActorRegistry.get_by_urn(ref.actor_urn) is None


# -- the endpoints ----------------------------------------------------------------------------
@pytest.fixture
def hist(redis_client: redis.Redis) -> Api:
    a = api(redis_client, api_config([api_pool("deb-1", 5), api_pool("deb-2", 2),
                                      api_pool("win", 1)]))
    now = int(a.clock.now()) // 60 * 60
    for n, (ready, running, checkouts) in enumerate([(1, 0, 10), (2, 1, 12), (3, 2, 15)]):
        t = now - (3 - n) * 60
        for pool in ("deb-1", "deb-2"):
            redis_client.zadd(schema.history(pool), {
                Point(t, ready, running, 0, checkouts, n).member(): t})
    old = now - 7200
    redis_client.zadd(schema.history("win"), {Point(old, 9, 9, 9, 9, 9).member(): old})
    a.add_vm("deb-1", "deb-1-r", "ready")
    return a


def test_vmpooler_history_repeats_each_point() -> None:
    assert vmpooler_history([], 4) == [4]
    assert vmpooler_history([1, 2], 4) == [1] * REPEAT + [2] * REPEAT


def test_pool_stats_history_is_the_last_hour(hist: Api) -> None:
    body = hist.client.simulate_get("/dashboard/stats/vmpooler/pool",
                                    query_string="history").json
    assert body["deb-1"] == {"size": 5, "ready": 1, "history": [1] * 8 + [2] * 8 + [3] * 8}
    assert body["win"] == {"size": 1, "ready": 0, "history": [0]}  # its point is 2 h old


def test_running_stats_history_is_summed_per_major(hist: Api) -> None:
    body = hist.client.simulate_get("/dashboard/stats/vmpooler/running",
                                    query_string="history").json
    assert body["deb"] == {"running": 0, "history": [0] * 8 + [2] * 8 + [4] * 8}
    assert body["win"] == {"running": 0, "history": [0]}


def test_history_endpoint(hist: Api) -> None:
    resp = hist.client.simulate_get("/dashboard/stats/history", query_string="minutes=60")
    assert resp.status_code == 200
    body = resp.json
    assert body["since"] == body["now"] - 3600
    deb = body["pools"]["deb-1"]
    assert deb["ready"] == [1, 2, 3] and deb["running"] == [0, 1, 2]
    assert deb["checkouts"] == [0, 2, 3] and deb["clones"] == [0, 1, 1]
    assert body["pools"]["win"] == {k: [] for k in deb}
    wide = hist.client.simulate_get("/dashboard/stats/history", query_string="minutes=999999")
    assert wide.json["since"] == wide.json["now"] - RETENTION
    assert len(wide.json["pools"]["win"]["t"]) == 1


def test_activity_lists_requests_and_the_newest_errors(hist: Api) -> None:
    r = hist.redis
    now = hist.clock.now()
    r.zadd(schema.provisioning_request(), {"req-old": now - 100})
    r.zadd(schema.provisioning_processing(), {"req-new": now - 10})
    r.hset(schema.odrequest("req-new"), mapping={"status": "pending", "token:user": "jo",
                                                 "requested": "deb-1:2"})
    for n in range(12):
        entry = DeadLetter.now(vm=f"vm{n}", pool="deb-1", queue="clone",
                               error_class="RuntimeError", error_message=f"boom {n}",
                               epoch=now - 100 + n)
        r.zadd(schema.dlq("clone"), {entry.member(): entry.epoch})
    pending = DeadLetter.now(vm="late", pool="win", queue="pending", error_class="",
                             error_message="never ready", epoch=now)
    r.zadd(schema.dlq("pending"), {pending.member(): pending.epoch})
    body = hist.client.simulate_get("/dashboard/stats/activity").json
    ttl = hist.ctx.config.settings.ondemand_request_ttl * 60
    assert [q["id"] for q in body["requests"]] == ["req-new", "req-old"]
    assert body["requests"][0] == {"id": "req-new", "created": int(now - 10), "age": 10,
                                   "deadline": int(now - 10) + ttl, "status": "pending",
                                   "user": "jo", "requested": "deb-1:2", "priority": "normal",
                                   "queue_position": None, "estimated_ready_at": None}
    assert body["requests"][1]["status"] == "pending" and body["requests"][1]["user"] == ""
    errors = body["errors"]
    assert len(errors) == 10
    assert errors[0] == {"queue": "pending", "vm": "late", "pool": "win", "error_class": "",
                         "error_message": "never ready", "at": int(now)}
    assert [e["vm"] for e in errors[1:3]] == ["vm11", "vm10"]


def test_activity_shows_who_asked_and_the_published_wait(hist: Api) -> None:
    """A request's own ``user`` (who asked) wins over its token's user; its priority and the
    on-demand manager's published position and estimate are shown."""
    r = hist.redis
    now = hist.clock.now()
    r.zadd(schema.provisioning_processing(), {"req-q": now - 5, "req-bad": now - 6})
    r.hset(schema.odrequest("req-q"), mapping={"token:user": "jo", "user": "alice",
                                               "priority": "high", "requested": "deb-1:deb-1:3"})
    WaitStore(r).publish_waits({"req-q": Wait(4, now + 95.4, now)}, [])
    r.hset(schema.waits(), "req-bad", "not a wait")
    rows = {q["id"]: q for q in hist.client.simulate_get("/dashboard/stats/activity")
            .json["requests"]}
    assert {k: rows["req-q"][k] for k in ("user", "priority", "queue_position",
                                          "estimated_ready_at")} == {
        "user": "alice", "priority": "high", "queue_position": 4,
        "estimated_ready_at": round(now + 95.4)}
    assert rows["req-bad"]["queue_position"] is None


def test_activity_when_nothing_happens(hist: Api) -> None:
    body = hist.client.simulate_get("/dashboard/stats/activity").json
    assert body["requests"] == [] and body["errors"] == []


def test_a_recorder_records_only_the_pools_its_manager_owns(redis_client: redis.Redis) -> None:
    """With several managers each records its own pools' points (not every pool thrice)."""
    clock = FakeClock(start=START + 10)
    seed(redis_client, "a", "ready", 1)
    ref = HistoryRecorder.start(pools=["a", "b"], store=HistoryStore(redis_client),
                                interval=60, clock=clock, scheduler=clock,
                                owns=lambda pool: pool == "a")
    try:
        ref.ask(None)
        assert redis_client.exists(schema.history("a"))
        assert not redis_client.exists(schema.history("b"))
    finally:
        ref.stop()


def test_the_system_records_at_the_configured_interval(redis_client: redis.Redis) -> None:
    """``:config: history_interval`` (or ``VMPOOLER_HISTORY_INTERVAL``) sets the recorder's
    interval: 10 s gives six points a minute instead of one."""
    config = make_config([dummy_pool("h", 0)], history_interval=10)
    with started(redis_client, config) as h:
        ref = h.system.actor_ref("history")
        assert ref is not None
        ref.ask(None)
        h.clock.advance(60, after_each=lambda: ref.ask(None))
        points = HistoryStore(redis_client).read(["h"], 0)["h"]
        assert len(points) >= 6


def test_the_history_interval_is_read_from_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(":config:\n  history_interval: 30\n")
    assert load_config(path, environ={}, cwd=tmp_path).settings.history_interval == 30
    config = load_config(path, environ={"VMPOOLER_HISTORY_INTERVAL": "1"}, cwd=tmp_path)
    assert config.settings.history_interval == 1
    path.write_text(":config: {}\n")
    assert load_config(path, environ={}, cwd=tmp_path).settings.history_interval == 60
