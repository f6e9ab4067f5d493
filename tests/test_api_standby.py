"""The standby tier in ``/status`` and ``/poolstat`` through Falcon over real Redis.

The standby set and the VM hashes are written directly: what puts VMs there (the pool actor)
is tested in tests/test_pool_standby.py.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from tests.api_harness import Api, api, api_config, api_pool
from tests.openapi_check import body_errors
from tests.test_api_status import CountingRedis
from vmpooler.actors.config import PoolConfig
from vmpooler.actors.config.model import StandbyTier
from vmpooler.actors.storage import schema

STATUS = "/api/v3/status"
POOLSTAT = "/api/v3/poolstat"
EVERY = "view=boot,capacity,clone,pools,providers,queue"


def pools(*, tiered: bool = True) -> list[PoolConfig]:
    """``plain`` without a tier; ``warm`` with 3 suspended VMs, ``cold`` powered off and
    sized by the demand sizer (``auto``) when ``tiered``, else both without one."""
    def tier(tier: StandbyTier) -> dict[str, Any]:
        return {"standby": tier} if tiered else {}
    return [api_pool("plain", 2, alias=("any",)),
            api_pool("warm", 2, alias=("any",), **tier(StandbyTier(count=3))),
            api_pool("cold", 1, **tier(StandbyTier(count=None, state="powered_off")))]


def put_on_standby(client: redis.Redis, pool: str, *vms: str, state: str = "suspended") -> None:
    for vm in vms:
        client.sadd(schema.standby(pool), vm)
        client.hset(schema.vm(vm), mapping={"template": f"templates/{pool}", "standby": state,
                                             "standby_since": "2024-05-01 10:00:00 +0000"})


def status(a: Api, query: str = "") -> dict[str, Any]:
    resp = a.client.simulate_get(STATUS, query_string=query)
    assert resp.status_code == 200
    assert not body_errors("get", STATUS, 200, resp.text), "as openapi.json says"
    return resp.json


# -- /status ---------------------------------------------------------------------------------
def test_a_pool_with_a_standby_tier_shows_its_count_target_and_state(
        redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config(pools()))
    a.add_vm("warm", "w-ready")
    put_on_standby(redis_client, "warm", "w1", "w2")
    put_on_standby(redis_client, "warm", "w3", state="resuming")
    put_on_standby(redis_client, "cold", "c1", state="suspended")
    entries = status(a)["pools"]
    assert entries["warm"]["standby"] == {"count": 3, "target": 3, "state": "suspended"}
    assert entries["cold"]["standby"] == {"count": 1, "target": None, "state": "powered_off"}
    assert "standby" not in entries["plain"]
    # standby VMs are not ready ones: vmpooler's numbers are untouched
    assert (entries["warm"]["ready"], entries["cold"]["ready"]) == (1, 0)
    assert list(entries["warm"]) == ["ready", "running", "pending", "max", "lastBoot", "alias",
                                     "standby"]


def test_the_count_follows_the_set_on_every_request(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config(pools()))
    assert status(a)["pools"]["warm"]["standby"]["count"] == 0
    put_on_standby(redis_client, "warm", "w1")
    assert status(a)["pools"]["warm"]["standby"]["count"] == 1
    put_on_standby(redis_client, "warm", "w2", "w3")
    assert status(a, "view=pools")["pools"]["warm"]["standby"]["count"] == 3
    redis_client.srem(schema.standby("warm"), "w1", "w2")
    assert status(a)["pools"]["warm"]["standby"]["count"] == 1


def test_pools_without_a_tier_answer_exactly_as_without_any_tier(
        redis_client: redis.Redis) -> None:
    """The same Redis read by a configuration where two pools keep a tier and by one where
    none does: the bodies differ by those two ``standby`` entries and nothing else."""
    with_tiers = api(redis_client, api_config(pools()))
    without = api(redis_client, api_config(pools(tiered=False)))
    with_tiers.add_vm("plain", "p1")
    with_tiers.add_vm("warm", "w-ready")
    with_tiers.add_vm("cold", "c-run", "running")
    put_on_standby(redis_client, "warm", "w1")
    for query in ("", EVERY, "view=pools", "view=capacity,queue"):
        ours = with_tiers.client.simulate_get(STATUS, query_string=query).text
        plain = without.client.simulate_get(STATUS, query_string=query).text
        body = json.loads(ours)
        for entry in body.get("pools", {}).values():
            entry.pop("standby", None)
        body["status"].pop("uptime")
        reference = json.loads(plain)
        reference["status"].pop("uptime")
        assert json.dumps(body) == json.dumps(reference), query
        assert ("standby" in ours) == ("pools" in reference), query
        assert '"standby"' not in plain


def test_the_counts_are_read_in_the_same_evalsha(redis_client: redis.Redis) -> None:
    counting = CountingRedis(redis_client)
    a = api(counting, api_config(pools()))
    put_on_standby(redis_client, "warm", "w1")
    a.client.simulate_get(STATUS, query_string=EVERY)  # loads the script if needed
    # queues counted x 3 pools, plus one SCARD per pool with a tier when pools are shown
    for query, scards, shown in ((EVERY, 4 * 3 + 2, True), ("view=capacity", 3, False),
                                 ("view=pools", 3 * 3 + 2, True)):
        redis_client.config_resetstat()
        counting.direct = 0
        body = a.client.simulate_get(STATUS, query_string=query).json
        stats = redis_client.info("commandstats")
        assert counting.direct == 0 and counting.pipelines == []
        assert stats["cmdstat_evalsha"]["calls"] == 1, query
        assert stats["cmdstat_scard"]["calls"] == scards, query
        assert ("pools" in body) == shown


def test_a_configuration_without_tiers_reads_no_standby_set(
        redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config(pools(tiered=False)))
    a.client.simulate_get(STATUS, query_string=EVERY)
    redis_client.config_resetstat()
    a.client.simulate_get(STATUS, query_string=EVERY)
    assert redis_client.info("commandstats")["cmdstat_scard"]["calls"] == 4 * 3


# -- /poolstat -------------------------------------------------------------------------------
def test_poolstat_shows_the_tier_of_the_pools_that_have_one(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config(pools()))
    a.add_vm("warm", "w-ready")
    put_on_standby(redis_client, "warm", "w1", "w2")
    resp = a.client.simulate_get(POOLSTAT, query_string="pool=any,cold")
    assert resp.status_code == 200
    assert not body_errors("get", POOLSTAT, 200, resp.text), "as openapi.json says"
    assert resp.json == {"pools": {
        "plain": {"max": 2, "alias": ["any"], "ready": 0},
        "warm": {"max": 2, "alias": ["any"], "ready": 1,
                 "standby": {"count": 2, "target": 3, "state": "suspended"}},
        "cold": {"max": 1, "ready": 0,
                 "standby": {"count": 0, "target": None, "state": "powered_off"}},
    }}
    assert list(resp.json["pools"]["warm"]) == ["max", "alias", "ready", "standby"]
    put_on_standby(redis_client, "cold", "c1")
    again = a.client.simulate_get(POOLSTAT, query_string="pool=cold").json
    assert again["pools"]["cold"]["standby"]["count"] == 1
    plain = a.client.simulate_get(POOLSTAT, query_string="pool=plain").json
    assert plain == {"pools": {"plain": {"max": 2, "alias": ["any"], "ready": 0}}}
