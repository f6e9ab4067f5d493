"""The request actor's phases and their one table of transitions, its back-off, the
manager's one record per request, and what a request actor's start reads: a request
claimed for the first time reads none of the VMs pending in its pools, so starting many
requests together costs each the same."""

from __future__ import annotations

import itertools

import pytest
import redis

from tests.harness import wait_until
from tests.test_request_race import POOL, RID, TTL_MINUTES, Rig, add_pending_vm, rig  # noqa: F401
from vmpooler.actors.config import GlobalSettings
from vmpooler.actors.messages import (
    RequestChanged,
    RequestFinished,
    RequestVmCloning,
    RequestVmFailed,
    RequestVmReady,
    WantRequestVms,
)
from vmpooler.actors.ondemand.lifecycle import (
    BACKOFF_MAX,
    TRANSITIONS,
    IllegalTransitionError,
    Phase,
    backoff,
    check_transition,
)
from vmpooler.actors.ondemand.request import verify_interval
from vmpooler.actors.ondemand.tracking import Standing, Tracker
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.lease_store import Fence
from vmpooler.actors.storage.request_store import Claim, Entry, RequestStore

ALLOWED = {
    (Phase.CLAIMING, Phase.ACTIVE), (Phase.CLAIMING, Phase.FINISHED),
    (Phase.ACTIVE, Phase.GRACE), (Phase.ACTIVE, Phase.FINISHED),
    (Phase.GRACE, Phase.FINISHED),
}


@pytest.mark.parametrize(("old", "new"), list(itertools.product(Phase, Phase)))
def test_only_the_tabled_transitions_are_allowed(old: Phase, new: Phase) -> None:
    assert (new in TRANSITIONS[old]) == ((old, new) in ALLOWED)
    if (old, new) in ALLOWED:
        assert check_transition(RID, old, new) is new
    else:
        with pytest.raises(IllegalTransitionError, match=f"{old.value} -> {new.value}"):
            check_transition(RID, old, new)


def test_backoff_doubles_up_to_its_bound() -> None:
    assert [backoff(n) for n in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 16.0, BACKOFF_MAX,
                                                 BACKOFF_MAX]


def test_a_record_is_kept_while_it_holds_anything() -> None:
    tracker = Tracker()
    assert tracker.get(RID) is None and tracker.state(RID) is Standing.IDLE
    assert tracker.retire(RID, "urn:old") and not tracker.retire(RID, "urn:old")
    record = tracker.get(RID)
    assert record is not None and not tracker.runs(RID) and tracker.running() == set()
    tracker.to(RID, Standing.BACKING_OFF)
    assert not tracker.retired(RID, "urn:other")
    assert tracker.retired(RID, "urn:old")
    assert tracker.get(RID) is record  # it still backs off
    tracker.to(RID, Standing.IDLE)  # the change that leaves it holding nothing drops it
    assert tracker.get(RID) is None and len(tracker) == 0


# -- what a start reads ---------------------------------------------------------------------
def test_a_claim_is_fresh_only_when_it_takes_the_request_from_the_waiting_queue(
    rig: Rig,
) -> None:
    assert rig.store.create(RID, [Entry(POOL, POOL, 1)], created=100)
    assert rig.store.claim(RID, now=200).fresh
    assert not rig.store.claim(RID, now=300).fresh  # a rebuilt actor: its VMs are read
    rig.client.zrem(schema.provisioning_processing(), RID)  # in neither queue
    claim = rig.store.claim(RID, now=400)
    assert claim.found and not claim.fresh


def hmget_calls(rig: Rig) -> int:
    return int(rig.client.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0))


def test_a_fresh_request_reads_no_vm_of_its_pools_at_start(rig: Rig) -> None:
    """200 VMs of other requests pending in its pool: a new request's start reads none of
    them (it asks for its VM at once), so N requests starting together cost O(N)."""
    for n in range(200):
        add_pending_vm(rig.client, f"other-{n}")  # recorded with another request's id below
        rig.client.hset(schema.vm(f"other-{n}"), "request_id", f"other-{n}")
    assert rig.store.create(RID, [Entry(POOL, POOL, 1)], created=int(rig.clock.now()))
    rig.client.config_resetstat()
    ref = rig.start()
    wait_until(rig.in_processing, 5, "the request actor to claim the request")
    ref.ask("sync", timeout=5)
    assert hmget_calls(rig) == 0
    assert WantRequestVms(RID, ((POOL, POOL),)) in rig.told()


def test_a_rebuilt_request_still_finds_its_vms_on_their_way(rig: Rig) -> None:
    """The counterpart: once claimed, a new actor for the request reads its pending VMs (it
    asks for nothing more, and retires them when it finishes)."""
    assert rig.store.create(RID, [Entry(POOL, POOL, 1)], created=int(rig.clock.now()))
    rig.store.claim(RID, now=rig.clock.now())
    add_pending_vm(rig.client, "vm-0")
    ref = rig.start()
    ref.ask("sync", timeout=5)
    assert not [m for m in rig.told() if isinstance(m, WantRequestVms)]
    rig.client.hset(schema.odrequest(RID), "status", "deleted")
    ref.tell(RequestChanged(RID, "deleted"))
    rig.wait_stopped()
    assert rig.client.sismember(schema.completed(POOL), "vm-0")
    assert RequestFinished(RID, "deleted") in rig.told()


# -- the guards of the phases -----------------------------------------------------------------
def seed_claimed(rig: Rig, count: int, vms: tuple[str, ...]) -> None:
    """A request a predecessor claimed, with ``vms`` on their way."""
    assert rig.store.create(RID, [Entry(POOL, POOL, count)], created=int(rig.clock.now()))
    rig.store.claim(RID, now=rig.clock.now())
    for vm in vms:
        add_pending_vm(rig.client, vm)


def wants(rig: Rig) -> list[tuple[tuple[str, str], ...]]:
    return [m.wants for m in rig.told() if isinstance(m, WantRequestVms)]


class ClaimFailsOnce(RequestStore):
    """The real store, its first claim meeting a Redis outage."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.failures = 1

    def claim(self, request_id: str, *, now: float) -> Claim:
        if self.failures:
            self.failures -= 1
            raise redis.ConnectionError("redis away")
        return super().claim(request_id, now=now)


def test_a_message_that_comes_while_claiming_waits_for_the_claim(rig: Rig) -> None:
    """The claim met an outage: a VM ready meanwhile is attached once the claim is through,
    not refused as a VM the request never asked for."""
    seed_claimed(rig, 1, ("vm-0",))
    rig.store = ClaimFailsOnce(rig.client)
    ref = rig.start()
    ref.tell(RequestVmReady(RID, POOL, POOL, "vm-0"))
    ref.ask("sync", timeout=5)
    assert rig.client.sismember(schema.pending(POOL), "vm-0") and rig.status() is None
    rig.clock.advance(backoff(1))  # the claim again
    rig.wait_stopped()
    assert rig.status() == "ready"
    assert rig.delivered() == {"vm-0"}


def test_a_failure_told_twice_is_counted_once(rig: Rig) -> None:
    seed_claimed(rig, 1, ("vm-0",))
    ref = rig.start()
    ref.ask("sync", timeout=5)
    assert wants(rig) == []  # its VM is on its way
    for _ in range(2):
        ref.tell(RequestVmFailed(RID, POOL, POOL, "vm-0", "clone failed"))
    ref.ask("sync", timeout=5)
    assert rig.client.hget(schema.odrequest(RID), "retry_count") == "1"
    assert wants(rig) == [((POOL, POOL),)]


def test_in_the_grace_window_no_new_clone_is_asked_for(rig: Rig) -> None:
    """Past the TTL with VMs on their way: a failed one is not replaced, neither at once nor
    at the next check; the window's end fails the request."""
    settings = GlobalSettings(ondemand_request_ttl=TTL_MINUTES, max_vm_retries=3,
                              ondemand_request_grace=int(3 * verify_interval(
                                  GlobalSettings())))
    seed_claimed(rig, 2, ("vm-0", "vm-1"))
    ref = rig.start(settings)
    ref.ask("sync", timeout=5)
    rig.clock.advance(TTL_MINUTES * 60)
    ref.ask("sync", timeout=5)
    assert wants(rig) == [()]  # entering the window withdraws what was queued
    ref.tell(RequestVmFailed(RID, POOL, POOL, "vm-0", "clone failed"))
    ref.ask("sync", timeout=5)
    assert wants(rig) == [()]  # not replaced at once...
    rig.clock.advance(verify_interval(settings))
    ref.ask("sync", timeout=5)
    assert wants(rig) == [()]  # ...nor at the next check
    assert rig.status() is None
    rig.clock.advance(settings.ondemand_request_grace)
    rig.wait_stopped()
    assert rig.status() == "failed"


def test_in_the_grace_window_the_last_vm_failing_fails_the_request_at_once(
    rig: Rig,
) -> None:
    settings = GlobalSettings(ondemand_request_ttl=TTL_MINUTES, max_vm_retries=3,
                              ondemand_request_grace=600)
    seed_claimed(rig, 1, ("vm-0",))
    ref = rig.start(settings)
    ref.ask("sync", timeout=5)
    rig.clock.advance(TTL_MINUTES * 60)
    ref.ask("sync", timeout=5)
    assert rig.status() is None  # waiting for vm-0
    ref.tell(RequestVmFailed(RID, POOL, POOL, "vm-0", "clone failed"))
    rig.wait_stopped()  # nothing left on its way: no need to wait for the window's end
    assert rig.status() == "failed"
    assert "ondemand_request_ttl" in rig.client.hget(schema.odrequest(RID), "failure_reason")


class RetireFails(RequestStore):
    """The real store, Redis gone when a finished request retires its VMs still booting."""

    def retire_pending(self, pool: str, vm: str, *, fence: Fence | None = None) -> bool:
        raise redis.ConnectionError("redis away")


def test_a_request_finishing_while_redis_goes_away_still_stops(rig: Rig) -> None:
    """Its VMs still booting stay pending (the pool side settles them once it finds the
    request finished); the actor tells the manager and stops all the same."""
    seed_claimed(rig, 1, ("vm-0",))
    rig.store = RetireFails(rig.client)
    ref = rig.start()
    ref.ask("sync", timeout=5)
    rig.clock.advance(TTL_MINUTES * 60)
    rig.wait_stopped()
    assert rig.status() == "failed"
    assert RequestFinished(RID, "failed") in rig.told()
    assert rig.client.sismember(schema.pending(POOL), "vm-0")


# -- a VM's outcome may come before its clone's start ------------------------------------------
# The pool tells the request of a VM's failure or readiness directly, but of its clone's start
# through the on-demand manager: under load the outcome can come first.
def test_a_failure_heard_before_its_clone_started_is_counted(rig: Rig) -> None:
    assert rig.store.create(RID, [Entry(POOL, POOL, 1)], created=int(rig.clock.now()))
    ref = rig.start()
    ref.ask("sync", timeout=5)
    assert wants(rig) == [((POOL, POOL),)]
    ref.tell(RequestVmFailed(RID, POOL, POOL, "vm-9", "clone failed"))
    ref.tell(RequestVmCloning(RID, POOL, POOL, "vm-9"))
    ref.ask("sync", timeout=5)
    assert rig.client.hget(schema.odrequest(RID), "retry_count") == "1"
    assert wants(rig) == [((POOL, POOL),), ((POOL, POOL),)]  # replaced


def test_a_vm_delivered_before_its_clone_started_is_not_left_on_its_way(rig: Rig) -> None:
    assert rig.store.create(RID, [Entry(POOL, POOL, 2)], created=int(rig.clock.now()))
    ref = rig.start()
    ref.ask("sync", timeout=5)
    add_pending_vm(rig.client, "vm-9")
    ref.tell(RequestVmReady(RID, POOL, POOL, "vm-9"))
    ref.tell(RequestVmCloning(RID, POOL, POOL, "vm-9"))
    ref.ask("sync", timeout=5)
    assert rig.delivered() == {"vm-9"}
    rig.clock.advance(verify_interval(GlobalSettings()))  # the check of VMs on their way
    ref.ask("sync", timeout=5)
    assert rig.client.hget(schema.odrequest(RID), "retry_count") is None
    assert wants(rig) == [((POOL, POOL), (POOL, POOL))]  # nothing asked again
