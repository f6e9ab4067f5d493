"""A pool sized by demand (``sizing: demand``) in the actor system, over a real redis-server,
on a fake clock: it learns from the checkout log the API's checkout script writes, grows at a
burst, shrinks over silence (never below its floor, never above its ceiling), publishes its
target for /status, and another manager taking the pool over carries on from the same log."""

from __future__ import annotations

import redis

from tests.api_harness import api
from tests.harness import Harness, dummy_for, make_config, pool, started, wait_until
from vmpooler.actors.cluster.ownership import rendezvous_owner
from vmpooler.actors.config.model import DemandSizing
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.checkout_store import CheckoutStore
from vmpooler.actors.storage.demand_store import DemandStore
from vmpooler.actors.storage.heartbeat_store import manager_id
from vmpooler.actors.storage.lease_store import LeaseStore
from vmpooler.actors.system import PoolerSystem


def demand_pool(name: str = "a", *, size_min: int = 1, size_max: int = 8, **extra: object):
    return pool(name, size_max, demand=DemandSizing(size_min=size_min, size_max=size_max,
                                                    target_warm_hit=0.99), **extra)


def checkouts(h: Harness, pool_name: str, count: int) -> int:
    """``count`` checkouts through the API's script at the fake clock's time; how many
    found a ready VM."""
    store = CheckoutStore(h.client)
    now = h.clock.now()
    return sum(store.checkout([[pool_name]], now=timefmt.format_epoch(now), epoch=now).ok
               for _ in range(count))


def ready(client: redis.Redis, pool_name: str) -> int:
    return client.scard(schema.ready(pool_name))


def published(client: redis.Redis, pool_name: str) -> dict[str, str]:
    return DemandStore(client).published([pool_name]).get(pool_name, {})


def test_a_demand_pool_grows_at_a_burst_and_shrinks_over_silence(
    redis_client: redis.Redis,
) -> None:
    config = make_config([demand_pool(check_loop_delay_min=5, check_loop_delay_max=5)])
    with started(redis_client, config) as h:
        h.advance(30)
        assert ready(redis_client, "a") == 1  # nothing learned: size_min
        assert published(redis_client, "a")["reason"] == "minimum"
        assert checkouts(h, "a", 6) == 1  # one served, five missed
        h.advance(30)
        assert ready(redis_client, "a") == 6, "the burst's size is held ready"
        status = published(redis_client, "a")
        assert (status["target"], status["reason"]) == ("6", "forecast")
        assert float(status["warm_hit"]) == round(1 / 6, 4)
        assert checkouts(h, "a", 20) == 6
        h.advance(30)
        assert ready(redis_client, "a") == 8, "never above size_max"
        assert published(redis_client, "a")["reason"] == "ceiling"
        sizes = []
        for _ in range(12):  # three hours of silence
            h.advance(900, step=60)
            sizes.append(ready(redis_client, "a"))
        assert sizes[-1] == 1, sizes  # back to the floor
        assert sizes == sorted(sizes, reverse=True), f"shrinks without flapping: {sizes}"
        assert min(sizes) >= 1


def test_poolsize_override_is_the_floor_of_a_demand_pool(redis_client: redis.Redis) -> None:
    config = make_config([demand_pool(size_min=0, check_loop_delay_min=5,
                                      check_loop_delay_max=5)])
    with started(redis_client, config) as h:
        h.advance(30)
        assert ready(redis_client, "a") == 0
        redis_client.hset(schema.config_poolsize(), "a", "3")
        h.advance(400, step=5)
        assert ready(redis_client, "a") == 3
        status = published(redis_client, "a")
        assert (status["target"], status["reason"], status["floor"]) == ("3", "floor", "3")


def test_the_learned_demand_and_the_target_move_with_the_pool_to_its_new_owner(
    redis_client: redis.Redis,
) -> None:
    """Manager A owns a demand pool and learns a burst from the checkout log; B joins and the
    pool is handed to B, which sizes it from the same log (the target is B's, published
    under B's id) while A stops sizing it."""
    start_a, start_b = 1_700_000_000.0, 1_700_000_001.0
    id_a, id_b = manager_id(start_a), manager_id(start_b)
    name = next(f"pool{n}" for n in range(100)
                if rendezvous_owner([id_a, id_b], f"pool{n}") == id_b)
    config = make_config([demand_pool(name, check_loop_delay_min=5, check_loop_delay_max=5)],
                         manager_heartbeat_interval=5)
    clock_a, clock_b = FakeClock(start=start_a), FakeClock(start=start_b)
    a = PoolerSystem.start(config, redis_client=redis_client, clock=clock_a, scheduler=clock_a,
                           providers={"dummy": dummy_for(config)}, resolver=lambda _f: False)
    b = None
    try:
        wait_until(lambda: published(redis_client, name).get("manager") == id_a, 10,
                   "A to size the pool")
        store = CheckoutStore(redis_client)
        for _ in range(5):
            store.checkout([[name]], now="x", epoch=clock_a.now())
        a.wait_idle()  # A's next cycle is scheduled before time moves (else it never comes)
        clock_a.advance(5)
        wait_until(lambda: published(redis_client, name).get("target") == "5", 10,
                   "A to learn the burst")
        b = PoolerSystem.start(config, redis_client=redis_client, clock=clock_b,
                               scheduler=clock_b, providers={"dummy": dummy_for(config)},
                               resolver=lambda _f: False)
        a.wait_idle()
        clock_a.advance(5)  # A's renewal: B is live, the pool is B's
        wait_until(lambda: (held := LeaseStore(redis_client).holder("pool", name)) is not None
                   and held.holder == id_b, 10, "B to take the pool")
        b.wait_idle()
        clock_b.advance(5)
        wait_until(lambda: published(redis_client, name).get("manager") == id_b, 10,
                   "B to size the pool")
        assert published(redis_client, name)["target"] == "5"
        a.wait_idle()
        clock_a.advance(10)
        a.wait_idle()
        assert published(redis_client, name)["manager"] == id_b, "A sized a pool it gave away"
    finally:
        if b is not None:
            b.stop()
        a.stop()


def test_status_shows_the_target_and_why(redis_client: redis.Redis) -> None:
    """/status (Falcon's test client over the same Redis): ``max`` is the target the owner
    published and ``sizing`` says why; checkouts through the API are what it learns from."""
    config = make_config([demand_pool(check_loop_delay_min=5, check_loop_delay_max=5)])
    with started(redis_client, config) as h:
        web = api(redis_client, config)
        h.advance(30)
        before = web.client.simulate_get("/api/v3/status").json["pools"]["a"]
        assert (before["sizing"]["target"], before["sizing"]["reason"]) == (1, "minimum")
        assert before["max"] == 1
        for n in range(4):  # four clients (one client's misses are bounded)
            web.clock.advance(h.clock.now() - web.clock.now())
            web.client.simulate_post("/api/v3/vm/a", remote_addr=f"10.0.0.{n}")
        h.advance(30)
        entry = web.client.simulate_get("/api/v3/status").json["pools"]["a"]
        assert entry["max"] == 4
        assert entry["sizing"] == {
            "policy": "demand", "size_min": 1, "size_max": 8, "target_warm_hit": 0.99,
            "target": 4, "reason": "forecast", "forecast": 4, "floor": 1, "ceiling": 8,
            "held": False, "clone_time": entry["sizing"]["clone_time"], "warm_hit": 0.25,
            "updated": entry["sizing"]["updated"]}


def test_poolstat_max_of_a_demand_pool_is_its_target(redis_client: redis.Redis) -> None:
    config = make_config([demand_pool(check_loop_delay_min=5, check_loop_delay_max=5),
                          pool("b", 2)])
    with started(redis_client, config) as h:
        checkouts(h, "a", 3)
        h.advance(30)
        web = api(redis_client, config)
        body = web.client.simulate_get("/api/v3/poolstat", query_string="pool=a,b").json
        assert (body["pools"]["a"]["max"], body["pools"]["b"]["max"]) == (3, 2)
