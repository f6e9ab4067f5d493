"""Fair shares and priorities of on-demand clone slots through the actor system (real
redis-server, fake clock): the manager learns who asked from the request's hash."""

from __future__ import annotations

from collections import Counter

import redis

from tests.harness import make_config, pool, started, wait_until
from tests.test_ondemand import gated, status
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import Entry, RequestOrigin, RequestStore


def asked(h: object, rids: list[str]) -> None:
    """Wait until each request's actor has claimed its request and asked for its VMs."""
    for rid in rids:
        ref = wait_until(lambda r=rid: h.system.actor_ref(f"request:{r}"))  # type: ignore[attr-defined]
        ref.ask("ping", timeout=10)


def owners(client: redis.Redis, created: list[str]) -> list[str | None]:
    return [client.hget(schema.vm(vm), "request_id") for vm in created]


def test_one_vm_of_a_second_user_is_granted_within_one_turn_of_a_200_vm_flood(
    redis_client: redis.Redis,
) -> None:
    config = make_config([pool("a", 0), pool("b", 0)], ondemand_clone_limit=1)
    provider = gated(config)
    provider.all_ready = True
    with started(redis_client, config, provider=provider) as h:
        with provider.gate:  # no clone ends before every request has asked
            flood = [h.system.request_ondemand({"a": 4}, origin=RequestOrigin("flood"))
                     for _ in range(50)]
            asked(h, flood)
            small = h.system.request_ondemand({"b": 1}, origin=RequestOrigin("one"))
            asked(h, [small])
        wait_until(lambda: status(redis_client, small) == "ready", 20)
        order = owners(redis_client, provider.created)
        # the flood's first clone was already granted; the next grant is the small one's
        assert order.index(small) <= 1, order[:5]


def test_shares_1_2_3_get_their_ratio_of_clones(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)], ondemand_clone_limit=1)
    provider = gated(config)
    provider.all_ready = True
    with started(redis_client, config, provider=provider) as h:
        users: dict[str, str] = {}
        with provider.gate:
            for user, share in (("u1", 1), ("u2", 2), ("u3", 3)):
                for _ in range(2):  # the user counts, not the request
                    rid = h.system.request_ondemand({"a": 40},
                                                    origin=RequestOrigin(user, share=share))
                    users[rid] = user
            asked(h, list(users))
        wait_until(lambda: len(provider.created) >= 61, 30)
        order = owners(redis_client, provider.created[1:61])  # after the first, ungated one
        turns = Counter(users[rid] for rid in order if rid)
        for user, share in (("u1", 1), ("u2", 2), ("u3", 3)):
            expected = 60 * share / 6
            assert abs(turns[user] - expected) <= 0.1 * expected, turns


def test_a_high_request_overtakes_normal_ones_of_other_users(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)], ondemand_clone_limit=1)
    provider = gated(config)
    provider.all_ready = True
    with started(redis_client, config, provider=provider) as h:
        with provider.gate:
            normal = [h.system.request_ondemand({"a": 3}, origin=RequestOrigin(f"n{i}"))
                      for i in range(5)]
            asked(h, normal)
            urgent = h.system.request_ondemand(
                {"a": 3}, origin=RequestOrigin("boss", priority="high"))
            asked(h, [urgent])
        wait_until(lambda: status(redis_client, urgent) == "ready", 20)
        order = owners(redis_client, provider.created)
        assert order[1:4] == [urgent] * 3, order[:6]


def test_requests_without_who_asked_count_per_token_user_else_alone(
    redis_client: redis.Redis,
) -> None:
    """Requests written by an older writer (no ``user``/``priority``/``share`` fields): those
    of one token's user share that user's turns; one without a token is a user of its own."""
    config = make_config([pool("a", 0)], ondemand_clone_limit=1)
    provider = gated(config)
    provider.all_ready = True
    store = RequestStore(redis_client)
    with started(redis_client, config, provider=provider) as h:
        with provider.gate:
            bobs = [f"bob-{i}" for i in range(10)]
            for rid in bobs:
                store.create(rid, [Entry("a", "a", 2)], created=int(h.clock.now()),
                             token="t", user="bob")
                h.system.notify_request(rid, "created")
            asked(h, bobs)
            store.create("anon", [Entry("a", "a", 1)], created=int(h.clock.now()))
            h.system.notify_request("anon", "created")
            asked(h, ["anon"])
        wait_until(lambda: status(redis_client, "anon") == "ready", 20)
        order = owners(redis_client, provider.created)
        assert order.index("anon") <= 1, order[:5]
        assert all(redis_client.hget(schema.odrequest(rid), "user") is None for rid in bobs)


def test_the_claim_reads_who_asked(redis_client: redis.Redis) -> None:
    store = RequestStore(redis_client)
    store.create("r1", [Entry("a", "a", 1)], created=1, token="t", user="bob",
                 origin=RequestOrigin("alice", "low", 2.5))
    store.create("r2", [Entry("a", "a", 1)], created=1, token="t", user="bob")
    store.create("r3", [Entry("a", "a", 1)], created=1)
    redis_client.hset(schema.odrequest("r4"), mapping={
        "requested": "a:a:1", "user": "eve", "priority": "urgent", "share": "-3"})
    assert store.claim("r1", now=2).origin == RequestOrigin("alice", "low", 2.5)
    assert store.claim("r2", now=2).origin == RequestOrigin("bob")
    assert store.claim("r3", now=2).origin == RequestOrigin("r3")
    assert store.claim("r4", now=2).origin == RequestOrigin("eve")
