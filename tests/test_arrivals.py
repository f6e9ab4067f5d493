"""Foreseen arrivals (docs/fairness.md, "Honest waits"): the requests' rate and mix learned
online per class, played forward into the wait estimates so that a request's later VMs
also wait for the requests that will arrive meanwhile (fake clock, real redis-server)."""

from __future__ import annotations

import itertools

import pytest
import redis

from tests.test_waits import A, slots
from vmpooler.actors.fairness.fair_share import Owner
from vmpooler.actors.ondemand.arrivals import HALF_LIFE, Arrival, Arrivals
from vmpooler.actors.ondemand.clone_grants import Want
from vmpooler.actors.ondemand.waits import FORESEEN_PER_QUEUED, WaitBoard, estimate
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.storage.wait_store import WaitStore


def _learned(every: float, count: int, *, start: float = 0.0) -> Arrivals:
    arrivals = Arrivals(start=start)
    for i in range(count):
        rid = f"r{i}"
        arrivals.arrived(rid, ("a",) * (1 + i % 3), Owner(rid), at=start + every * (i + 1))
    return arrivals


def test_the_rate_is_learned_per_class_and_fades() -> None:
    arrivals = _learned(30.0, 240)  # two hours, one request every 30 s
    end = 30.0 * 240
    assert arrivals.rate("normal", now=end) == pytest.approx(1 / 30, rel=0.05)
    assert arrivals.rate("high", now=end) == 0.0
    # nobody comes any more: after a half-life the rate is about half
    assert arrivals.rate("normal", now=end + HALF_LIFE) == pytest.approx(1 / 60, rel=0.1)


def test_a_short_watch_gives_a_low_rate_never_a_wild_one() -> None:
    arrivals = Arrivals(start=0.0)
    arrivals.arrived("r1", ("a",), Owner("r1"), at=1.0)
    assert arrivals.rate("normal", now=1.0) == pytest.approx(1 / HALF_LIFE, rel=0.01)


def test_a_request_counts_once_and_an_empty_ask_not_at_all() -> None:
    arrivals = Arrivals(start=0.0)
    arrivals.arrived("r1", ("a",), Owner("r1"), at=10.0)
    arrivals.arrived("r1", ("a",), Owner("r1"), at=20.0)  # a replacement VM
    arrivals.arrived("r2", (), Owner("r2"), at=20.0)  # a withdrawal
    assert arrivals.rate("normal", now=20.0) * HALF_LIFE == pytest.approx(1.0, rel=0.02)
    arrivals.forget(set())  # r1 no longer runs: a new request under its id counts again
    arrivals.arrived("r1", ("a",), Owner("r1"), at=30.0)
    assert arrivals.rate("normal", now=30.0) * HALF_LIFE == pytest.approx(2.0, rel=0.03)


def test_the_expected_arrivals_repeat_the_recent_mix_at_the_rate() -> None:
    arrivals = Arrivals(start=0.0)
    arrivals.arrived("r1", ("a",), Owner("r1"), at=600.0)  # a user of its own
    arrivals.arrived("r2", ("b", "b"), Owner("ci", "normal", 2.0), at=1200.0)
    arrivals.arrived("r3", ("a",), Owner("ci", "normal", 2.0), at=1800.0)
    arrivals.arrived("r4", ("c",), Owner("alice", "high"), at=1800.0)
    now = 1800.0
    normal, high = arrivals.rate("normal", now=now), arrivals.rate("high", now=now)
    coming = list(itertools.islice(arrivals.expected(now=now), 8))
    assert [a.at for a in coming] == sorted(a.at for a in coming)
    ours = [a for a in coming if a.owner.priority == "normal"]
    expected_at = [now + j / normal for j in range(1, 1 + len(ours))]
    assert [a.at for a in ours] == pytest.approx(expected_at)
    assert [a.pools for a in ours[:4]] == [("a",), ("b", "b"), ("a",), ("a",)]
    # the passer-by comes back as a new user each time; "ci" (seen twice) as itself
    assert ours[0].owner.user != ours[3].owner.user and "r1" not in ours[0].owner.user
    assert ours[1].owner == Owner("ci", "normal", 2.0) == ours[2].owner
    firsts = [a for a in coming if a.owner.priority == "high"]
    assert firsts and firsts[0].at == pytest.approx(now + 1 / high)
    assert firsts[0].owner.user != "alice"  # seen once: a passer-by
    assert list(itertools.islice(arrivals.expected(now=now), 8)) == coming  # deterministic


def test_nothing_is_expected_before_anything_arrived() -> None:
    assert list(Arrivals(start=0.0).expected(now=100.0)) == []


def test_a_multi_vm_requests_later_vms_wait_for_the_arrivals_foreseen(
    redis_client: redis.Redis,
) -> None:
    """One slot of 60 s, ready 80 s after the start. ``big`` (3 VMs) queued behind ``one``
    (1 VM); a one-VM request of a new user is expected 30 s and 90 s from now: each takes
    a turn before ``big``'s next VM (a newcomer is served at the next turn), so ``big`` is
    ready two clones later. ``one`` goes first either way."""
    clock = FakeClock()
    s = slots(redis_client, clock, limit=1)
    now = clock.monotonic()
    s.wants.extend("one", [Want("a", "a", now)])
    s.wants.extend("big", [Want("a", "a", now)] * 3)
    plain = estimate(s, ["one", "big"], {"a": A}, in_use=0, now=now)
    # one 0..60, big 60..120, big 120..180, big 180..240: ready 260
    assert plain == {"one": (0, now + 80), "big": (1, now + 260)}
    coming = [Arrival(now + 30, Owner("x1"), ("a",)), Arrival(now + 90, Owner("x2"), ("a",))]
    found = estimate(s, ["one", "big"], {"a": A}, in_use=0, now=now, arrivals=coming)
    # one 0..60, big 60..120, x1 120..180, big 180..240, x2 240..300, big 300..360
    assert found == {"one": (0, now + 80), "big": (1, now + 380)}
    assert len(s.wants) == 4  # the manager's queue is left alone


def test_an_endless_stream_of_arrivals_is_bounded(redis_client: redis.Redis) -> None:
    clock = FakeClock()
    s = slots(redis_client, clock, limit=1)
    now = clock.monotonic()
    s.wants.extend("big", [Want("a", "a", now)] * 3)
    s.wants.pop()  # big took a turn: every newcomer goes before its next VM
    taken = itertools.count()

    def flood():  # type: ignore[no-untyped-def]
        for j in itertools.count(1):
            next(taken)
            yield Arrival(now + j * 0.001, Owner(f"x{j}"), ("a",))

    found = estimate(s, ["big"], {"a": A}, in_use=0, now=now, arrivals=flood())
    foreseen = FORESEEN_PER_QUEUED * (2 + 1)
    assert next(taken) <= foreseen + 1
    assert found["big"][1] == now + (foreseen + 1) * 60 + 80  # after every foreseen one


def test_the_board_learns_the_arrivals_it_is_told_of(redis_client: redis.Redis) -> None:
    clock = FakeClock()
    s = slots(redis_client, clock, limit=1)
    store = WaitStore(redis_client)
    store.publish_times("a", A)
    board = WaitBoard(slots=s, store=store, clock=clock)
    clock.advance(HALF_LIFE)
    for i in range(30):  # 30 in a half-life: one every 20 s
        board.arrived(f"r{i}", (("a1", "a"), ("a2", "a")), Owner(f"r{i}"))
    assert board.arrivals.rate("normal", now=clock.monotonic()) > 0
    s.wants.extend("big", [Want("a", "a", clock.monotonic())] * 3)
    s.wants.pop()
    board.publish(["big"], in_use=1)
    wait = store.wait("big")
    assert wait is not None
    # two VMs left behind a busy slot: without arrivals ready at +30+60+80 = +170 s
    assert wait.ready_at > clock.now() + 170 + 60
