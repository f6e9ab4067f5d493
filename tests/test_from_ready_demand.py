"""VMs an on-demand request takes from ready (``ondemand_from_ready``) are logged in their
pool's checkout log as checkouts, so demand sizing sees that demand (real redis-server,
fake clock)."""

from __future__ import annotations

import redis

from tests.harness import make_config, started, wait_until
from tests.test_demand_sizing import demand_pool
from tests.test_from_ready import seed_ready
from tests.test_ondemand import gated, status
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.checkout_store import CheckoutStore
from vmpooler.actors.storage.demand_store import DemandStore
from vmpooler.actors.storage.request_store import Entry, RequestStore


def test_a_demand_pools_log_gets_the_vms_a_request_takes_from_ready(
    redis_client: redis.Redis,
) -> None:
    config = make_config([demand_pool(size_min=2, ondemand_from_ready=True,
                                      check_loop_delay_min=5, check_loop_delay_max=5)])
    provider = gated(config)
    provider.all_ready = True
    with started(redis_client, config, provider=provider) as h:
        warm = h.wait_full("a", 2)
        taken_at = h.clock.now()
        rid = h.system.request_ondemand({"a": 2})
        wait_until(lambda: status(redis_client, rid) == "ready")
        delivered = set(h.system.ondemand_request(rid).delivered[("a", "a")])
        assert delivered == warm
        logged = DemandStore(redis_client).since("a", 0)
        assert sorted((entry.t, entry.vm) for entry in logged) == sorted(
            (taken_at, vm) for vm in delivered)
        assert redis_client.zrange(schema.demand("a"), 0, -1) == sorted(
            f"{taken_at:.3f}:{vm}" for vm in delivered)  # as the checkout script writes them


def test_a_take_is_logged_as_a_checkout_and_only_with_an_epoch(
    redis_client: redis.Redis,
) -> None:
    store = RequestStore(redis_client)
    seed_ready(redis_client, "a", ["vm1", "vm2", "vm3"])
    store.create("r1", [Entry("a", "a", 1)], created=1)
    store.create("r2", [Entry("a", "a", 1)], created=1)
    [vm] = store.take_ready("r1", Entry("a", "a", 1), 1, now="now", lifetime=None,
                            epoch=1000.25)
    assert redis_client.zrange(schema.demand("a"), 0, -1, withscores=True) == [
        (f"1000.250:{vm}", 1000.25)]
    CheckoutStore(redis_client).checkout([["a"]], now="now", epoch=1001.0)
    assert [entry.vm for entry in DemandStore(redis_client).since("a", 0)] == [
        vm, redis_client.zrange(schema.demand("a"), -1, -1)[0].split(":")[1]]
    assert len(store.take_ready("r2", Entry("a", "a", 1), 1, now="now", lifetime=None)) == 1
    assert redis_client.zcard(schema.demand("a")) == 2  # no epoch: not logged


def test_a_stray_key_in_place_of_the_log_never_fails_the_take(
    redis_client: redis.Redis,
) -> None:
    store = RequestStore(redis_client)
    seed_ready(redis_client, "a", ["vm1"])
    store.create("r1", [Entry("a", "a", 1)], created=1)
    redis_client.set(schema.demand("a"), "not a log")
    assert store.take_ready("r1", Entry("a", "a", 1), 1, now="now", lifetime=None,
                            epoch=1000.0) == ["vm1"]
    assert redis_client.smembers(schema.request_vms("r1", "a", "a")) == {"vm1"}
    assert redis_client.get(schema.demand("a")) == "not a log"
