"""Placement on its own (no HTTP): which pools serve a name for a checkout and for an
on-demand request, ``backend_weight`` draws, alias failover's preference, and the reader of
the published failover states."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest
import redis

from tests.api_harness import api_config, api_pool
from vmpooler.actors.config import Config
from vmpooler.actors.placement.choose import (
    checkout_candidates,
    choose_pool,
    failover_names,
    names_of,
    ondemand_plan,
)
from vmpooler.actors.placement.failover import Member, State
from vmpooler.actors.placement.health import Published, read_published
from vmpooler.actors.placement.weights import backend_weight, draw_first, weighted_draw
from vmpooler.actors.storage.failover_store import FailoverState, FailoverStore
from vmpooler.actors.storage.request_records import Entry


class Recording(random.Random):
    """A seeded random source that records every draw asked of it."""

    def __init__(self, seed: int = 7) -> None:
        super().__init__(seed)
        self.calls: list[str] = []

    def random(self) -> float:
        self.calls.append("random")
        return super().random()

    def getrandbits(self, k: int) -> int:  # kept: choice() then draws as random.Random's
        return super().getrandbits(k)

    def choice(self, seq: Sequence[Any]) -> Any:
        self.calls.append("choice")
        return super().choice(seq)


class Health:
    """Failover health that says ``down`` cannot deliver, and records what it was asked."""

    def __init__(self, down: frozenset[str] = frozenset()) -> None:
        self.down = down
        self.asked: list[list[str]] = []

    def undeliverable(self, config: Config, pools: Sequence[str]) -> frozenset[str]:
        self.asked.append(list(pools))
        return self.down & set(pools)


def _config(*, failover: bool = False, weights: dict[str, int] | None = None) -> Config:
    extra: dict[str, Any] = {"failover": True} if failover else {}
    return api_config([
        api_pool("a", 2, alias=("x",), clone_target="t1", **extra),
        api_pool("b", 2, alias=("x",), clone_target="t2", **extra),
        api_pool("c", 2, alias=("x",), clone_target="t3", **extra),
        api_pool("solo", 1),
    ], backend_weight=weights or {})


def test_a_pool_without_aliases_configured_is_its_own_candidate_with_no_draw() -> None:
    config = api_config([api_pool("solo", 1)])
    rng = Recording()
    assert checkout_candidates(config, rng, Health(), "solo") == ["solo"]
    assert rng.calls == []


def test_an_alias_draws_one_pool_uniformly_and_keeps_the_others_as_fallbacks() -> None:
    config = _config()
    rng = Recording(3)
    expected_first = random.Random(3).choice(["x", "a", "b", "c"])
    got = checkout_candidates(config, rng, Health(), "x")
    assert rng.calls == ["choice"]
    # the alias itself takes part in the draw but is not a pool: dropped afterwards
    order = [expected_first] + [p for p in ["x", "a", "b", "c"] if p != expected_first]
    assert got == [p for p in order if p != "x"]


def test_a_weighted_alias_never_draws_a_pool_of_weight_zero() -> None:
    config = _config(weights={"t1": 5, "t2": 0, "t3": 1})
    firsts = {choose_pool(config, random.Random(seed), "x") for seed in range(200)}
    assert firsts == {"a", "c"}


def test_weights_count_only_when_every_candidate_has_one() -> None:
    partial = _config(weights={"t1": 5, "t2": 1})  # c (t3) has none
    assert backend_weight(partial, "a") == 5 and backend_weight(partial, "c") is None
    assert backend_weight(partial, "nope") is None
    rng = Recording()
    assert weighted_draw(partial, rng, ["a", "b", "c"]) is None
    assert rng.calls == []  # nothing drawn: the uniform draw is the caller's
    all_zero = _config(weights={"t1": 0, "t2": 0, "t3": 0})
    assert weighted_draw(all_zero, rng, ["a", "b", "c"]) is None and rng.calls == []


def test_a_weighted_draw_uses_one_random_number_in_proportion() -> None:
    config = _config(weights={"t1": 3, "t2": 1, "t3": 0})
    rng = Recording(11)
    wins = [weighted_draw(config, rng, ["a", "b", "c"]) for _ in range(4000)]
    assert rng.calls == ["random"] * 4000
    assert wins.count("c") == 0
    assert 0.7 < wins.count("a") / len(wins) < 0.8


def test_draw_first_puts_the_drawn_backend_first_and_keeps_the_rest_in_order() -> None:
    config = _config(weights={"t1": 0, "t2": 1, "t3": 0})
    assert draw_first(config, Recording(), ["a", "b", "c"]) == ["b", "a", "c"]


def test_failover_moves_the_pools_that_cannot_deliver_last() -> None:
    for seed in range(20):
        usual = checkout_candidates(_config(), Recording(seed), Health(), "x")
        health = Health(down=frozenset({usual[0]}))
        got = checkout_candidates(_config(failover=True), Recording(seed), health, "x")
        assert got == [*usual[1:], usual[0]]
        assert health.asked == [usual]


def test_without_failover_health_is_never_asked() -> None:
    config = _config(weights={"t1": 1, "t2": 0, "t3": 0})
    health = Health(down=frozenset({"a"}))
    assert sorted(checkout_candidates(config, Recording(), health, "x")) == ["a", "b", "c"]
    assert ondemand_plan(config, Recording(), health, {"x": 3}) == [Entry("x", "a", 3)]
    assert health.asked == []
    assert failover_names(config) == frozenset()
    assert failover_names(_config(failover=True)) == frozenset({"x"})


def test_a_name_with_no_candidate_gets_no_pool() -> None:
    config = _config()
    rng = Recording()
    assert checkout_candidates(config, rng, Health(), "nope") == []
    assert choose_pool(config, rng, "nope") is None
    assert ondemand_plan(config, rng, Health(), {"nope": 2, "solo": 0}) == []
    assert "nope" not in names_of(config).requestable


def test_ondemand_leaves_out_pools_that_cannot_deliver_unless_all_cannot() -> None:
    config = _config(failover=True)
    some_down = ondemand_plan(config, Recording(), Health(frozenset({"a", "b"})), {"x": 5})
    assert some_down == [Entry("x", "c", 5)]
    all_down = ondemand_plan(config, Recording(1), Health(frozenset({"a", "b", "c"})),
                             {"x": 30})
    assert {e.pool for e in all_down} == {"a", "b", "c"}
    assert sum(e.count for e in all_down) == 30


def test_ondemand_draws_are_the_same_for_the_same_seed() -> None:
    config = _config(weights={"t1": 2, "t2": 1, "t3": 1})
    first = ondemand_plan(config, random.Random(5), Health(), {"x": 20, "solo": 2})
    again = ondemand_plan(config, random.Random(5), Health(), {"x": 20, "solo": 2})
    assert first == again
    assert first[-1] == Entry("solo", "solo", 2)


def test_published_states_make_members_and_say_who_is_down() -> None:
    configured = Member(name="a", size=4, aliases=frozenset({"x"}), weight=3, ceiling=9)
    nothing = Published()
    assert nothing.member(configured) is configured and not nothing.down("a")
    published = Published({"a": FailoverState(pool="a", state="down", size=5, ready=1)})
    member = published.member(configured)
    assert (member.state, member.size, member.ready, member.weight, member.ceiling) == (
        State.DOWN, 5, 1, 3, 9)
    assert published.down("a") and not published.down("b")
    recovering = Published({"a": FailoverState(pool="a", state="recovering")})
    assert not recovering.down("a")


def test_read_published_reads_what_a_pool_published(redis_client: redis.Redis) -> None:
    store = FailoverStore(redis_client)
    store.publish(FailoverState(pool="a", state="down", size=4, ready=0), ttl=60)
    published = read_published(store, ["a", "b"])
    assert set(published.states) == {"a"} and published.down("a")
    assert read_published(store, []).states == {}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_checkout_candidates_make_the_same_random_calls_as_vmpoolers_draw(seed: int) -> None:
    config = _config(weights={"t1": 1, "t2": 1, "t3": 1})
    rng = Recording(seed)
    checkout_candidates(config, rng, Health(), "x")
    # "x" (the alias, not a pool) has no weight: the draw is uniform, one choice
    assert rng.calls == ["choice"]
    rng = Recording(seed)
    checkout_candidates(config, rng, Health(), "a")  # a pool carrying no alias of its own
    assert rng.calls == ["random"]
