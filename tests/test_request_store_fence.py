"""``RequestStore.with_fence``: a request actor's view of the store whose request scripts run
behind the request's lease, over a real redis-server."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.lease_store import REQUEST, Fenced
from vmpooler.actors.storage.request_store import Entry, RequestStore

RID = "r1"
ENTRY = Entry("a", "a", 1)
HELD = "7 manager-a"


@dataclass
class StaticFence:
    """A fence that believes it holds ``value``."""

    key: str
    value: str | None

    def held(self) -> str | None:
        return self.value


def _seed(client: redis.Redis) -> RequestStore:
    store = RequestStore(client)
    assert store.create(RID, [ENTRY], created=100)
    client.set(schema.lease(REQUEST, RID), HELD)
    client.sadd(schema.pending("a"), "vm-1", "vm-2")
    client.sadd(schema.ready("a"), "vm-3")
    client.hset(schema.vm("vm-3"), "template", "templates/a")
    return store


WRITES: dict[str, Callable[[RequestStore], Any]] = {
    "claim": lambda s: s.claim(RID, now=200),
    "attach": lambda s: s.attach(RID, ENTRY, "vm-1", now="now", lifetime=None),
    "take_ready": lambda s: s.take_ready(RID, ENTRY, 1, now="now", lifetime=None),
    "fulfil": lambda s: s.fulfil(RID, [ENTRY]),
    "fail": lambda s: s.fail(RID, [ENTRY], reason="no", ttl=60),
    "record_retry": lambda s: s.record_retry(RID),
    "retire_pending": lambda s: s.retire_pending("a", "vm-2"),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_view_behind_a_lost_lease_writes_nothing(redis_client: redis.Redis,
                                                   write: str) -> None:
    store = _seed(redis_client)
    before = {key: redis_client.dump(key) for key in redis_client.keys("*")}
    stale = store.with_fence(StaticFence(schema.lease(REQUEST, RID), "6 manager-b"))
    with pytest.raises(Fenced):
        WRITES[write](stale)
    assert {key: redis_client.dump(key) for key in redis_client.keys("*")} == before


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_view_behind_the_held_lease_writes(redis_client: redis.Redis, write: str) -> None:
    store = _seed(redis_client)
    if write != "claim":
        store.claim(RID, now=200)  # in flight: every write below changes something
    if write == "fulfil":
        store.attach(RID, ENTRY, "vm-1", now="now", lifetime=None)
    before = {key: redis_client.dump(key) for key in redis_client.keys("*")}
    WRITES[write](store.with_fence(StaticFence(schema.lease(REQUEST, RID), HELD)))
    assert {key: redis_client.dump(key) for key in redis_client.keys("*")} != before


def test_the_view_leaves_the_store_it_came_from_unfenced(redis_client: redis.Redis) -> None:
    store = _seed(redis_client)
    redis_client.delete(schema.lease(REQUEST, RID))  # no lease at all
    view = store.with_fence(StaticFence(schema.lease(REQUEST, RID), HELD))
    assert view.fence is not None and store.fence is None
    with pytest.raises(Fenced):
        view.record_retry(RID)
    assert store.record_retry(RID) == 1  # the API's and sweeps' store writes as before
    assert store.with_fence(None).record_retry(RID) == 2


def test_a_view_reads_and_runs_the_unfenced_scripts_without_the_lease(
        redis_client: redis.Redis) -> None:
    store = _seed(redis_client)
    redis_client.delete(schema.lease(REQUEST, RID))
    view = store.with_fence(StaticFence(schema.lease(REQUEST, RID), HELD))
    assert view.in_flight(RID, ["a"]) == {}
    assert view.delivered(RID, [ENTRY]) == {("a", "a"): 0}
    assert view.status(RID) is None
