"""Alias failover's rule (actors/placement/failover.py): pure functions, no Redis, no clock."""

from __future__ import annotations

import pytest

from vmpooler.actors.placement.failover import (
    HealthTracker,
    Member,
    State,
    apportion,
    ceiling_of,
    plan,
)

X = frozenset({"x"})


def m(name: str, size: int = 5, state: State = State.OK, ready: int = 0, *,
      weight: int | None = None, ceiling: int | None = None,
      aliases: frozenset[str] = X) -> Member:
    return Member(name=name, size=size, aliases=aliases, state=state, ready=ready,
                  weight=weight, ceiling=ceiling)


def extras(members: list[Member]) -> dict[str, int]:
    return {name: cover.extra for name, cover in plan(members).items()}


# -- apportion ------------------------------------------------------------------------------
@pytest.mark.parametrize(("amount", "weights", "parts"), [
    (5, [1, 1], [3, 2]),            # ties go to the earlier one
    (5, [1, 1, 1], [2, 2, 1]),
    (10, [3, 1], [8, 2]),           # 7.5 / 2.5: the larger remainder first, then order
    (4, [0, 0], [2, 2]),            # all zero: evenly
    (4, [2, 0], [4, 0]),
    (0, [1, 1], [0, 0]),
    (7, [], []),
])
def test_apportion(amount: int, weights: list[int], parts: list[int]) -> None:
    assert apportion(amount, weights) == parts
    if weights:
        assert sum(parts) == max(0, amount)


# -- nobody down: nothing changes ---------------------------------------------------------
def test_all_ok_nobody_grows() -> None:
    assert extras([m("a"), m("b"), m("c")]) == {"a": 0, "b": 0, "c": 0}


def test_a_down_pool_is_taken_over_by_its_one_sibling() -> None:
    covers = plan([m("a", 5, State.DOWN), m("b", 5)])
    assert covers["b"].extra == 5 and dict(covers["b"].by_pool) == {"a": 5}
    assert covers["a"].extra == 0


def test_the_share_is_split_evenly_without_weights() -> None:
    assert extras([m("a", 5, State.DOWN), m("b", 4), m("c", 4)]) == {"a": 0, "b": 3, "c": 2}


def test_the_share_is_split_by_backend_weight_when_every_taker_has_one() -> None:
    got = extras([m("a", 8, State.DOWN, weight=1), m("b", 8, weight=3), m("c", 8, weight=1)])
    assert got == {"a": 0, "b": 6, "c": 2}


def test_one_taker_without_weight_means_even_split() -> None:
    got = extras([m("a", 8, State.DOWN), m("b", 8, weight=3), m("c", 8)])
    assert got == {"a": 0, "b": 4, "c": 4}


def test_a_zero_weight_takes_only_what_the_others_cannot() -> None:
    got = extras([m("a", 6, State.DOWN), m("b", 2, weight=1, ceiling=4), m("c", 2, weight=0)])
    assert got == {"a": 0, "b": 2, "c": 4}


def test_each_grows_at_most_to_its_ceiling_and_the_rest_goes_to_the_others() -> None:
    got = extras([m("a", 10, State.DOWN), m("b", 5, ceiling=6), m("c", 5, ceiling=20)])
    assert got == {"a": 0, "b": 1, "c": 9}


def test_what_no_one_has_room_for_is_not_covered() -> None:
    got = extras([m("a", 10, State.DOWN), m("b", 5, ceiling=7), m("c", 5, ceiling=6)])
    assert got == {"a": 0, "b": 2, "c": 1}


def test_the_default_ceiling_is_the_size_plus_the_largest_sibling() -> None:
    members = [m("a", 10, State.DOWN), m("b", 2), m("c", 3)]
    assert ceiling_of(members[1], members) == 2 + 10
    assert extras(members) == {"a": 0, "b": 5, "c": 5}
    assert extras([m("a", 10, State.DOWN), m("b", 2)]) == {"a": 0, "b": 10}


def test_a_ceiling_below_the_size_holds_the_size() -> None:
    members = [m("a", 5, State.DOWN), m("b", 5, ceiling=3)]
    assert ceiling_of(members[1], members) == 5
    assert extras(members) == {"a": 0, "b": 0}


def test_a_recovering_pool_is_owed_only_what_it_does_not_hold_yet() -> None:
    assert extras([m("a", 5, State.RECOVERING, ready=3), m("b", 5)])["b"] == 2
    assert extras([m("a", 5, State.RECOVERING, ready=5), m("b", 5)])["b"] == 0


def test_a_down_pool_whose_inventory_answers_counts_its_ready_vms() -> None:
    assert extras([m("a", 5, State.DOWN, ready=2), m("b", 5)])["b"] == 3


def test_pools_that_are_not_ok_take_nothing() -> None:
    got = extras([m("a", 5, State.DOWN), m("b", 5, State.RECOVERING, ready=1),
                  m("c", 5, ceiling=20)])
    assert got == {"a": 0, "b": 0, "c": 9}
    # by default c may grow by the largest sibling's size only
    assert extras([m("a", 5, State.DOWN), m("b", 5, State.RECOVERING, ready=1), m("c", 5)]
                  )["c"] == 5


def test_only_siblings_of_a_shared_alias_take_over() -> None:
    y = frozenset({"y"})
    got = extras([m("a", 5, State.DOWN), m("b", 5), m("c", 5, aliases=y)])
    assert got == {"a": 0, "b": 5, "c": 0}


def test_a_pool_of_two_aliases_covers_for_both() -> None:
    y, xy = frozenset({"y"}), frozenset({"x", "y"})
    covers = plan([m("a", 4, State.DOWN), m("b", 5, aliases=xy, ceiling=12),
                   m("c", 3, State.DOWN, aliases=y)])
    assert covers["b"].extra == 7 and dict(covers["b"].by_pool) == {"a": 4, "c": 3}


def test_the_plan_does_not_depend_on_the_order_members_come_in() -> None:
    members = [m("a", 7, State.DOWN), m("b", 3), m("c", 3), m("d", 3)]
    assert plan(members) == plan(list(reversed(members)))
    assert sum(c.extra for c in plan(members).values()) == 7


# -- a pool's own state -------------------------------------------------------------------
def observe(t: HealthTracker, **kw: object) -> State:
    args: dict[str, object] = {"inventory_ok": True, "inventory_failures": 0,
                               "breaker_open": False, "clone_failures": 0, "ready": 5,
                               "size": 5}
    args.update(kw)
    return t.observe(**args).state  # type: ignore[arg-type]


def test_down_after_threshold_failed_inventories_then_recovering_then_ok() -> None:
    t = HealthTracker(threshold=3)
    assert observe(t, inventory_ok=False, inventory_failures=2, ready=0) is State.OK
    health = t.observe(inventory_ok=False, inventory_failures=3, breaker_open=False,
                       clone_failures=0, ready=4, size=5)
    assert health.state is State.DOWN and health.reason == "inventory_failed"
    assert health.deliverable == 0, "ready VMs of a pool whose inventory fails do not count"
    assert observe(t, ready=1) is State.RECOVERING
    assert observe(t, ready=4) is State.RECOVERING
    assert observe(t, ready=5) is State.OK


def test_an_open_breaker_is_down_at_once() -> None:
    t = HealthTracker(threshold=3)
    health = t.observe(inventory_ok=False, inventory_failures=1, breaker_open=True,
                       clone_failures=0, ready=5, size=5)
    assert health.state is State.DOWN and health.reason == "breaker_open"


def test_failing_clones_make_it_down_until_a_clone_succeeds() -> None:
    t = HealthTracker(threshold=2)
    assert observe(t, clone_failures=1, ready=0) is State.OK
    assert observe(t, clone_failures=2, ready=0) is State.DOWN
    assert observe(t, clone_failures=5, ready=0) is State.DOWN, "inventory ok is not enough"
    assert observe(t, clone_failures=0, ready=0) is State.RECOVERING


def test_a_recovering_pool_failing_again_is_down_again() -> None:
    t = HealthTracker(threshold=1)
    observe(t, inventory_ok=False, inventory_failures=1, ready=0)
    assert observe(t, ready=0) is State.RECOVERING
    assert observe(t, inventory_ok=False, inventory_failures=1, ready=0) is State.DOWN


def test_a_pool_below_its_size_without_failures_is_simply_ok() -> None:
    t = HealthTracker(threshold=3)
    assert observe(t, ready=0) is State.OK
