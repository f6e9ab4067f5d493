"""A request's VM that is still booting when its request has finished, but that the
request's actor did not know of (its clone was answered after the actor finished): the pool
moves it to completed at its next pending check, instead of leaving it pending until the
pool's ``timeout`` (seen in a process test under load: a VM of a failed request left pending
after every request had ended)."""

from __future__ import annotations

import redis

from tests.harness import started, wait_until
from tests.test_ondemand import gated, make_config, pool
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.storage import schema, timefmt


def seed(client: redis.Redis, *, status: str, vm: str = "late-clone") -> None:
    """A request with that status and one VM of pool a, pending, whose hash names it."""
    client.hset(schema.odrequest("r1"), mapping={"requested": "a:a:1", "status": status})
    client.hset(schema.vm(vm), mapping={
        "request_id": "r1", "pool_alias": "a", "template": "templates/a", "pool": "a",
        "clone": timefmt.format_epoch(FakeClock().now())})  # cloned as the test starts
    client.sadd(schema.pending("a"), vm)


def test_a_finished_requests_late_vm_leaves_pending_at_once(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)])
    provider = gated(config)  # its VMs never become ready
    provider.create_vm("a", "late-clone")
    seed(redis_client, status="failed")
    with started(redis_client, config, provider=provider) as h:
        h.advance(10)  # a few pool cycles, far below the pending timeout (15 min)
        wait_until(lambda: not redis_client.sismember(schema.pending("a"), "late-clone"),
                   10, "the VM to leave pending")
        assert h.metrics.values("increment", "vm.lost")


def test_a_running_requests_vm_stays_pending(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)])
    provider = gated(config)
    provider.create_vm("a", "late-clone")
    seed(redis_client, status="")  # provisioning: its actor (being started) takes it
    with started(redis_client, config, provider=provider) as h:
        h.advance(10)
        h.quiesce()
        assert redis_client.sismember(schema.pending("a"), "late-clone")
