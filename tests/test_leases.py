"""One lease holder for pools and requests (actors/cluster/leases.py), and the sole owner
that stands in for it where a system runs without leases (actors/cluster/ownership.py,
actors/cluster/request_leases.py). Real Redis; time from a FakeClock."""

from __future__ import annotations

import socket

import pykka
import redis

from tests.harness import make_config, pool
from vmpooler.actors.cluster.leases import LeaseHolder
from vmpooler.actors.cluster.ownership import Ownership, SoleOwner
from vmpooler.actors.cluster.request_leases import RequestLeases, SoleRequests
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.pool.context import PoolSettings, build
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.runtime.supervisor import ActorDirectory
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.heartbeat_store import HeartbeatStore
from vmpooler.actors.storage.lease_store import LeaseStore
from vmpooler.actors.storage.request_store import RequestStore
from vmpooler.actors.storage.store import Store

DEAD = f"{socket.gethostname()}:{2**22 + 4321}:1"  # a pid beyond pid_max: no such process
LIVE_ELSEWHERE = "host-b.example:2:2"
ME = "host-a.example:1:1"


def _hold(client: redis.Redis, kind: str, name: str, holder: str) -> None:
    state = LeaseStore(client).acquire(kind, name, holder, ttl=60)
    assert state.ours


def test_take_releases_a_dead_process_lease_and_takes_it(redis_client: redis.Redis) -> None:
    _hold(redis_client, "pool", "p", DEAD)
    holder = LeaseHolder(kind="pool", manager=ME, store=LeaseStore(redis_client), ttl=15)
    state = holder.take("p")
    assert state.ours and state.taken and state.lease.holder == ME
    assert redis_client.get(schema.lease("pool", "p")) == state.lease.value


def test_take_leaves_a_live_holder_alone(redis_client: redis.Redis) -> None:
    _hold(redis_client, "pool", "p", LIVE_ELSEWHERE)
    holder = LeaseHolder(kind="pool", manager=ME, store=LeaseStore(redis_client), ttl=15)
    state = holder.take("p")
    assert not state.ours and state.lease.holder == LIVE_ELSEWHERE and state.ttl_ms > 0


def test_pools_and_requests_take_a_dead_process_lease_through_the_one_holder(
        redis_client: redis.Redis) -> None:
    clock = FakeClock()
    _hold(redis_client, "pool", "p", DEAD)
    _hold(redis_client, "request", "r1", DEAD)
    HeartbeatStore(redis_client).beat(ME, clock.now(), prune_after=60)
    own = Ownership(pool="p", manager=ME, leases=LeaseStore(redis_client),
                    heartbeats=HeartbeatStore(redis_client), clock=clock, ttl=15.0,
                    stale_after=15.0, busy=lambda: False)
    assert own.refresh() and own.acting and own.fence is own
    requests = RequestLeases(manager=ME, leases=LeaseStore(redis_client),
                             heartbeats=HeartbeatStore(redis_client), clock=clock, ttl=15.0,
                             stale_after=15.0)
    assert requests.take("r1") and requests.holds("r1")
    fence = requests.fence("r1")
    assert fence is not None and redis_client.get(fence.key) == fence.value
    assert isinstance(own.holder, LeaseHolder) and isinstance(requests.holder, LeaseHolder)
    requests.release("r1")
    assert not requests.holds("r1") and requests.fence("r1") is None
    assert not redis_client.exists(schema.lease("request", "r1"))


def test_a_sole_owner_always_acts_and_fences_nothing() -> None:
    sole = SoleOwner()
    assert sole.refresh() and sole.acting and not sole.elsewhere
    assert sole.fence is None and sole.renew_interval is None and sole.free_in is None
    sole.release()  # nothing to give up
    requests = SoleRequests("m")
    assert requests.take("r") and requests.holds("r") and requests.fence("r") is None
    assert requests.claimable(["r", "s"]) == ["r", "s"] and requests.renew() == {}
    assert requests.owner("r") == "m" and requests.renew_interval is None


def test_a_pool_context_without_leases_is_its_sole_owner(redis_client: redis.Redis) -> None:
    config = make_config([pool("p", 1)])
    clock = FakeClock()

    class _Nobody(pykka.ThreadingActor):
        pass

    ref = _Nobody.start()
    try:
        policy = PoolSettings.of(config.pools[0], config.settings, data_ttl_hours=1)
        io = build(policy=policy, store=Store(redis_client),
                   requests=RequestStore(redis_client), directory=ActorDirectory(),
                   clock=clock, scheduler=clock, metrics=RecordingMetrics(), self_ref=ref).io
    finally:
        ref.stop()
    assert isinstance(io.ownership, SoleOwner) and io.ownership.refresh()
    assert io.store.fence is None and io.upkeep_store.fence is None
    assert io.store.discover("p", ["vm1"]) == ["vm1"]  # written, unfenced
