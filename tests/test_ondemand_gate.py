"""On-demand requests of a service embedding the pooler (``PoolerSystem.request_ondemand``)
pass the API's gate (real redis-server, fake clock): ``max_ondemand_requests_per_user``,
the ``:quotas:`` limits, ``high_priority``, and the priority and share the on-demand
manager's fair-share queue serves them by."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import redis

from tests.harness import make_config, pool, started, wait_until
from tests.quota_harness import policy
from tests.test_fair_share_system import asked, owners
from tests.test_ondemand import gated, status
from vmpooler.actors.fairness.intake import PriorityRefused, Refused
from vmpooler.actors.fairness.quota import QuotaRefusal
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import RequestOrigin


def config_with(quotas: dict[str, Any] | None = None, **settings: Any) -> Any:
    config = make_config([pool("a", 0), pool("b", 0)], **settings)
    return config if quotas is None else dataclasses.replace(config, quotas=policy(quotas))


def requests(client: redis.Redis) -> set[str]:
    return {key.removeprefix(schema.odrequest("")) for key in
            client.scan_iter(match=schema.odrequest("*"))}


def test_a_user_over_max_ondemand_requests_per_user_is_refused(
        redis_client: redis.Redis) -> None:
    config = config_with(max_ondemand_requests_per_user=2)
    with started(redis_client, config, provider=gated(config)) as h:  # never ready
        mine = [h.system.request_ondemand({"a": 1}, user="carol") for _ in range(2)]
        with pytest.raises(Refused) as refused:
            h.system.request_ondemand({"a": 1}, user="Carol", request_id="third")
        assert refused.value.refusal == QuotaRefusal("max_ondemand_requests_per_user", 2, 2)
        assert refused.value.message == (
            "user 'carol' has 2 on-demand requests in flight; the maximum is 2 "
            "(max_ondemand_requests_per_user)")
        assert requests(redis_client) == set(mine)  # nothing written
        assert h.system.request_ondemand({"a": 1}, user="dave")  # per user
        with pytest.raises(Refused):  # an origin names the user as well
            h.system.request_ondemand({"a": 1}, origin=RequestOrigin("carol"))


def test_a_user_over_its_quota_is_refused_and_a_taken_id_is_still_none(
        redis_client: redis.Redis) -> None:
    config = config_with({"default": {"vms_held": 3, "vms_per_request": 2}})
    with started(redis_client, config, provider=gated(config)) as h:
        first = h.system.request_ondemand({"a": 2}, user="carol", request_id="first")
        assert first == "first"
        assert h.system.request_ondemand({"b": 1}, user="carol", request_id="first") is None
        with pytest.raises(Refused) as held:
            h.system.request_ondemand({"a": 1, "b": 1}, user="carol")
        assert held.value.refusal == QuotaRefusal("vms_held", 3, 2)
        assert held.value.message == ("user 'carol' holds 2 VMs; the limit is 3 (2 more "
                                      "asked for) (:quotas: vms_held)")
        with pytest.raises(Refused) as per_request:
            h.system.request_ondemand({"b": 3}, user="dave")
        assert per_request.value.refusal == QuotaRefusal("vms_per_request", 2, 3)
        with pytest.raises(Refused):  # without a user, the request is a user of its own
            h.system.request_ondemand({"b": 3})
        assert requests(redis_client) == {"first"}
        assert redis_client.smembers(schema.quota_held("carol")) == {"rq:first"}


def test_priority_high_is_only_for_high_priority_users(redis_client: redis.Redis) -> None:
    config = config_with({"high_priority": {"users": ["boss"]}})
    with started(redis_client, config, provider=gated(config)) as h:
        with pytest.raises(PriorityRefused) as refused:
            h.system.request_ondemand({"a": 1}, user="carol", priority="high")
        assert refused.value.message == ("user 'carol' may not ask for priority high "
                                         "(:quotas: high_priority)")
        with pytest.raises(ValueError, match="priority must be one of high, normal, low"):
            h.system.request_ondemand({"a": 1}, user="carol", priority="urgent")
        assert not requests(redis_client)
        rid = h.system.request_ondemand({"a": 1}, user="Boss", priority="high")
        assert redis_client.hmget(schema.odrequest(rid), ["user", "priority", "share"]) == [
            "boss", "high", "1.0"]


def test_the_priority_and_share_given_to_the_facade_reach_the_queue(
        redis_client: redis.Redis) -> None:
    config = config_with({"high_priority": {"users": ["boss"]},
                          "groups": {"release": {"share": 3}},
                          "members": {"release": ["carol"]}}, ondemand_clone_limit=1)
    provider = gated(config)
    provider.all_ready = True
    with started(redis_client, config, provider=provider) as h:
        with provider.gate:  # no clone ends before every request has asked
            normal = [h.system.request_ondemand({"a": 40}, user=f"n{i}") for i in range(2)]
            shared = h.system.request_ondemand({"a": 40}, user="carol")
            asked(h, [*normal, shared])
            urgent = h.system.request_ondemand({"a": 3}, user="boss", priority="high")
            asked(h, [urgent])
        wait_until(lambda: status(redis_client, urgent) == "ready", 20)
        wait_until(lambda: len(provider.created) >= 34, 30)
        order = owners(redis_client, provider.created)
        assert order[1:4] == [urgent] * 3, order[:6]  # high before every normal clone
        turns = order[4:34]
        # carol's share of 3 against two users of share 1: 3 of every 5 turns
        assert abs(turns.count(shared) - 18) <= 2, turns
