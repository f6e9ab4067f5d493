"""Seed 002 — vmpooler declared an on-demand request expired 2 s before its 4th VM became
ready, because the expiry sweep and the per-VM ready check raced on one request from two
threads.

Here a :class:`RequestActor` runs standalone (no pools, no provider, a recording actor as
its manager, its mailbox on an actor executor of its own, a real redis-server): the four
"VM ready" events and the deadline are told to its one mailbox in every one of the 120
possible orders. The outcome must depend on the order alone: ``ready`` when every VM came
before the deadline, otherwise ``failed`` with every one of the request's VMs retired to
``completed``. Never both, never a VM in two
queues, never a VM left running for a failed request.

Also here: vmpooler's nil score (a request missing from ``provisioning__processing`` looked
decades old), a VM that becomes ready after its request finished (settled by the pool side),
a request deleted by another process without telling its actor, and the compare-and-set
table: after a request finished, every write a second writer can make leaves it alone,
except ``ready -> deleted``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pykka
import pytest
import redis

from tests.harness import assert_no_vm_in_two_queues, queue_members, wait_until
from vmpooler.actors.config import GlobalSettings
from vmpooler.actors.messages import (
    ActorCrashed,
    RequestChanged,
    RequestExpired,
    RequestFinished,
    RequestVmReady,
    WantRequestVms,
    request_actor_name,
)
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.ondemand.request import RequestActor, verify_interval
from vmpooler.actors.pool.request_vms import OnDemandVms
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.runtime.executor import ActorExecutor
from vmpooler.actors.runtime.supervisor import ActorDirectory
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import Entry, RequestStore
from vmpooler.actors.storage.store import Store

RID = "r1"
POOL = "p"
VMS = ("vm-0", "vm-1", "vm-2", "vm-3")
TTL_MINUTES = 5
EXPIRED = "expired"


class Recorder(pykka.ThreadingActor):
    """Stands in for the on-demand manager: records every message it is told."""

    def __init__(self, log: MessageLog) -> None:
        super().__init__()
        self.log = log

    def on_receive(self, message: Any) -> Any:
        with self.log.lock:
            self.log.messages.append(message)
        return None


class MessageLog:
    """What the recorder was told; read after an ``ask`` so nothing is still in its mailbox."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: list[Any] = []


@dataclass
class Rig:
    client: redis.Redis
    store: RequestStore
    clock: FakeClock
    metrics: RecordingMetrics
    manager: pykka.ActorRef[Any]
    log: MessageLog
    executor: ActorExecutor
    ref: pykka.ActorRef[Any] | None = None

    def start(self, settings: GlobalSettings | None = None) -> pykka.ActorRef[Any]:
        self.ref = RequestActor.start(
            request_id=RID, store=self.store,
            settings=settings or GlobalSettings(ondemand_request_ttl=TTL_MINUTES,
                                                max_vm_retries=3),
            pools=frozenset({POOL}), data_ttl_hours=168, manager=self.manager,
            clock=self.clock, scheduler=self.clock, metrics=self.metrics,
            executor=self.executor,
        )
        return self.ref

    def wait_stopped(self, timeout: float = 5.0) -> None:
        assert self.ref is not None
        assert self.ref.actor_stopped.wait(timeout), "the request actor did not stop"

    def told(self) -> list[Any]:
        # The recorder handles its mail on its own thread: everything told to it before
        # this ask has been recorded when the ask returns.
        self.manager.ask("sync", timeout=5)
        with self.log.lock:
            return list(self.log.messages)

    def status(self) -> str | None:
        return self.client.hget(schema.odrequest(RID), "status")

    def in_processing(self) -> bool:
        return self.client.zscore(schema.provisioning_processing(), RID) is not None

    def delivered(self) -> set[str]:
        return set(self.client.smembers(schema.request_vms(RID, POOL, POOL)))


@pytest.fixture
def rig(redis_client: redis.Redis) -> Iterator[Rig]:
    clock = FakeClock()
    log = MessageLog()
    manager = Recorder.start(log)
    executor = ActorExecutor(2, name="test-request").start()
    r = Rig(redis_client, RequestStore(redis_client), clock, RecordingMetrics(), manager, log,
            executor)
    yield r
    if r.ref is not None:
        r.ref.stop(block=True, timeout=5)  # no-op when it already stopped
    manager.stop(block=True, timeout=5)
    executor.stop(timeout=5)


def seed_request(rig: Rig, count: int = 4, vms: Sequence[str] = VMS) -> None:
    """What the API and the pool actor's clones write: the request, and its VMs booting.
    With VMs, the request was claimed (its clones were asked for by an actor before this
    one), so the actor started next rebuilds from them."""
    created = int(rig.clock.now())
    assert rig.store.create(RID, [Entry(POOL, POOL, count)], created=created)
    if vms:
        assert rig.store.claim(RID, now=created).fresh
    for vm in vms:
        add_pending_vm(rig.client, vm)


def add_pending_vm(client: redis.Redis, vm: str) -> None:
    pipe = client.pipeline(transaction=True)
    pipe.sadd(schema.pending(POOL), vm)
    pipe.hset(schema.vm(vm), mapping={"request_id": RID, "pool_alias": POOL,
                                      "pool": POOL, "template": f"tpl-{POOL}"})
    pipe.execute()


def start_and_claim(rig: Rig) -> pykka.ActorRef[Any]:
    ref = rig.start()
    wait_until(rig.in_processing, 5, "the request actor to claim the request")
    return ref


def event(name: str) -> Any:
    return RequestExpired(RID) if name == EXPIRED else RequestVmReady(RID, POOL, POOL, name)


ORDERS = list(itertools.permutations((*VMS, EXPIRED)))


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(o) for o in ORDERS])
def test_ready_and_deadline_in_every_order(rig: Rig, order: tuple[str, ...]) -> None:
    assert len(ORDERS) == 120
    seed_request(rig)
    ref = start_and_claim(rig)
    for name in order:  # one mailbox: the order of the tells is the order of handling
        ref.tell(event(name))
    rig.wait_stopped()

    client = rig.client
    queues = queue_members(client, POOL)
    all_ready_first = order[-1] == EXPIRED
    assert_no_vm_in_two_queues(client, POOL)
    assert not rig.in_processing()
    assert client.zscore(schema.provisioning_request(), RID) is None
    assert queues["ready"] == set()
    told = rig.told()
    assert not [m for m in told if isinstance(m, ActorCrashed)], told
    finished = [m for m in told if isinstance(m, RequestFinished)]
    if all_ready_first:
        assert rig.status() == "ready"
        assert rig.delivered() == set(VMS)
        assert queues["running"] == set(VMS)
        assert queues["pending"] == set()
        assert queues["completed"] == set()
        assert finished == [RequestFinished(RID, "ready")]
        assert rig.clock.pending() == []  # the deadline timer was cancelled
    else:
        assert rig.status() == "failed", f"order {order}"
        assert "ondemand_request_ttl" in client.hget(schema.odrequest(RID), "failure_reason")
        before_deadline = set(order[:order.index(EXPIRED)])
        # Only the VMs that were ready before the deadline were ever delivered...
        assert rig.delivered() == before_deadline
        # ...and every VM of the request, delivered or still booting, is now retired.
        assert queues["completed"] == set(VMS)
        assert queues["running"] == set()
        assert queues["pending"] == set()
        assert finished == [RequestFinished(RID, "failed")]


def test_the_scheduled_deadline_between_readies_fails_the_request(rig: Rig) -> None:
    """The deadline as the scheduler delivers it (the actor's own timer, not a test tell)."""
    seed_request(rig)
    ref = start_and_claim(rig)
    ref.ask("sync", timeout=5)  # start-up done: the deadline timer is set
    timers = dict((type(m).__name__, (due, m)) for due, m in rig.clock.pending())
    assert sorted(timers) == ["RequestExpired", "VerifyInFlight"]  # the deadline, the check
    due, message = timers["RequestExpired"]
    assert message == RequestExpired(RID)
    assert due == TTL_MINUTES * 60
    for vm in VMS[:3]:
        ref.tell(RequestVmReady(RID, POOL, POOL, vm))
    ref.ask("sync", timeout=5)
    rig.clock.advance(TTL_MINUTES * 60)  # the scheduler tells RequestExpired
    ref.tell(RequestVmReady(RID, POOL, POOL, VMS[3]))  # 2 s too late, as in the seed
    rig.wait_stopped()
    assert rig.status() == "failed"
    queues = queue_members(rig.client, POOL)
    assert queues["completed"] == set(VMS)
    assert queues["running"] == queues["pending"] == queues["ready"] == set()


def test_the_deadline_timer_is_cancelled_when_the_request_is_ready(rig: Rig) -> None:
    seed_request(rig)
    ref = start_and_claim(rig)
    for vm in VMS:
        ref.tell(RequestVmReady(RID, POOL, POOL, vm))
    rig.wait_stopped()
    assert rig.status() == "ready"
    rig.clock.advance(TTL_MINUTES * 60 + 1)
    assert RequestExpired(RID) not in [m for _due, m in rig.clock.delivered]
    assert rig.status() == "ready"
    assert queue_members(rig.client, POOL)["running"] == set(VMS)


# -- vmpooler's nil score ---------------------------------------------------------------------
def test_claim_without_a_score_uses_now(rig: Rig) -> None:
    """vmpooler read a missing ``provisioning__processing`` score as 0, so a request that had
    left the set looked decades old and was expired at once (``nil.to_i``)."""
    rig.clock.advance(1000)  # "now" is not the request's creation time
    seed_request(rig, count=1, vms=["vm-0"])
    for queue in (schema.provisioning_request(), schema.provisioning_processing()):
        rig.client.zrem(queue, RID)  # in neither queue: no score at all
    assert rig.client.zscore(schema.provisioning_processing(), RID) is None
    now = rig.clock.now()

    claim = rig.store.claim(RID, now=now)
    assert claim.found and claim.status is None
    assert claim.created == int(now)
    assert rig.client.zscore(schema.provisioning_processing(), RID) == int(now)


def test_request_without_a_score_gets_its_full_ttl(rig: Rig) -> None:
    seed_request(rig, count=1, vms=["vm-0"])
    for queue in (schema.provisioning_request(), schema.provisioning_processing()):
        rig.client.zrem(queue, RID)
    rig.clock.advance(7 * 24 * 3600)  # a week later, the actor is (re)built
    ref = start_and_claim(rig)
    ref.ask("sync", timeout=5)
    assert rig.status() is None
    assert [due for due, m in rig.clock.pending()
            if isinstance(m, RequestExpired)] == [TTL_MINUTES * 60]
    rig.clock.advance(TTL_MINUTES * 60 - 1)
    ref.ask("sync", timeout=5)
    assert rig.status() is None and ref.is_alive()
    rig.clock.advance(1)
    rig.wait_stopped()
    assert rig.status() == "failed"


def test_a_claimed_request_keeps_its_creation_score(rig: Rig) -> None:
    seed_request(rig, count=1, vms=["vm-0"])
    created = int(rig.clock.now())
    rig.clock.advance(120)
    claim = rig.store.claim(RID, now=rig.clock.now())
    assert claim.created == created
    assert rig.client.zscore(schema.provisioning_processing(), RID) == created


# -- a ready VM for a finished request --------------------------------------------------------
class PoolSide:
    """The pool actor's request routing (the real ``OnDemandVms``), recording the caches it
    drops and the ``vm.lost`` reasons it counts."""

    def __init__(self, directory: ActorDirectory, store: RequestStore) -> None:
        self.forgotten: list[str] = []
        self.lost: list[str] = []
        self.vms = OnDemandVms(pool=POOL, store=Store(store.client), requests=store,
                               directory=directory, busy=(), forget=self.forgotten.append,
                               lost=self.lost.append)
        self.ondemand = self.vms.owners

    def _ondemand_ready(self, vm: str) -> None:
        self.vms.ready(vm)


def test_ready_vm_after_the_request_finished_is_settled_to_completed(rig: Rig) -> None:
    seed_request(rig, count=1, vms=["vm-0"])
    ref = start_and_claim(rig)
    directory = ActorDirectory()
    directory.put(request_actor_name(RID), ref)
    ref.tell(RequestExpired(RID))
    rig.wait_stopped()
    assert rig.status() == "failed"
    # A clone the actor never heard of (its RequestVmCloning was still on its way).
    add_pending_vm(rig.client, "vm-late")

    with pytest.raises(pykka.ActorDeadError):  # the message cannot reach a finished actor
        ref.tell(RequestVmReady(RID, POOL, POOL, "vm-late"))
    side = PoolSide(directory, rig.store)
    side.ondemand["vm-late"] = (RID, POOL)
    side._ondemand_ready("vm-late")  # the directory still names the dead actor

    queues = queue_members(rig.client, POOL)
    assert queues["completed"] == {"vm-0", "vm-late"}
    assert queues["pending"] == queues["running"] == queues["ready"] == set()
    assert side.ondemand == {} and side.forgotten == ["vm-late"]
    assert side.lost == ["abandoned"]
    assert rig.status() == "failed"
    assert rig.delivered() == set()


def test_settle_orphan_after_ready_never_adds_a_vm(rig: Rig) -> None:
    seed_request(rig, count=1, vms=["vm-0"])
    ref = start_and_claim(rig)
    ref.tell(RequestVmReady(RID, POOL, POOL, "vm-0"))
    rig.wait_stopped()
    assert rig.status() == "ready"
    add_pending_vm(rig.client, "vm-extra")
    assert rig.store.settle_orphan(RID, POOL, "vm-extra")
    assert rig.status() == "ready"
    assert rig.delivered() == {"vm-0"}
    queues = queue_members(rig.client, POOL)
    assert queues["running"] == {"vm-0"} and queues["completed"] == {"vm-extra"}


def test_settle_orphan_leaves_an_in_flight_requests_vm_pending(rig: Rig) -> None:
    """No actor (e.g. the manager is restarting) but the request is in flight: the VM waits
    for the request's next actor instead of being thrown away."""
    seed_request(rig, count=1, vms=["vm-0"])
    assert not rig.store.settle_orphan(RID, POOL, "vm-0")
    assert queue_members(rig.client, POOL)["pending"] == {"vm-0"}
    ref = start_and_claim(rig)
    ref.tell(RequestVmReady(RID, POOL, POOL, "vm-0"))
    rig.wait_stopped()
    assert rig.status() == "ready"
    assert queue_members(rig.client, POOL)["running"] == {"vm-0"}


# -- a writer outside the actor system ----------------------------------------------------------
@pytest.mark.parametrize("then", ["last-vm-ready", "expired", "changed"])
def test_request_deleted_behind_the_actors_back_stays_deleted(rig: Rig, then: str) -> None:
    """The API (another process) deletes the request while its actor runs and, here, never
    tells it. Whatever the actor hears next, the request is not resurrected, not failed, and
    none of its VMs is handed out."""
    seed_request(rig)
    ref = start_and_claim(rig)
    for vm in VMS[:3]:
        ref.tell(RequestVmReady(RID, POOL, POOL, vm))
    ref.ask("sync", timeout=5)
    assert rig.delivered() == set(VMS[:3])
    assert rig.store.delete(RID).name == "DELETED"
    ref.tell({"last-vm-ready": RequestVmReady(RID, POOL, POOL, VMS[3]),
              "expired": RequestExpired(RID),
              "changed": RequestChanged(RID, "deleted")}[then])
    rig.wait_stopped()
    assert rig.status() == "deleted"
    queues = queue_members(rig.client, POOL)
    assert queues["completed"] == set(VMS)
    assert queues["running"] == queues["pending"] == queues["ready"] == set()
    assert rig.delivered() == set()
    assert [m for m in rig.told() if isinstance(m, RequestFinished)] == [
        RequestFinished(RID, "deleted")]


# -- the compare-and-set table ------------------------------------------------------------------
FIRST = [("all", "fulfil"), ("all", "fail"), ("all", "delete"), ("one", "fail"),
         ("one", "delete")]
SECOND = ["fulfil", "fail", "delete", "attach", "claim"]


@pytest.mark.parametrize("second", SECOND)
@pytest.mark.parametrize(("attached", "first"), FIRST, ids=[f"{a}-{f}" for a, f in FIRST])
def test_a_finished_status_only_moves_from_ready_to_deleted(
    rig: Rig, attached: str, first: str, second: str,
) -> None:
    """Every write a second writer can make (another manager, the API, a Ruby vmpooler) after
    the request finished: only ``ready -> deleted`` is allowed; nothing else changes."""
    entry = Entry(POOL, POOL, 2)
    seed_request(rig, count=2, vms=["vm-0", "vm-1", "vm-2"])
    rig.store.claim(RID, now=rig.clock.now())
    stamp = "2023-11-14 22:13:20 +0000"
    for vm in ["vm-0", "vm-1"] if attached == "all" else ["vm-0"]:
        assert rig.store.attach(RID, entry, vm, now=stamp, lifetime=None).name == "ATTACHED"
    status = {"fulfil": "ready", "fail": "failed", "delete": "deleted"}[first]
    if first == "fulfil":
        assert rig.store.fulfil(RID, [entry]) == (True, "ready")
    elif first == "fail":
        assert rig.store.fail(RID, [entry], reason="first", ttl=3600) == (True, "failed")
    else:
        assert rig.store.delete(RID).name == "DELETED"
    delivered = rig.delivered()
    before = queue_members(rig.client, POOL)

    if second == "fulfil":
        assert rig.store.fulfil(RID, [entry]) == (False, status)
    elif second == "fail":
        assert rig.store.fail(RID, [entry], reason="second", ttl=3600) == (False, status)
        assert rig.client.hget(schema.odrequest(RID), "failure_reason") == (
            "first" if status == "failed" else None)
    elif second == "delete":
        outcome = rig.store.delete(RID).name
        assert outcome == {"ready": "DELETED", "failed": "ALREADY_FAILED",
                           "deleted": "ALREADY_DELETED"}[status]
        if status == "ready":
            status = "deleted"
    elif second == "attach":
        outcome = rig.store.attach(RID, entry, "vm-2", now=stamp, lifetime=None)
        assert outcome.name == "REFUSED"
    else:
        claim = rig.store.claim(RID, now=rig.clock.now())
        assert claim.found and claim.status == status
    assert rig.status() == status
    assert not rig.in_processing()
    after = queue_members(rig.client, POOL)
    if status == "deleted" and first == "fulfil":  # the client returned the ready VMs
        assert rig.delivered() == set()
        assert after["running"] == set() and {"vm-0", "vm-1"} <= after["completed"]
    elif second == "attach":
        assert rig.delivered() == delivered
        assert after["completed"] == before["completed"] | {"vm-2"}
        assert after["running"] == before["running"]
    else:
        assert rig.delivered() == delivered and after == before
    if status in ("failed", "deleted"):
        assert after["running"] == set()


def test_a_vm_that_left_pending_unannounced_is_replaced_at_the_next_check(rig: Rig) -> None:
    """The pool's RequestVmFailed was lost (its manager died as it sent it): the request's
    actor finds its VM gone from pending at its periodic check and asks for another."""
    seed_request(rig, count=2, vms=VMS[:2])
    ref = start_and_claim(rig)
    ref.ask("sync", timeout=5)
    assert not [m for m in rig.told() if isinstance(m, WantRequestVms)], "both on their way"
    rig.client.smove(schema.pending(POOL), schema.completed(POOL), VMS[0])  # no message
    every = verify_interval(GlobalSettings())
    rig.clock.advance(every)
    ref.ask("sync", timeout=5)
    wants = [m for m in rig.told() if isinstance(m, WantRequestVms)]
    assert wants == [WantRequestVms(RID, ((POOL, POOL),))], "one replacement, no more"
    assert rig.client.hget(schema.odrequest(RID), "retry_count") == "1"
    rig.clock.advance(every)  # the next check finds nothing new to replace
    ref.ask("sync", timeout=5)
    assert len([m for m in rig.told() if isinstance(m, WantRequestVms)]) == 1
    ref.tell(RequestVmReady(RID, POOL, POOL, VMS[1]))
    ref.ask("sync", timeout=5)
    assert rig.status() is None, "one of two delivered: still in flight"
