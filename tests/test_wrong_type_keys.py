"""No one key can stop a housekeeping cycle: every read that walks ``vmpooler__*`` keys
(the purge's orphan scan, the health check, the dead-letter sizes, the token listing, VM
fields, on-demand request reads) skips a key of the wrong type, logs it once, and carries
on; a ``WRONGTYPE`` reply is never logged as "redis unavailable".

Keys are planted in a real redis-server the way a hostile request id (``vm__inj``) or a
careless ``redis-cli`` would leave them."""

from __future__ import annotations

import inspect
import json
import logging

import pytest
import redis

from tests.harness import wait_until
from tests.test_upkeep import HOUR, START, advance, seeded, settle
from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.activity_store import ActivityStore
from vmpooler.actors.storage.checkout_store import CheckoutStore
from vmpooler.actors.storage.pool_snapshot import read_vm_fields
from vmpooler.actors.storage.queues import Queue
from vmpooler.actors.storage.redis_errors import (
    WrongTypeKeys,
    is_wrong_type,
    redis_failure,
    redis_unavailable,
)
from vmpooler.actors.storage.request_ids import request_id_problem
from vmpooler.actors.storage.request_store import DeleteOutcome, RequestStore
from vmpooler.actors.storage.token_store import TokenStore
from vmpooler.actors.storage.upkeep_store import UpkeepStore, VmHash

WRONG = "holds another kind of value"


def plant(client: redis.Redis) -> list[str]:
    """A key of the wrong type in every pattern a housekeeping cycle walks; their names."""
    client.sadd(schema.request_vms("vm", "inj", "a"), "x")  # vmpooler__vm__inj__a: a set
    client.set(schema.vm("a-string"), "x")
    client.rpush(schema.vm("a-list"), "x")
    client.set(schema.dlq("bogus"), "x")
    client.sadd(schema.token("not-a-hash"), "x")
    return [schema.request_vms("vm", "inj", "a"), schema.vm("a-string"), schema.vm("a-list"),
            schema.dlq("bogus"), schema.token("not-a-hash")]


def wrong_type_lines(caplog: pytest.LogCaptureFixture, key: str) -> int:
    return sum(1 for r in caplog.records if WRONG in r.getMessage() and f"'{key}'" in
               r.getMessage())


def test_purge_and_health_cycles_complete_beside_keys_of_the_wrong_type(
        redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="vmpooler")
    planted = plant(redis_client)
    with seeded(redis_client, purge_enabled=True, purge_interval=HOUR, dlq_enabled=True,
                health_check_enabled=True, health_check_interval=HOUR) as (h, _gate):
        wait_until(lambda: h.metrics.last_gauge("vmpooler_purge.total.count") is not None,
                   10, "the first purge round to complete")
        wait_until(lambda: redis_client.exists(schema.health()), 10, "vmpooler__health")
        settle(h)
        assert 0 < redis_client.ttl(schema.vm("lost-old")) <= 3600  # the real orphan went
        assert h.metrics.last_gauge("vmpooler_purge.total.count") == 3
        metrics = json.loads(redis_client.hget(schema.health(), "metrics"))
        assert metrics["errors"]["orphaned_metadata_count"] == 2  # lost-old, lost-new
        assert "bogus" not in metrics["queues"].get("dlq", {})  # "dlq" only when one has entries
        advance(h, 2 * HOUR, step=HOUR)  # two more rounds of each meet the same keys
        wait_until(lambda: len(h.metrics.values("gauge", "vmpooler_purge.total.count")) >= 3,
                   10, "three purge rounds")
        wait_until(lambda: len(h.metrics.values("gauge", "vmpooler_health.status")) >= 3,
                   10, "three health checks")
    text = caplog.text
    assert "WRONGTYPE" not in text and "redis unavailable" not in text
    for key in planted[:4]:  # the token key is walked only by GET /token
        assert wrong_type_lines(caplog, key) == 1, key
    assert redis_client.type(planted[0]) == "set"  # nothing deleted what it does not own


def test_queue_ages_count_a_queue_or_vm_key_of_the_wrong_type_as_empty(
        redis_client: redis.Redis) -> None:
    c, store = redis_client, UpkeepStore(redis_client)
    c.set(schema.pending("a"), "x")  # not a set
    c.sadd(schema.ready("a"), "good", "odd")
    c.hset(schema.vm("good"), "ready", timefmt.format_epoch(START))
    c.sadd(schema.vm("odd"), "x")  # not a hash
    c.rpush(schema.completed("a"), "x")
    ages = store.queue_ages(["a"])["a"]
    assert (ages.pending, ages.ready, ages.completed) == (0, 2, 0)
    assert ages.ready_times == (START,)
    assert len(store.wrong_type) == 3


def test_dlq_sizes_and_orphans_skip_keys_of_the_wrong_type(redis_client: redis.Redis) -> None:
    c, store = redis_client, UpkeepStore(redis_client)
    plant(c)
    c.zadd(schema.dlq("clone"), {"x": 1})
    c.hset(schema.vm("lost"), mapping={"pool": "a", "clone": timefmt.format_epoch(START)})
    c.set(schema.running("a"), "x")  # a queue key of the wrong type: holds no VM
    assert store.dlq_sizes() == {"clone": 1}
    (orphan,) = store.orphans()
    assert orphan == VmHash("lost", "a", START)
    assert store.expire_orphan(orphan, ttl=60) == 1
    odd = VmHash("a-string", "a", START)
    assert store.expire_orphan(odd, ttl=60) == -2  # the script checks the type first
    assert c.ttl(schema.vm("a-string")) == -1


def test_token_listing_and_reads_skip_keys_of_the_wrong_type(redis_client: redis.Redis) -> None:
    c, store = redis_client, TokenStore(redis_client)
    plant(c)
    c.hset(schema.token("good"), mapping={"user": "jdoe", "created": "now"})
    assert list(store.tokens_of("jdoe")) == [("good", "now", None)]
    assert store.details("not-a-hash") == {} and store.user_of("not-a-hash") is None


def test_vm_and_request_reads_treat_a_key_of_the_wrong_type_as_absent(
        redis_client: redis.Redis) -> None:
    c = redis_client
    plant(c)
    c.hset(schema.vm("good"), "clone", "t")
    fields = read_vm_fields(c, ["good", "a-string", "a-list"], ["clone", "ready"])
    assert fields == {"good": ["t", None], "a-string": [None, None], "a-list": [None, None]}
    checkout = CheckoutStore(c)
    assert checkout.vm_probe("a-list", ["token:token"]) == (False, [None])
    assert checkout.vm_hash("a-string") == {}
    c.sadd(schema.odrequest("odd"), "x")
    requests = RequestStore(c)
    assert requests.read("odd") is None
    assert requests.owner_token("odd") is None
    assert requests.delete("odd") is DeleteOutcome.NOT_FOUND
    assert c.type(schema.odrequest("odd")) == "set"


def test_a_delivered_vm_key_of_the_wrong_type_holds_no_vm(redis_client: redis.Redis) -> None:
    c = redis_client
    c.hset(schema.odrequest("r1"), "requested", "a:a:2")
    c.set(schema.request_vms("r1", "a", "a"), "x")
    record = RequestStore(c).read("r1")
    assert record is not None and record.delivered == {("a", "a"): ()}


def test_a_key_is_logged_once_and_the_memory_is_bounded(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="vmpooler")
    seen = WrongTypeKeys("test", capacity=3)
    assert seen.report("k1", "hash") and not seen.report("k1", "hash")
    for n in range(100):
        seen.report(f"many{n}", "hash")
    assert len(seen) == 3
    assert wrong_type_lines(caplog, "k1") == 1


def test_wrongtype_is_not_an_outage() -> None:
    wrong = redis.ResponseError("Command # 1 (HMGET vmpooler__vm__x pool clone) of pipeline "
                                "caused error: WRONGTYPE Operation against a key holding the "
                                "wrong kind of value")
    assert is_wrong_type(wrong) and not redis_unavailable(wrong)
    assert redis_failure(wrong) == "redis refused a command"
    assert redis_failure(redis.ConnectionError("refused")) == "redis unavailable"
    assert not is_wrong_type(redis.ConnectionError("WRONGTYPE"))


def test_namespaces_list_the_first_word_of_every_key() -> None:
    """A request id may not be a word of the key schema; every key function's first word
    must be listed, so a new key cannot be forgotten."""
    prefix = "vmpooler__"
    for name in schema.__all__:
        fn = getattr(schema, name)
        if not inspect.isfunction(fn) or name in ("request_vms", "vm_name"):
            continue
        if name == "queue":
            keys = [fn(queue, "x") for queue in Queue]
        else:
            keys = [fn(*["x"] * len(inspect.signature(fn).parameters))]
        for key in keys:
            assert key.startswith(prefix), name
            word = key[len(prefix):].split("__")[0]
            assert word in schema.NAMESPACES, f"{name}: add {word!r} to schema.NAMESPACES"
            assert request_id_problem(word) is not None


def test_a_queue_key_is_the_key_of_that_queue() -> None:
    for queue in Queue:
        assert schema.queue(queue, "p") == getattr(schema, queue.value)("p")


@pytest.mark.parametrize("request_id", ["vm__inj", "vm_", "_vm", "vm", "token", "dlq",
                                        "a__b", "x" * 65, "a:b", "a b", "ü", ""])
def test_request_ids_that_could_become_other_keys_are_refused(request_id: str) -> None:
    assert request_id_problem(request_id) is not None


def test_no_allowed_request_id_makes_a_key_a_scan_matches() -> None:
    """The id is the first word of its delivered-VM sets: for an allowed id, that key never
    starts with the prefix of any key family of the schema."""
    families = [f"vmpooler__{word}__" for word in schema.NAMESPACES]
    for request_id in ["vm.1", "vm-1", "VM", "a_b", "tokens", "1f0e2d3c-4b5a-4697"]:
        assert request_id_problem(request_id) is None
        key = schema.request_vms(request_id, "alias", "pool")
        assert not any(key.startswith(f) for f in families), request_id


def test_the_dashboards_request_list_skips_a_request_key_of_the_wrong_type(
        redis_client: redis.Redis) -> None:
    c = redis_client
    c.zadd(schema.provisioning_request(), {"planted": 2, "real": 1})
    c.sadd(schema.odrequest("planted"), "x")
    c.hset(schema.odrequest("real"), mapping={"requested": "a:a:1", "token:user": "jdoe"})
    found, _ = ActivityStore(c).read(10, 10)
    assert [(f.request_id, f.user, f.requested) for f in found] == [
        ("planted", None, None), ("real", "jdoe", "a:a:1")]
