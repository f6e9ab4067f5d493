"""On-demand requests through the actor system: request actors, clone slots, the
request lifecycle of reference §2.4 (over a real redis-server, on a fake clock)."""

from __future__ import annotations

import redis

from tests.harness import assert_no_vm_in_two_queues, make_config, pool, started, wait_until
from vmpooler.actors import schema


def test_request_is_provisioned_and_ready(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0), pool("b", 0)])
    with started(redis_client, config) as h:
        rid = h.system.request_ondemand({"a": 2, "b": 1})
        assert rid
        wait_until(lambda: (h.system.ondemand_request(rid) or None) and
                   h.system.ondemand_request(rid).status == "ready")
        record = h.system.ondemand_request(rid)
        assert len(record.delivered[("a", "a")]) == 2
        assert len(record.delivered[("b", "b")]) == 1
        for vm in record.delivered[("a", "a")]:
            assert redis_client.sismember(schema.running("a"), vm)
            assert redis_client.hget(schema.vm(vm), "request_id") == rid
        assert not redis_client.zscore(schema.provisioning_processing(), rid)
        h.quiesce()
        assert redis_client.scard(schema.ready("a")) == 0
        assert_no_vm_in_two_queues(redis_client, "a")
