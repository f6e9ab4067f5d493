"""``ondemand_from_ready``: on-demand requests take ready VMs of their pools at once (real
redis-server, fake clock), never one VM for two owners; and its configuration."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import redis

from tests.harness import assert_no_vm_in_two_queues, make_config, pool, started, wait_until
from tests.test_config import load, only, problems
from tests.test_ondemand import gated, status
from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.checkout_store import CheckoutStore
from vmpooler.actors.storage.request_store import Entry, RequestStore


def test_a_request_takes_ready_vms_at_once_and_the_pool_refills(
    redis_client: redis.Redis,
) -> None:
    config = make_config([pool("a", 3, ondemand_from_ready=True)])
    provider = gated(config)
    provider.all_ready = True
    with started(redis_client, config, provider=provider) as h:
        warm = h.wait_full("a", 3)
        clones_before = len(provider.created)
        rid = h.system.request_ondemand({"a": 2})
        wait_until(lambda: status(redis_client, rid) == "ready")
        delivered = set(h.system.ondemand_request(rid).delivered[("a", "a")])
        assert delivered <= warm and len(delivered) == 2  # no clone was waited for
        for vm in delivered:
            assert redis_client.sismember(schema.running("a"), vm)
            assert redis_client.hget(schema.vm(vm), "request_id") == rid
            assert redis_client.hexists(schema.active("a"), vm)
        assert h.metrics.counts("ondemand.from_ready", pool="a") == 2
        h.wait_full("a", 3)  # the warm pool refilled by itself (woken, no clock advance)
        assert len(provider.created) == clones_before + 2
        assert_no_vm_in_two_queues(redis_client, "a")


def test_a_request_larger_than_the_ready_vms_clones_only_the_rest(
    redis_client: redis.Redis,
) -> None:
    config = make_config([pool("a", 2, ondemand_from_ready=True)])
    provider = gated(config)
    provider.all_ready = True
    with started(redis_client, config, provider=provider) as h:
        warm = h.wait_full("a", 2)
        rid = h.system.request_ondemand({"a": 5})
        wait_until(lambda: status(redis_client, rid) == "ready")
        delivered = set(h.system.ondemand_request(rid).delivered[("a", "a")])
        assert len(delivered) == 5 and warm <= delivered
        cloned_for_it = [vm for vm in provider.created if vm not in warm
                         and redis_client.hget(schema.vm(vm), "request_id") == rid]
        assert len(cloned_for_it) == 3


def test_without_the_setting_requests_clone_as_vmpooler_does(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 2)])
    provider = gated(config)
    provider.all_ready = True
    with started(redis_client, config, provider=provider) as h:
        warm = h.wait_full("a", 2)
        rid = h.system.request_ondemand({"a": 2})
        wait_until(lambda: status(redis_client, rid) == "ready")
        assert not set(h.system.ondemand_request(rid).delivered[("a", "a")]) & warm
        assert set(redis_client.smembers(schema.ready("a"))) == warm


def test_the_global_default_and_the_pool_value(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 1), pool("b", 1, ondemand_from_ready=False)],
                         ondemand_from_ready=True)
    with started(redis_client, config) as h:
        warm_a, warm_b = h.wait_full("a", 1), h.wait_full("b", 1)
        rid = h.system.request_ondemand({"a": 1, "b": 1})
        wait_until(lambda: status(redis_client, rid) == "ready")
        record = h.system.ondemand_request(rid)
        assert set(record.delivered[("a", "a")]) == warm_a
        assert not set(record.delivered[("b", "b")]) & warm_b


# -- the script: one owner per VM -------------------------------------------------------------

def seed_ready(client: redis.Redis, pool_name: str, names: list[str]) -> None:
    for vm in names:
        client.sadd(schema.ready(pool_name), vm)
        client.hset(schema.vm(vm), mapping={"template": "t", "pool": pool_name})


def test_a_vm_checked_out_between_the_read_and_the_take_is_not_taken(
    redis_client: redis.Redis,
) -> None:
    """The candidates are read before the script runs: a checkout in between wins the VM."""
    store, checkouts = RequestStore(redis_client), CheckoutStore(redis_client)
    seed_ready(redis_client, "a", ["vm1"])
    store.create("r1", [Entry("a", "a", 1)], created=1)
    real = redis_client.srandmember

    def read_then_checkout(key: str, number: int | None = None) -> object:
        found = real(key, number)
        assert checkouts.checkout([["a"]], now="now").taken[0].vm == "vm1"
        return found

    redis_client.srandmember = read_then_checkout  # type: ignore[method-assign]
    try:
        taken = store.take_ready("r1", Entry("a", "a", 1), 1, now="now", lifetime=None)
    finally:
        del redis_client.srandmember
    assert taken == []
    assert redis_client.scard(schema.request_vms("r1", "a", "a")) == 0
    assert redis_client.hget(schema.vm("vm1"), "request_id") is None


def test_concurrent_takes_and_checkouts_never_share_a_vm(redis_client: redis.Redis) -> None:
    store, checkouts = RequestStore(redis_client), CheckoutStore(redis_client)
    names = [f"vm{i}" for i in range(200)]
    seed_ready(redis_client, "a", names)
    requests = [f"r{i}" for i in range(20)]
    for rid in requests:
        store.create(rid, [Entry("a", "a", 8)], created=1)
    owners: dict[str, list[str]] = {}
    lock = threading.Lock()
    start = threading.Barrier(len(requests) + 4)

    def request(rid: str) -> None:
        start.wait()
        taken = store.take_ready(rid, Entry("a", "a", 8), 8, now="now", lifetime=None)
        with lock:
            for vm in taken:
                owners.setdefault(vm, []).append(rid)

    def checkout(n: int) -> None:
        start.wait()
        for _ in range(15):
            outcome = checkouts.checkout([["a"]], now="now")
            with lock:
                for t in outcome.taken:
                    owners.setdefault(t.vm, []).append(f"checkout-{n}")

    threads = [threading.Thread(target=request, args=(r,)) for r in requests]
    threads += [threading.Thread(target=checkout, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    shared = {vm: who for vm, who in owners.items() if len(who) > 1}
    assert not shared, shared
    for rid in requests:  # what each request holds is what it was told it took
        held = redis_client.smembers(schema.request_vms(rid, "a", "a"))
        assert held == {vm for vm, who in owners.items() if who == [rid]}
        assert len(held) <= 8
    assert len(owners) == 200 - redis_client.scard(schema.ready("a"))


def test_a_finished_or_full_request_takes_nothing(redis_client: redis.Redis) -> None:
    store = RequestStore(redis_client)
    seed_ready(redis_client, "a", ["vm1", "vm2", "vm3"])
    store.create("r1", [Entry("a", "a", 2)], created=1, token="tok", user="bob")
    now = timefmt.format_epoch(1000.0)
    assert len(store.take_ready("r1", Entry("a", "a", 2), 5, now=now, lifetime=12)) == 2
    vm = next(iter(redis_client.smembers(schema.request_vms("r1", "a", "a"))))
    assert redis_client.hmget(schema.vm(vm), "token:token", "token:user", "lifetime",
                              "checkout") == ["tok", "bob", "12", now]
    assert store.take_ready("r1", Entry("a", "a", 2), 1, now=now, lifetime=None) == []  # full
    store.create("r2", [Entry("a", "a", 1)], created=1)
    redis_client.hset(schema.odrequest("r2"), "status", "deleted")
    assert store.take_ready("r2", Entry("a", "a", 1), 1, now=now, lifetime=None) == []
    assert redis_client.scard(schema.ready("a")) == 1


# -- configuration ----------------------------------------------------------------------------

CONFIG = """
:config:
  ondemand_from_ready: {default}
:providers:
  :dummy: {{}}
:pools:
  - name: a
    size: 1
    ondemand_from_ready: {value}
  - name: b
    size: 1
"""


def test_config_pool_value_wins_over_the_default(tmp_path: Path) -> None:
    config = load(tmp_path, CONFIG.format(default="true", value="false"))
    assert config.settings.ondemand_from_ready is True
    assert [p.from_ready(config.settings) for p in config.pools] == [False, True]
    config = load(tmp_path, CONFIG.format(default="false", value="true"))
    assert [p.from_ready(config.settings) for p in config.pools] == [True, False]


@pytest.mark.parametrize(("default", "value", "key"), [
    ("true", "'sometimes'", "ondemand_from_ready"),
    ("3", "true", "ondemand_from_ready"),
])
def test_config_rejects_a_value_that_is_not_a_boolean(tmp_path: Path, default: str,
                                                      value: str, key: str) -> None:
    problem = only(problems(tmp_path, CONFIG.format(default=default, value=value)))
    assert problem.key.endswith(key) and str(tmp_path) in problem.source
