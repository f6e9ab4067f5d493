"""The on-demand manager's record of each request: where it stands (:class:`Standing`), its
one table of transitions, and the record dropped by the change that leaves it holding
nothing (no call to remember)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pykka
import pytest

from vmpooler.actors.ondemand.tracking import TRANSITIONS, Standing, Tracker
from vmpooler.actors.runtime.transitions import IllegalTransitionError, check_transition

RID = "r1"
ALLOWED = {
    (Standing.IDLE, Standing.RUNNING), (Standing.IDLE, Standing.WAITING),
    (Standing.IDLE, Standing.BACKING_OFF),
    (Standing.RUNNING, Standing.RUNNING), (Standing.RUNNING, Standing.IDLE),
    (Standing.RUNNING, Standing.WAITING), (Standing.RUNNING, Standing.BACKING_OFF),
    (Standing.WAITING, Standing.WAITING), (Standing.WAITING, Standing.RUNNING),
    (Standing.WAITING, Standing.BACKING_OFF),
    (Standing.BACKING_OFF, Standing.BACKING_OFF), (Standing.BACKING_OFF, Standing.IDLE),
}


class Idle(pykka.ThreadingActor):
    """Stands for a request actor: the tracker only keeps its ref."""


@pytest.fixture
def ref() -> Iterator[pykka.ActorRef[Any]]:
    actor = Idle.start()
    yield actor
    actor.stop(timeout=5)


def _ref_for(state: Standing, ref: pykka.ActorRef[Any]) -> pykka.ActorRef[Any] | None:
    return ref if state is Standing.RUNNING else None


def _in(state: Standing, ref: pykka.ActorRef[Any]) -> Tracker:
    """A tracker whose record of RID stands at ``state`` (reached from IDLE)."""
    tracker = Tracker()
    if state is not Standing.IDLE:
        tracker.to(RID, state, _ref_for(state, ref))
    return tracker


@pytest.mark.parametrize(("old", "new"), list(itertools.product(Standing, Standing)))
def test_only_the_tabled_transitions_are_allowed(old: Standing, new: Standing,
                                                 ref: pykka.ActorRef[Any]) -> None:
    assert (new in TRANSITIONS[old]) == ((old, new) in ALLOWED)
    tracker = _in(old, ref)
    if (old, new) in ALLOWED:
        assert check_transition(TRANSITIONS, RID, old, new) is new
        tracker.to(RID, new, _ref_for(new, ref))
        assert tracker.state(RID) is new
        assert tracker.ref(RID) is _ref_for(new, ref)  # a ref exactly while RUNNING
        assert (tracker.get(RID) is None) == (new is Standing.IDLE)
    else:
        with pytest.raises(IllegalTransitionError,
                           match=f"request '{RID}': illegal transition {old.value} -> "
                                 f"{new.value}"):
            tracker.to(RID, new, _ref_for(new, ref))
        assert tracker.state(RID) is old and tracker.ref(RID) is _ref_for(old, ref)


def test_a_ref_goes_with_running_only(ref: pykka.ActorRef[Any]) -> None:
    tracker = Tracker()
    with pytest.raises(ValueError, match="a ref goes with running only"):
        tracker.to(RID, Standing.RUNNING)
    with pytest.raises(ValueError, match="a ref goes with running only"):
        tracker.to(RID, Standing.WAITING, ref)
    assert tracker.get(RID) is None


@pytest.mark.parametrize(("old", "after"), [
    (Standing.IDLE, Standing.IDLE), (Standing.RUNNING, Standing.IDLE),
    (Standing.BACKING_OFF, Standing.IDLE), (Standing.WAITING, Standing.WAITING),
])
def test_an_actor_that_ended_leaves_a_waiting_request_waiting(
    old: Standing, after: Standing, ref: pykka.ActorRef[Any],
) -> None:
    tracker = _in(old, ref)
    assert tracker.end(RID) is _ref_for(old, ref)
    assert tracker.state(RID) is after and not tracker.runs(RID)
    assert (tracker.get(RID) is None) == (after is Standing.IDLE)


def test_a_running_request_is_listed_with_its_actor(ref: pykka.ActorRef[Any]) -> None:
    tracker = _in(Standing.RUNNING, ref)
    tracker.to("r2", Standing.WAITING)
    tracker.to("r3", Standing.BACKING_OFF)
    assert tracker.running() == {RID} and list(tracker.refs()) == [ref]
    assert len(tracker) == 3
