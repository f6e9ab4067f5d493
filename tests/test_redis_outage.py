"""Redis going away and coming back: no actor crashes, and the pool heals.

The test owns its redis-server (persisting to an append-only file in ``tmp_path``), so it
can stop it while the system runs and start it again on the same port and data directory.
A clone is held in the provider while Redis goes down, so its result arrives during the
outage: the clone slot it could not give back is owed and returned on the first cycle
after Redis is back.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pykka
import pytest
import redis

from tests.harness import (
    assert_no_vm_in_two_queues,
    context_for,
    make_config,
    pool,
    started,
    wait_until,
)
from vmpooler.actors.messages import (
    ActorCrashed,
    ClaimRequest,
    RequestChanged,
    WantRequestVms,
)
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.ondemand.request import RequestActor
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.runtime.executor import ActorExecutor
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.connection import connect
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, find_redis_server
from vmpooler.actors.storage.request_store import Entry, RequestStore
from vmpooler.providers.dummy import DummyProvider

SIZE = 3


class CloneGate:
    """The dummy provider's ``sleep``: a clone's simulated delay waits until opened."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()
        self.waiting = 0
        self._lock = threading.Lock()

    def __call__(self, _seconds: float) -> None:
        with self._lock:
            self.waiting += 1
        try:
            assert self.open.wait(timeout=20), "a clone was held for 20 s"
        finally:
            with self._lock:
                self.waiting -= 1


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(data_dir=tmp_path / "redis", persist=True, hardened=False,
                           binary=find_redis_server(prefer_system=True))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def client(own_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    c = connect("127.0.0.1", own_redis.port, pool_size=6, pool_timeout=0.5)
    yield c
    c.close()


def _alive(ref: pykka.ActorRef[object] | None) -> bool:
    return ref is not None and ref.is_alive()


@pytest.mark.slow
def test_pool_survives_redis_outage_and_heals(
    own_redis: EmbeddedRedis, client: redis.Redis
) -> None:
    config = make_config([pool("a", SIZE)], check_loop_delay_min=5, check_loop_delay_max=20)
    gate = CloneGate()
    provider = DummyProvider(context_for(config, {"createvm_max_time": 1}),
                             rng=random.Random(1), sleep=gate)
    with started(client, config, provider=provider) as h:
        h.wait_full("a", SIZE)
        h.quiesce()
        pool_ref = h.system.actor_ref("pool:a")
        assert pool_ref is not None
        actors = {name: h.system.actor_ref(name) for name in h.system.directory.names()}

        # A checkout makes the pool start a clone, which the provider holds.
        gate.open.clear()
        taken = sorted(client.smembers(schema.ready("a")))[0]
        h.checkout("a", taken)
        h.system.notify("a", "checked out")
        wait_until(lambda: gate.waiting == 1, 5, "the refill clone to be held")
        held = sorted(client.smembers(schema.pending("a")))
        assert len(held) == 1

        own_redis.stop()
        gate.open.set()  # the clone finishes while Redis is away
        h.system.notify("a", "poke during the outage")
        h.system.drain("a", "drain during the outage")
        h.advance(120, step=10)  # several cycles, each failing on Redis

        assert _alive(h.system.actor_ref("pool:a"))
        assert h.system.actor_ref("pool:a") == pool_ref, "the pool actor was restarted"
        for name, ref in actors.items():
            assert h.system.actor_ref(name) == ref, f"{name} was restarted"
        assert h.metrics.counts("vmpooler_actor.crashed") == 0
        assert h.system._supervisor is not None
        assert h.system._supervisor.proxy().given_up().get(timeout=5) == []

        own_redis.start()  # same port, same data directory
        assert client.sismember(schema.running("a"), taken), "Redis lost its data"
        h.advance(60, step=10)
        h.wait_full("a", SIZE)
        h.advance(30, step=10)
        h.quiesce()

        assert_no_vm_in_two_queues(client, "a")
        assert client.smembers(schema.running("a")) == {taken}
        ready = client.smembers(schema.ready("a"))
        assert len(ready) == SIZE and client.scard(schema.pending("a")) == 0
        inventory = set(provider.inventory_snapshot().get("a", []))
        assert ready | {taken} <= inventory
        assert int(client.get(schema.tasks_clone()) or 0) == 0, "a clone slot leaked"
        assert pool_ref.is_alive()
        assert h.metrics.counts("vmpooler_actor.crashed") == 0


class Recorder(pykka.ThreadingActor):
    """The on-demand manager's place: records what the request actor tells it."""

    def __init__(self, seen: list[object]) -> None:
        super().__init__()
        self.seen = seen

    def on_receive(self, message: object) -> None:
        self.seen.append(message)


def test_a_request_actor_started_during_an_outage_claims_its_request_when_redis_returns(
    own_redis: EmbeddedRedis, client: redis.Redis,
) -> None:
    """Its start met the outage: no crash (the chaos run found a traceback here), a claim
    again with back-off, and a message that came meanwhile is handled after the claim."""
    clock = FakeClock()
    assert RequestStore(client).create("r1", [Entry("a", "a", 1)], created=int(clock.now()))
    own_redis.stop()
    seen: list[object] = []
    manager = Recorder.start(seen)
    executor = ActorExecutor(1, name="test-outage").start()
    config = make_config([pool("a", 0)])
    actor = RequestActor.start(
        request_id="r1", store=RequestStore(client), settings=config.settings,
        pools=frozenset({"a"}), data_ttl_hours=1, manager=manager, clock=clock,
        scheduler=clock, metrics=RecordingMetrics(), executor=executor)
    try:
        wait_until(lambda: [m for _, m in clock.pending() if isinstance(m, ClaimRequest)],
                   10, "a claim again")
        actor.tell(RequestChanged("r1", "deleted meanwhile?"))
        own_redis.start()
        clock.advance(1.0)
        wait_until(lambda: any(isinstance(m, WantRequestVms) for m in seen), 10,
                   "the request's VMs asked for after the claim")
        assert actor.is_alive()
        assert not [m for m in seen if isinstance(m, ActorCrashed)]
        assert client.hget(schema.odrequest("r1"), "status") is None
    finally:
        actor.stop()
        manager.stop()
        executor.stop(timeout=10)
