"""The CHECKOUT script and its friends, through CheckoutStore, against a real redis-server."""

from __future__ import annotations

import threading
from collections import Counter

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.checkout_store import CheckoutStore, ReturnOutcome, Taken

NOW = "2024-05-01 13:02:11 +0000"


def seed(client: redis.Redis, pool: str, *vms: str, queue: str = "ready") -> None:
    for vm in vms:
        client.sadd(getattr(schema, queue)(pool), vm)
        client.hset(schema.vm(vm), mapping={"template": pool, "pool": pool})


def state(client: redis.Redis, *pools: str) -> dict[str, object]:
    """Every queue, side set and VM hash of ``pools``: what a failed checkout must not change."""
    snapshot: dict[str, object] = {}
    for pool in pools:
        for queue in ("ready", "running", "completed", "migrating"):
            snapshot[f"{queue}:{pool}"] = client.smembers(getattr(schema, queue)(pool))
        snapshot[f"active:{pool}"] = client.hgetall(schema.active(pool))
    for key in sorted(client.keys(schema.vm("*"))):
        snapshot[key] = client.hgetall(key)
    return snapshot


def test_one_unit_is_accounted_for(redis_client: redis.Redis) -> None:
    seed(redis_client, "p1", "vm1")
    outcome = CheckoutStore(redis_client).checkout([["p1"]], now=NOW)
    assert outcome.ok and outcome.taken == (Taken("p1", "vm1"),)
    assert redis_client.smembers(schema.ready("p1")) == set()
    assert redis_client.smembers(schema.running("p1")) == {"vm1"}
    assert redis_client.smembers(schema.migrating("p1")) == {"vm1"}
    assert redis_client.hgetall(schema.active("p1")) == {"vm1": NOW}
    assert redis_client.hgetall(schema.vm("vm1")) == {
        "template": "p1", "pool": "p1", "checkout": NOW}


def test_token_owner_and_lifetime(redis_client: redis.Redis) -> None:
    seed(redis_client, "p1", "vm1")
    redis_client.hset(schema.token("tok"), mapping={"user": "jdoe", "created": NOW})
    store = CheckoutStore(redis_client)
    outcome = store.checkout([["p1"]], now="later", token="tok", lifetime=2)
    assert outcome.ok
    fields = redis_client.hgetall(schema.vm("vm1"))
    assert fields["token:token"] == "tok" and fields["token:user"] == "jdoe"
    assert fields["lifetime"] == "2"
    assert redis_client.hget(schema.token("tok"), "last") == "later"


def test_unknown_token_writes_nothing(redis_client: redis.Redis) -> None:
    seed(redis_client, "p1", "vm1")
    before = state(redis_client, "p1")
    outcome = CheckoutStore(redis_client).checkout([["p1"]], now=NOW, token="nope")
    assert outcome.bad_token and not outcome.ok
    assert state(redis_client, "p1") == before
    assert not redis_client.exists(schema.token("nope"))


def test_partial_availability_takes_nothing(redis_client: redis.Redis) -> None:
    """2 from p1 (has 2) and 3 from p2 (has 2): the fifth unit fails, all four go back."""
    seed(redis_client, "p1", "a1", "a2")
    seed(redis_client, "p2", "b1", "b2")
    before = state(redis_client, "p1", "p2")
    redis_client.hset(schema.token("tok"), "user", "jdoe")
    outcome = CheckoutStore(redis_client).checkout(
        [["p1"], ["p1"], ["p2"], ["p2"], ["p2"]], now=NOW, token="tok", lifetime=5)
    assert not outcome.ok and outcome.failed_unit == 4 and outcome.taken == ()
    assert state(redis_client, "p1", "p2") == before


def test_failure_on_the_first_unit_takes_nothing(redis_client: redis.Redis) -> None:
    seed(redis_client, "p2", "b1")
    before = state(redis_client, "p1", "p2")
    outcome = CheckoutStore(redis_client).checkout([["p1"], ["p2"]], now=NOW)
    assert not outcome.ok and outcome.failed_unit == 0
    assert state(redis_client, "p1", "p2") == before


def test_candidates_are_tried_in_order(redis_client: redis.Redis) -> None:
    seed(redis_client, "p1", "a1")
    seed(redis_client, "p2", "b1", "b2")
    outcome = CheckoutStore(redis_client).checkout(
        [["p1", "p2"], ["p1", "p2"], ["p2", "p1"]], now=NOW)
    assert outcome.ok
    assert [t.pool for t in outcome.taken] == ["p1", "p2", "p2"]
    assert redis_client.smembers(schema.running("p2")) == {"b1", "b2"}


def test_vm_taken_between_choice_and_script_falls_back(redis_client: redis.Redis) -> None:
    """The API chose p1 first, but p1's last VM went elsewhere before the script ran."""
    seed(redis_client, "p1", "a1")
    seed(redis_client, "p2", "b1")
    store = CheckoutStore(redis_client)
    units = [["p1", "p2"]]  # chosen while p1 still had a1
    assert store.checkout([["p1"]], now=NOW).taken == (Taken("p1", "a1"),)  # a rival wins a1
    outcome = store.checkout(units, now=NOW)
    assert outcome.taken == (Taken("p2", "b1"),)
    before = state(redis_client, "p1", "p2")
    assert not store.checkout(units, now=NOW).ok  # nothing left anywhere: nothing changes
    assert state(redis_client, "p1", "p2") == before


def test_ready_vm_whose_hash_vanished_is_not_handed_out(redis_client: redis.Redis) -> None:
    seed(redis_client, "p1", "good")
    redis_client.sadd(schema.ready("p1"), "ghost")  # in ready, but its hash is gone
    store = CheckoutStore(redis_client)
    first = store.checkout([["p1"]], now=NOW)
    second = store.checkout([["p1"]], now=NOW)
    assert [o.ok for o in (first, second)] == [True, False]
    assert first.taken == (Taken("p1", "good"),)
    assert redis_client.smembers(schema.completed("p1")) == {"ghost"}
    assert not redis_client.exists(schema.vm("ghost"))


def test_concurrent_checkouts_never_hand_out_a_vm_twice(redis_client: redis.Redis) -> None:
    vms = [f"vm{i:03d}" for i in range(100)]
    seed(redis_client, "p1", *vms)
    kwargs = redis_client.connection_pool.connection_kwargs
    pool = redis.BlockingConnectionPool(host=kwargs["host"], port=kwargs["port"],
                                        decode_responses=True, max_connections=50, timeout=30)
    store = CheckoutStore(redis.Redis(connection_pool=pool))
    start = threading.Barrier(200)
    results: list[Taken | str | None] = ["not run"] * 200

    def worker(i: int) -> None:
        start.wait(timeout=30)
        try:
            outcome = store.checkout([["p1"]], now=NOW)
        except redis.RedisError as exc:
            results[i] = repr(exc)
            return
        results[i] = outcome.taken[0] if outcome.ok else None

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    pool.disconnect()
    assert [r for r in results if isinstance(r, str)] == []
    won = [r.vm for r in results if isinstance(r, Taken)]
    assert len(won) == 100
    assert Counter(won).most_common(1)[0][1] == 1
    assert set(won) == set(vms)
    assert redis_client.scard(schema.ready("p1")) == 0
    assert redis_client.smembers(schema.running("p1")) == set(vms)
    assert redis_client.hlen(schema.active("p1")) == 100


def test_return_vm_moves_running_or_ready_only(redis_client: redis.Redis) -> None:
    seed(redis_client, "p1", "r1", queue="running")
    seed(redis_client, "p1", "y1", queue="ready")
    seed(redis_client, "p1", "c1", queue="completed")
    seed(redis_client, "p1", "n1", queue="pending")
    redis_client.hset(schema.active("p1"), "r1", NOW)
    redis_client.sadd(schema.migrating("p1"), "r1")
    store = CheckoutStore(redis_client)
    assert store.return_vm("p1", "r1") == ReturnOutcome.FROM_RUNNING
    assert store.return_vm("p1", "y1") == ReturnOutcome.FROM_READY
    assert store.return_vm("p1", "c1") == ReturnOutcome.ALREADY_COMPLETED
    assert store.return_vm("p1", "r1") == ReturnOutcome.ALREADY_COMPLETED
    assert store.return_vm("p1", "n1") == ReturnOutcome.NOT_RETURNABLE
    assert redis_client.smembers(schema.completed("p1")) == {"r1", "y1", "c1"}
    assert redis_client.smembers(schema.running("p1")) == set()
    assert redis_client.smembers(schema.ready("p1")) == set()
    assert redis_client.smembers(schema.pending("p1")) == {"n1"}
    assert redis_client.hgetall(schema.active("p1")) == {}
    assert redis_client.smembers(schema.migrating("p1")) == set()


def test_return_vm_in_two_queues_ends_in_one(redis_client: redis.Redis) -> None:
    seed(redis_client, "p1", "x", queue="running")
    redis_client.sadd(schema.ready("p1"), "x")
    assert CheckoutStore(redis_client).return_vm("p1", "x") == ReturnOutcome.FROM_RUNNING
    assert not redis_client.sismember(schema.ready("p1"), "x")
    assert redis_client.smembers(schema.completed("p1")) == {"x"}


def test_modify_vm_only_while_the_vm_exists(redis_client: redis.Redis) -> None:
    seed(redis_client, "p1", "vm1")
    store = CheckoutStore(redis_client)
    assert store.modify_vm("vm1", date="2024-05-01", lifetime=3, tags={"url": "x=1,y"},
                           max_tags=32).ok
    assert redis_client.hget(schema.vm("vm1"), "lifetime") == "3"
    assert redis_client.hget(schema.vm("vm1"), "tag:url") == "x=1,y"
    assert redis_client.hgetall(schema.tag_stats("2024-05-01")) == {"vm1:url": "x=1,y"}
    assert redis_client.ttl(schema.tag_stats("2024-05-01")) == -1, "stats_ttl 0: kept"
    gone = store.modify_vm("gone", date="2024-05-01", lifetime=3, tags={"a": "b"}, max_tags=32)
    assert not gone.ok and not gone.exists
    assert not redis_client.exists(schema.vm("gone"))


def test_modify_vm_caps_the_tags_of_a_vm(redis_client: redis.Redis) -> None:
    """The cap counts the VM's ``tag:`` fields plus the names it does not carry yet; a
    refused call writes nothing at all, lifetime included."""
    seed(redis_client, "p1", "vm1")
    store = CheckoutStore(redis_client)
    day = "2024-05-01"
    assert store.modify_vm("vm1", date=day, tags={f"t{n}": "v" for n in range(3)},
                           max_tags=4, stats_ttl=3600).ok
    assert 3590 < redis_client.ttl(schema.tag_stats(day)) <= 3600
    refused = store.modify_vm("vm1", date=day, lifetime=9,
                              tags={"t0": "new", "x": "1", "y": "2"}, max_tags=4)
    assert (refused.ok, refused.exists, refused.tags, refused.new_tags) == (False, True, 3, 2)
    assert redis_client.hget(schema.vm("vm1"), "tag:t0") == "v"
    assert not redis_client.hexists(schema.vm("vm1"), "lifetime")
    assert redis_client.hlen(schema.tag_stats(day)) == 3
    assert store.modify_vm("vm1", date=day, tags={"t0": "new", "x": "1"}, max_tags=4).ok
    assert store.modify_vm("vm1", date=day, tags={"t1": "again"}, max_tags=4).ok, "rewrites"
    assert not store.modify_vm("vm1", date=day, tags={"z": "1"}, max_tags=4).ok
    assert store.modify_vm("vm1", date=day, lifetime=2, max_tags=4).ok, "no tag: no cap"


def test_touch_token(redis_client: redis.Redis) -> None:
    store = CheckoutStore(redis_client)
    assert store.touch_token("nope", now=NOW) is None
    assert not redis_client.exists(schema.token("nope"))
    redis_client.hset(schema.token("t"), "created", NOW)
    assert store.touch_token("t", now="later") == ""
    assert redis_client.hget(schema.token("t"), "last") == "later"


def demand(client: redis.Redis, pool: str) -> list[tuple[str, float]]:
    return client.zrange(schema.demand(pool), 0, -1, withscores=True)


def misses(client: redis.Redis, pool: str) -> list[tuple[str, float]]:
    return client.zrange(schema.demand_misses(pool), 0, -1, withscores=True)


def test_checkouts_served_and_missed_are_logged_per_pool(redis_client: redis.Redis) -> None:
    """Served: ``<epoch>:<vm>`` in the pool that served it; a call that finds no VM: one miss
    per pool that is some unit's first, in that pool's miss log, counted in history_misses."""
    seed(redis_client, "p1", "a1")
    seed(redis_client, "p2", "b1")
    store = CheckoutStore(redis_client)
    assert store.checkout([["p1", "p2"]], now=NOW, epoch=1000.5).ok
    assert demand(redis_client, "p1") == [("1000.500:a1", 1000.5)]
    # unit 2 finds nothing: b1 goes back; units 1 and 3 (p2 first) count one miss, unit 2 one
    outcome = store.checkout([["p2"], ["p1"], ["p2", "p1"]], now=NOW, epoch=1001.0)
    assert not outcome.ok and outcome.failed_unit == 1
    assert misses(redis_client, "p2") == [("1001.000:-1", 1001.0)]
    assert misses(redis_client, "p1") == [("1001.000:-1", 1001.0)]
    assert demand(redis_client, "p1") == [("1000.500:a1", 1000.5)], "misses apart"
    assert demand(redis_client, "p2") == []
    assert redis_client.hgetall(schema.history_misses()) == {"p1": "1", "p2": "1"}
    assert redis_client.smembers(schema.ready("p2")) == {"b1"}
    assert store.checkout([["p1"]], now=NOW).ok is False  # no epoch: nothing logged
    assert len(misses(redis_client, "p1")) == 1


def test_a_requester_logs_a_bounded_number_of_misses_per_pool_and_window(
    redis_client: redis.Redis,
) -> None:
    """With the client's address, one requester (its token's user, else its address) logs
    at most DEMAND_MISS_BUDGET misses per pool per window; others still log theirs."""
    store = CheckoutStore(redis_client)
    budget = schema.DEMAND_MISS_BUDGET
    for n in range(budget + 5):
        store.checkout([["p1"]] * 3, now=NOW, epoch=100.0 + n, client="10.0.0.1")
    assert len(misses(redis_client, "p1")) == budget
    store.checkout([["p1"]], now=NOW, epoch=200.0, client="10.0.0.2")
    assert len(misses(redis_client, "p1")) == budget + 1
    redis_client.hset(schema.token("t"), mapping={"user": "bob"})
    for _ in range(budget + 2):  # bob, from an address that used its budget up
        store.checkout([["p1"]], now=NOW, epoch=300.0, token="t", client="10.0.0.1")
    assert len(misses(redis_client, "p1")) == 2 * budget + 1
    ttl = redis_client.ttl(schema.demand_guard("p1"))
    assert 0 < ttl <= schema.DEMAND_MISS_WINDOW
    redis_client.delete(schema.demand_guard("p1"))  # the window is over
    store.checkout([["p1"]], now=NOW, epoch=400.0, client="10.0.0.1")
    assert len(misses(redis_client, "p1")) == 2 * budget + 2


def test_the_checkout_log_is_bounded_in_time(redis_client: redis.Redis) -> None:
    """Entries older than the retention go at every 64th entry (not at each checkout)."""
    store = CheckoutStore(redis_client)
    store.checkout([["p1"]], now=NOW, epoch=10.0)
    store.checkout([["p1"]], now=NOW, epoch=20.0)
    later = 20.0 + schema.DEMAND_RETENTION
    for n in range(61):
        store.checkout([["p1"]], now=NOW, epoch=later + n)
    assert len(misses(redis_client, "p1")) == 63  # not trimmed yet
    store.checkout([["p1"]], now=NOW, epoch=later + 61)  # the 64th
    assert [s for _m, s in misses(redis_client, "p1")] == [later + n for n in range(62)]


def test_a_stray_key_in_place_of_the_log_never_fails_a_checkout(
    redis_client: redis.Redis,
) -> None:
    seed(redis_client, "p1", "a1")
    redis_client.set(schema.demand("p1"), "not a sorted set")
    assert CheckoutStore(redis_client).checkout([["p1"]], now=NOW, epoch=5.0).ok
    assert redis_client.get(schema.demand("p1")) == "not a sorted set"
