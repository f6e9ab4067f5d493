"""Limits on what one request may ask for, over a real redis-server: pool sizes
(``max_pool_size``, per provider too), on-demand counts in every form, names joined in a
path, and the on-demand requests one user may have in flight
(``max_ondemand_requests_per_user``, counted atomically)."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Any

import pytest
import redis

from tests.api_harness import TOKEN, USER, Api, api, api_config, api_pool
from vmpooler.actors.config import ProviderConfig
from vmpooler.actors.fairness.quota import CreateVerdict
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_quota import RequestQuota
from vmpooler.actors.storage.request_store import Entry, RequestStore

P = "/api/v3"
AUTH = {"X-AUTH-TOKEN": TOKEN}
HUGE_NUMBERS = ["1e300", "9" * 4000, "9" * 5000, "10001", "1e19", '"' + "9" * 5000 + '"',
                '"0x' + "f" * 3000 + '"', "-" + "9" * 5000]


def limits_api(redis_client: redis.Redis, *, auth: bool = False, **settings: Any) -> Api:
    settings.setdefault("experimental_features", True)
    return api(redis_client, api_config(
        [api_pool("pool1", 2, alias=("poolone",)), api_pool("pool2", 1)], auth=auth,
        **settings))


def post(a: Api, path: str, text: str, headers: dict[str, str] | None = None) -> Any:
    return a.client.simulate_post(P + path, body=text, headers=headers)


# -- POST /config/poolsize ---------------------------------------------------------------------
@pytest.mark.parametrize("number", HUGE_NUMBERS)
def test_a_pool_size_above_max_pool_size_is_400_naming_the_limit(
        redis_client: redis.Redis, number: str) -> None:
    a = limits_api(redis_client)
    started = time.perf_counter()
    r = post(a, "/config/poolsize", f'{{"pool1": {number}}}')
    assert time.perf_counter() - started < 0.5
    assert r.status_code == 400, r.text
    if number.startswith("-"):  # negative: vmpooler's invalid size, no limit named
        assert r.json == {"ok": False, "not_configured": ["pool1"]}
    else:
        assert r.json == {"ok": False, "not_configured": ["pool1"],
                          "error": "the size of 'pool1' must be at most 10000 (max_pool_size)"}
    assert not a.redis.exists(schema.config_poolsize())
    assert a.commands.sent == []


def test_max_pool_size_itself_is_accepted(redis_client: redis.Redis) -> None:
    a = limits_api(redis_client, max_pool_size=50)
    assert post(a, "/config/poolsize", '{"pool1": 50}').status_code == 201
    r = post(a, "/config/poolsize", '{"pool1": 51, "pool2": 1}')
    assert r.status_code == 400
    assert r.json["error"] == "the size of 'pool1' must be at most 50 (max_pool_size)"
    assert a.redis.hgetall(schema.config_poolsize()) == {"pool1": "50"}


def test_a_providers_max_pool_size_wins_for_its_pools(redis_client: redis.Redis) -> None:
    a = limits_api(redis_client, max_pool_size=50)
    providers = {"dummy": ProviderConfig("dummy", "dummy", {"max_pool_size": 200})}
    a.ctx = dataclasses.replace(a.ctx, config=dataclasses.replace(a.ctx.config,
                                                                   providers=providers))
    assert a.ctx.config.max_pool_size(a.ctx.config.pool("pool1")) == 200
    b = api(redis_client, a.ctx.config)
    assert post(b, "/config/poolsize", '{"pool1": 200}').status_code == 201
    assert post(b, "/config/poolsize", '{"pool1": 201}').json["error"] == (
        "the size of 'pool1' must be at most 200 (max_pool_size)")


@pytest.mark.parametrize("stored", ["1000000", "9" * 5000, "0x" + "f" * 100])
def test_a_huge_override_in_redis_is_shown_at_the_limit(redis_client: redis.Redis,
                                                        stored: str) -> None:
    """Written by anyone (vmpooler's API, redis-cli): /config, /status and /poolstat show the
    size the manager keeps, and DELETE restores the configured size."""
    a = limits_api(redis_client, max_pool_size=7)
    a.redis.hset(schema.config_poolsize(), "pool1", stored)
    config = a.client.simulate_get(P + "/config").json["pool_configuration"]
    assert [p["size"] for p in config if p["name"] == "pool1"] == [7]
    assert a.client.simulate_get(P + "/status").json["pools"]["pool1"]["max"] == 7
    assert a.client.simulate_get(P + "/poolstat", params={"pool": "pool1"}).json[
        "pools"]["pool1"]["max"] == 7
    r = a.client.simulate_delete(P + "/config/poolsize/pool1")
    assert (r.status_code, r.json["pool_size_before_reset"]) == (201, 7)
    assert not a.redis.hexists(schema.config_poolsize(), "pool1")


# -- on-demand counts ------------------------------------------------------------------------
@pytest.mark.parametrize("count", ["1e300", "9" * 4000, '"' + "9" * 5000 + '"', "11",
                                   '" 99999999999999999999999 abc"', "10.0e5"])
def test_a_huge_on_demand_count_is_vmpoolers_403(redis_client: redis.Redis,
                                                 count: str) -> None:
    a = limits_api(redis_client)
    r = post(a, "/ondemandvm", f'{{"pool1": {count}}}')
    assert (r.status_code, r.json) == (403, {
        "ok": False, "message": "requested amount of instances exceeds the maximum 10"})
    assert a.redis.keys(schema.odrequest("*")) == []


@pytest.mark.parametrize("count", ["-1", '"-' + "9" * 5000 + '"', "2.5", '"x"', "null",
                                   "true", "[1]", "NaN", "Infinity", "1e999"])
def test_a_count_that_is_no_whole_number_is_400(redis_client: redis.Redis, count: str) -> None:
    a = limits_api(redis_client)
    r = post(a, "/ondemandvm", f'{{"pool1": {count}}}')
    assert r.status_code == 400, r.text
    assert r.json["ok"] is False and "pool1" in r.json["message"]


def test_the_url_form_counts_by_repetition_and_is_bounded(redis_client: redis.Redis) -> None:
    a = limits_api(redis_client)
    assert post(a, "/ondemandvm/" + "+".join(["pool1"] * 11), "").json == {
        "ok": False, "message": "requested amount of instances exceeds the maximum 10"}
    for path, key in (("/ondemandvm/", "message"), ("/vm/", "error")):
        started = time.perf_counter()
        r = post(a, path + "+".join(["pool1"] * 100_000), "")
        assert time.perf_counter() - started < 0.5
        assert (r.status_code, r.json) == (400, {
            "ok": False, key: "at most 1000 names may be joined by '+' in the path"})
    many = "+".join(f"p{n}" for n in range(1001))
    assert post(a, "/ondemandvm/" + many, "").status_code == 400
    assert a.redis.keys(schema.odrequest("*")) == []


def test_a_checkout_count_of_5000_digits_is_400_not_500(redis_client: redis.Redis) -> None:
    a = limits_api(redis_client)
    for count in ('"' + "9" * 5000 + '"', "9" * 5000, "1e300"):
        r = post(a, "/vm", f'{{"pool1": {count}}}')
        assert r.status_code == 400, r.text
        assert r.json["ok"] is False


# -- max_ondemand_requests_per_user ------------------------------------------------------------
def quota_api(redis_client: redis.Redis, limit: int | None = 2, **settings: Any) -> Api:
    a = limits_api(redis_client, auth=settings.pop("auth", True),
                   max_ondemand_requests_per_user=limit, **settings)
    a.add_token()
    a.add_token("other0000000000000000000000000000", "someone-else")
    return a


def create(a: Api, token: str = TOKEN, body: str = '{"pool1": 1}') -> Any:
    return post(a, "/ondemandvm", body, {"X-AUTH-TOKEN": token})


def test_a_user_may_have_at_most_the_limit_in_flight(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client)
    first, second = (create(a).json["request_id"] for _ in range(2))
    r = create(a)
    assert (r.status_code, r.json) == (429, {
        "ok": False, "message": f"user '{USER}' has 2 on-demand requests in flight; the "
                                "maximum is 2 (max_ondemand_requests_per_user)"})
    assert len(a.redis.keys(schema.odrequest("*"))) == 2
    assert create(a, "other0000000000000000000000000000").status_code == 201  # per user
    a.add_token("samefffffffffffffffffffffffffffff", USER)  # another token, the same user
    assert create(a, "samefffffffffffffffffffffffffffff").status_code == 429
    # deleted, failed or ready: no longer in flight
    assert a.client.simulate_delete(f"{P}/ondemandvm/{first}", headers=AUTH).status_code == 200
    third = create(a).json["request_id"]
    assert create(a).status_code == 429
    RequestStore(a.redis).fail(second, [Entry("pool1", "pool1", 1)], reason="test", ttl=60)
    fourth = create(a).json["request_id"]
    assert create(a).status_code == 429
    a.redis.hset(schema.odrequest(third), "status", "ready")
    a.redis.delete(schema.odrequest(fourth))  # expired
    assert [create(a).status_code for _ in range(3)] == [201, 201, 429]
    assert RequestQuota(a.redis).in_flight(USER) == 2


def test_the_limit_is_off_by_default_and_without_auth(redis_client: redis.Redis) -> None:
    for a in (quota_api(redis_client, None), quota_api(redis_client, 1, auth=False)):
        assert [create(a).status_code for _ in range(3)] == [201, 201, 201]
        assert not a.redis.keys(schema.odinflight("*"))
        redis_client.flushdb()


def test_an_id_taken_is_still_409_and_counts_nothing(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client)
    assert create(a, body='{"pool1": 1, "request_id": "mine"}').status_code == 201
    r = create(a, body='{"pool1": 1, "request_id": "mine"}')
    assert r.status_code == 409 and r.json["request_id"] == "mine"
    assert RequestQuota(a.redis).in_flight(USER) == 1
    assert a.redis.hgetall(schema.odrequest("mine"))["token:user"] == USER


def test_concurrent_creates_never_pass_the_last_slot(redis_client: redis.Redis) -> None:
    """Twenty threads race for three slots: exactly three requests exist afterwards."""
    quota = RequestQuota(redis_client)
    barrier = threading.Barrier(20)
    verdicts: list[CreateVerdict] = []

    def race(n: int) -> None:
        barrier.wait()
        outcome = quota.create(f"r{n}", [Entry("pool1", "pool1", 1)], created=1, user="u",
                               limit=3, ttl=60, token="t")
        verdicts.append(outcome.verdict)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(v.value for v in verdicts) == [-1] * 17 + [1] * 3
    assert len(redis_client.keys(schema.odrequest("*"))) == 3
    assert redis_client.scard(schema.odinflight("u")) == 3
    assert 0 < redis_client.ttl(schema.odinflight("u")) <= 60


def test_the_quota_create_writes_the_request_as_the_plain_create(
        redis_client: redis.Redis) -> None:
    entries = [Entry("poolone", "pool1", 2)]
    RequestStore(redis_client).create("plain", entries, created=5, token="t", user="u")
    RequestQuota(redis_client).create("quota", entries, created=5, user="u", limit=9, ttl=60,
                                      token="t")
    assert (redis_client.hgetall(schema.odrequest("plain"))
            == redis_client.hgetall(schema.odrequest("quota")))
    assert redis_client.zrange(schema.provisioning_request(), 0, -1, withscores=True) == [
        ("plain", 5.0), ("quota", 5.0)]


def test_a_set_member_of_the_wrong_type_is_no_request_in_flight(
        redis_client: redis.Redis) -> None:
    redis_client.sadd(schema.odinflight("u"), "ghost", "planted")
    redis_client.sadd(schema.odrequest("planted"), "x")
    outcome = RequestQuota(redis_client).create("real", [], created=1, user="u", limit=1,
                                                ttl=60)
    assert outcome.verdict is CreateVerdict.CREATED
    assert redis_client.smembers(schema.odinflight("u")) == {"real"}


def test_the_refusal_is_a_documented_json_answer(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, 1)
    create(a)
    r = create(a)
    assert r.status_code == 429 and r.headers["content-type"].startswith("application/json")
    assert json.loads(r.text)["ok"] is False
