"""A pool cycle's inventory as an explicit state (:class:`Listing`): its one table of
transitions, and what the states guard: a cycle requested while the inventory is
outstanding sends no second ``LIST_VMS`` then, and runs once more after the answer."""

from __future__ import annotations

import itertools
import random
import threading
from typing import Any

import pytest
import redis

from tests.harness import context_for, make_config, pool, started, wait_until
from vmpooler.actors.pool.cycle import TRANSITIONS, Listing
from vmpooler.actors.runtime.transitions import IllegalTransitionError, check_transition
from vmpooler.providers.dummy import DummyProvider

WAIT = 10.0
ALLOWED = {
    (Listing.IDLE, Listing.LISTING), (Listing.IDLE, Listing.IDLE),
    (Listing.LISTING, Listing.LISTING), (Listing.LISTING, Listing.AGAIN),
    (Listing.LISTING, Listing.IDLE),
    (Listing.AGAIN, Listing.AGAIN), (Listing.AGAIN, Listing.LISTING),
    (Listing.AGAIN, Listing.IDLE),
}


@pytest.mark.parametrize(("old", "new"), list(itertools.product(Listing, Listing)))
def test_only_the_tabled_transitions_are_allowed(old: Listing, new: Listing) -> None:
    assert (new in TRANSITIONS[old]) == ((old, new) in ALLOWED)
    if (old, new) in ALLOWED:
        assert check_transition(TRANSITIONS, "pool 'a'", old, new) is new
    else:
        with pytest.raises(IllegalTransitionError,
                           match=f"pool 'a': illegal transition {old.value} -> {new.value}"):
            check_transition(TRANSITIONS, "pool 'a'", old, new)


class HeldListing(DummyProvider):
    """The dummy provider whose inventory waits while ``open`` is clear; counts listings."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.open = threading.Event()
        self.open.set()
        self.listings = 0
        self.counting = threading.Lock()

    def vms_in_pool(self, pool: str) -> list[str]:
        with self.counting:
            self.listings += 1
        assert self.open.wait(WAIT)
        return super().vms_in_pool(pool)


def test_a_cycle_requested_while_listing_runs_once_more_after(
    redis_client: redis.Redis,
) -> None:
    config = make_config([pool("a", 1)])
    provider = HeldListing(context_for(config), rng=random.Random(1), sleep=lambda _s: None)
    with started(redis_client, config, provider=provider) as h:
        h.wait_full("a", 1)
        h.quiesce()
        before = provider.listings
        provider.open.clear()
        assert h.system.notify("a", "test")
        wait_until(lambda: provider.listings == before + 1, WAIT, "a listing held")
        for reason in ("again", "and again"):
            assert h.system.notify("a", reason)
        actor = h.system.actor_ref("pool:a")
        assert actor is not None
        actor.ask("ping", timeout=WAIT)  # the wake-ups are handled
        assert provider.listings == before + 1, "a second listing while one was outstanding"
        provider.open.set()
        wait_until(lambda: provider.listings == before + 2, WAIT,
                   "the cycle requested while listing")
        h.quiesce()
        assert provider.listings == before + 2, "more than one cycle for the wake-ups"
