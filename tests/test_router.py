"""The router between managers: a message to an address goes to the actor here, else to the
manager holding the address's lease through the relay (a real Redis, two managers' relays
in one process), and goes no further once it hopped; inbox entries of the previous release
(``"forwarded": true`` in the body, no ``hops``) still decode and stop a loop."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.harness import wait_until
from vmpooler.actors.cluster.relay import Relay, decode, encode
from vmpooler.actors.cluster.router import Router
from vmpooler.actors.messages import (
    CloneForRequest,
    PoolChanged,
    RequestChanged,
    RequestVmReady,
    WantRequestVms,
    request_actor_name,
)
from vmpooler.actors.messages.address import Address
from vmpooler.actors.runtime.supervisor import ActorDirectory, SupervisedActor
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.inbox_store import InboxStore
from vmpooler.actors.storage.lease_store import POOL, LeaseStore

POOL_A = Address.pool("a")
TTL = 60.0


class PassingOn(SupervisedActor):
    """Stands for a pool actor whose manager does not hold the pool's lease: it records what
    it hears (``hops`` None: from this manager) and passes it on to the lease holder the
    way ``PoolActor`` does."""

    def __init__(self, router: Router, heard: list[tuple[Any, int | None, bool]]) -> None:
        super().__init__(name=POOL_A.name, supervisor=None)
        self.router = router
        self.heard = heard  # (message, hops, passed on)

    def handle(self, message: object) -> None:
        self._heard(message, None)

    def handle_relayed(self, message: object, hops: int) -> None:
        self._heard(message, hops)

    def _heard(self, message: object, hops: int | None) -> None:
        passed = self.router.to_holder(POOL_A, message, hops=hops or 0)
        self.heard.append((message, hops, passed))


class Manager:
    """One manager's directory, relay and router."""

    def __init__(self, client: redis.Redis, member: str) -> None:
        self.member = member
        self.client = client
        self.directory = ActorDirectory()
        self.relay = Relay(client, member=member, directory=self.directory,
                           live=lambda: {"m1", "m2"}, block_ms=50)
        self.router = Router(self.directory, self.relay)
        self._heard: list[tuple[Any, int | None, bool]] = []
        self.ref = PassingOn.start(self.router, self._heard)

    def register(self) -> None:
        self.directory.put(POOL_A.name, self.ref)

    def heard(self) -> list[tuple[Any, int | None, bool]]:
        return list(self._heard)

    def inbox(self) -> int:
        return int(self.client.xlen(schema.manager_inbox(self.member)))

    def stop(self) -> None:
        self.relay.stop(timeout=5)
        self.ref.stop()


@pytest.fixture
def managers(redis_client: redis.Redis) -> Iterator[tuple[Manager, Manager]]:
    m1, m2 = Manager(redis_client, "m1"), Manager(redis_client, "m2")
    yield m1, m2
    m1.stop()
    m2.stop()


def hold(client: redis.Redis, member: str) -> None:
    """``member`` holds pool a's lease from now on (any earlier holding is released)."""
    leases = LeaseStore(client)
    if (current := leases.holder(POOL, "a")) is not None:
        leases.release(current)
    assert leases.acquire(POOL, "a", member, ttl=TTL).ours


def test_addresses_keep_the_registry_names() -> None:
    assert Address.pool("debian").name == "pool:debian"
    assert Address.request("r1").name == request_actor_name("r1") == "request:r1"
    assert Address.ondemand().name == Address.ondemand("r1").name == "ondemand"
    assert Address.provider("vsphere").name == "provider:vsphere"
    assert Address.is_pool("pool:debian") and not Address.is_pool("provider:debian")
    assert Address.ondemand().lease is None
    assert Address.ondemand("r1") == Address(name="ondemand", lease=Address.request("r1").lease)


def test_the_actor_here_is_told_and_its_passing_on_hops_once(
        redis_client: redis.Redis, managers: tuple[Manager, Manager]) -> None:
    m1, m2 = managers
    m1.register()
    hold(redis_client, "m2")
    assert m1.router.tell(POOL_A, PoolChanged("a", "here"))
    wait_until(m1.heard, 5, "m1's actor to hear it")
    assert m1.heard() == [(PoolChanged("a", "here"), None, True)]  # it passed it on: once
    assert m2.inbox() == 1


def test_without_an_actor_here_the_lease_holder_hears_it_once_relayed(
        redis_client: redis.Redis, managers: tuple[Manager, Manager]) -> None:
    m1, m2 = managers
    m2.register()
    hold(redis_client, "m2")
    assert m1.router.tell(POOL_A, PoolChanged("a", "from m1"))
    m2.relay.start()
    wait_until(m2.heard, 5, "m2's actor to hear it")
    assert m2.heard() == [(PoolChanged("a", "from m1"), 1, False)]  # m2 holds it: stays
    assert m1.inbox() == 0


def test_a_relayed_message_is_not_relayed_again_when_the_lease_moved_meanwhile(
        redis_client: redis.Redis, managers: tuple[Manager, Manager]) -> None:
    m1, m2 = managers
    m2.register()
    hold(redis_client, "m2")
    assert m1.router.tell(POOL_A, PoolChanged("a", "sent while m2 held it"))
    hold(redis_client, "m1")  # m1 took the lease before m2 read the message
    m2.relay.start()
    wait_until(m2.heard, 5, "m2's actor to hear it")
    assert m2.heard() == [(PoolChanged("a", "sent while m2 held it"), 1, False)]
    assert m1.inbox() == 0, "m2 sent the message back to m1"
    assert m2.router.to_holder(POOL_A, PoolChanged("a", "m2's own news"))  # a new one goes


def test_an_entry_of_the_previous_release_decodes_and_stops_a_loop(
        redis_client: redis.Redis, managers: tuple[Manager, Manager]) -> None:
    m1, m2 = managers
    m2.register()
    hold(redis_client, "m1")  # m2 does not hold the pool: it would pass news on to m1
    InboxStore(redis_client).send([
        ("m2", {"to": "pool:a", "type": "PoolChanged",
                "body": '{"pool": "a", "reason": "forwarded", "forwarded": true}'}),
        ("m2", {"to": "pool:a", "type": "PoolChanged",
                "body": '{"pool": "a", "reason": "fresh", "forwarded": false}'}),
    ])
    m2.relay.start()
    wait_until(lambda: len(m2.heard()) == 2, 5, "m2's actor to hear both")
    # the old loop stop holds; a message the old release did not mark may go on once more
    assert m2.heard() == [(PoolChanged("a", "forwarded"), 1, False),
                          (PoolChanged("a", "fresh"), 0, True)]
    assert m1.inbox() == 1


def test_entries_written_keep_the_previous_release_s_fields() -> None:
    fields = encode("pool:a", PoolChanged("a", "r"))
    assert fields == {"to": "pool:a", "type": "PoolChanged",
                      "body": '{"pool": "a", "reason": "r", "forwarded": true}', "hops": "1"}
    assert decode(fields) == ("pool:a", PoolChanged("a", "r"), 1)
    want = WantRequestVms("r1", (("a", "a"),), fence="7 m1")
    assert json.loads(encode("ondemand", want)["body"])["forwarded"] is True
    clone = CloneForRequest("r1", "a", "a", grant=3, reply_to="m1")
    assert decode(encode("pool:a", clone)) == ("pool:a", clone, 1)
    ready = RequestVmReady("r1", "a", "a", "vm1")
    assert "forwarded" not in encode("request:r1", ready)["body"]  # never had the field
    assert decode({"to": "ondemand", "type": "RequestChanged",
                   "body": '{"request_id": "r1", "reason": "", "forwarded": false}'}) == (
        "ondemand", RequestChanged("r1"), 0)
    with pytest.raises(ValueError):
        decode({"to": "pool:a", "type": "PoolChanged", "body": '{"pool": "a"}', "hops": "x"})


def test_an_addresses_lease_kinds_are_the_lease_stores() -> None:
    """The router hands an address's lease kind to the lease store as is."""
    from vmpooler.actors.messages.address import LeaseKind
    from vmpooler.actors.storage import lease_store

    assert {kind.value for kind in LeaseKind} == {lease_store.POOL, lease_store.REQUEST}
    assert LeaseKind.POOL == lease_store.POOL and LeaseKind.REQUEST == lease_store.REQUEST
