"""Requests that can never be met fail at once with their reason (docs/fairness.md,
"Honest waits"), and ones that can are left alone (real redis-server, fake clock)."""

from __future__ import annotations

import json

import redis

from tests.api_harness import api, api_config, api_pool
from tests.harness import make_config, pool, started, wait_until
from tests.test_ondemand import gated, status
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import Entry, RequestStore
from vmpooler.providers.errors import TransientProviderError


def reason(client: redis.Redis, rid: str) -> str:
    return client.hget(schema.odrequest(rid), "failure_reason") or ""


def test_more_vms_than_the_pool_can_ever_hold_fail_at_once(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0), pool("b", 0)], max_pool_size=3)
    provider = gated(config)
    provider.all_ready = True
    with started(redis_client, config, provider=provider) as h:
        store = RequestStore(redis_client)
        now = int(h.clock.now())
        store.create("r-big", [Entry("a", "a", 2), Entry("a2", "a", 2)], created=now)
        store.create("r-fits", [Entry("a", "a", 3), Entry("b", "b", 3)], created=now)
        for rid in ("r-big", "r-fits"):
            h.system.notify_request(rid, "created")
        wait_until(lambda: status(redis_client, "r-big") == "failed")
        assert reason(redis_client, "r-big") == (
            "Impossible request: 4 VMs of pool 'a' asked for, more than it can ever hold "
            "(max_pool_size 3)")
        assert h.clock.now() == now  # at once: no time passed
        wait_until(lambda: status(redis_client, "r-fits") == "ready")
        assert not [vm for vm in provider.created
                    if redis_client.hget(schema.vm(vm), "request_id") == "r-big"]


def breaker_config(timeout: int):  # type: ignore[no-untyped-def]
    return make_config([pool("a", 0)], circuit_breaker_failure_threshold=1,
                       circuit_breaker_timeout=timeout, ondemand_request_ttl=5,
                       max_vm_retries=3, check_loop_delay_min=5, check_loop_delay_max=5)


def test_a_provider_away_past_the_deadline_fails_the_request_at_once(
    redis_client: redis.Redis,
) -> None:
    config = breaker_config(timeout=600)  # open ten minutes: past the 5 minute TTL
    provider = gated(config)
    provider.fail_next.append(TransientProviderError("vCenter down"))  # opens the breaker
    provider.all_ready = True
    with started(redis_client, config, provider=provider) as h:
        rid = h.system.request_ondemand({"a": 1})
        h.advance(15, step=1)  # the retry's grant meets the open breaker
        assert status(redis_client, rid) == "failed"
        text = reason(redis_client, rid)
        assert text.startswith("Impossible request: pool 'a' cannot clone before "), text
        assert "after the request's deadline" in text
        assert "provider 'dummy' is unavailable: circuit breaker open" in text
        assert len(provider.created) == 1


def test_a_provider_back_before_the_deadline_keeps_the_request(
    redis_client: redis.Redis,
) -> None:
    config = breaker_config(timeout=60)  # back well before the TTL
    provider = gated(config)
    provider.fail_next.append(TransientProviderError("vCenter down"))
    provider.all_ready = True
    with started(redis_client, config, provider=provider) as h:
        rid = h.system.request_ondemand({"a": 1})
        h.advance(15, step=1)
        assert status(redis_client, rid) is None  # waiting, not failed
        h.advance(120, step=1)
        assert status(redis_client, rid) == "ready"


def test_get_shows_the_reason_of_a_failure_but_the_ttls_message(
    redis_client: redis.Redis,
) -> None:
    a = api(redis_client, api_config([api_pool("pool1", 0)], ondemand_request_ttl=7))
    store = RequestStore(redis_client)
    ids = []
    for text in ("Impossible request: no", "The request exceeded ondemand_request_ttl of 7 "
                 "minutes", "Internal error: KeyError('secret-host')"):
        rid = a.client.simulate_post("/api/v3/ondemandvm",
                                     body=json.dumps({"pool1": 1})).json["request_id"]
        assert store.fail(rid, [Entry("pool1", "pool1", 1)], reason=text, ttl=60)[0]
        ids.append(rid)
    messages = [a.client.simulate_get(f"/api/v3/ondemandvm/{rid}").json["message"]
                for rid in ids]
    assert messages == ["Impossible request: no", "The request failed to provision instances "
                        "within the configured ondemand_request_ttl '7'",
                        "The request failed on an internal error (the manager's log says more)"]
