"""FairShareQueue: priority classes, weighted fair share between users, round robin between
a user's keys, FIFO within a key."""

from __future__ import annotations

from collections import Counter

from vmpooler.actors.fairness.fair_share import FairShareQueue, Owner

Q = FairShareQueue[str, int]


def drain(q: Q, limit: int = 100_000) -> list[tuple[str, int]]:
    out = []
    while len(out) < limit and (item := q.pop()) is not None:
        out.append(item)
    return out


def test_a_user_with_200_requests_does_not_outnumber_a_user_with_one() -> None:
    q = Q()
    for i in range(200):
        q.extend(f"big-{i}", [i], Owner("flood"))
    first = drain(q, 3)  # the flood has been served for a while
    q.extend("small", [0], Owner("one"))
    assert q.pop() == ("small", 0)
    assert len(first) == 3 and len(q) == 197


def test_a_newcomer_is_served_at_the_next_turn_even_after_a_long_run() -> None:
    q = Q()
    q.extend("big", range(200), Owner("flood"))
    drain(q, 150)
    q.extend("small", [7], Owner("one"))
    assert q.pop() == ("small", 7)


def test_shares_1_2_3_get_their_ratio_of_turns_within_ten_percent() -> None:
    q = Q()
    for user, share in (("a", 1), ("b", 2), ("c", 3)):
        for r in range(5):  # several requests each: the user counts, not the request
            q.extend(f"{user}-{r}", range(10_000), Owner(user, share=share))
    turns = Counter(key.split("-")[0] for key, _ in drain(q, 6_000))
    for user, share in (("a", 1), ("b", 2), ("c", 3)):
        expected = 6_000 * share / 6
        assert abs(turns[user] - expected) <= 0.1 * expected, turns
    assert abs(turns["a"] - 1_000) <= 1  # stride scheduling is exact, not only within 10 %


def test_an_idle_user_banks_no_credit() -> None:
    q = Q()
    q.extend("busy", range(1_000), Owner("busy"))
    drain(q, 500)  # "late" was idle meanwhile
    q.extend("late", range(1_000), Owner("late"))
    turns = Counter(key for key, _ in drain(q, 100))
    assert turns == {"busy": 50, "late": 50}


def test_leaving_and_coming_back_does_not_wipe_a_lead() -> None:
    q = Q()
    q.extend("a1", range(10), Owner("a", share=1))
    q.extend("b1", range(100), Owner("b", share=1))
    drain(q, 20)  # a is drained (10 turns), b got 10
    assert q.count("a1") == 0
    # "b" is alone for 5 turns; "a" came back with a pass behind the virtual time: it
    # starts there, not earlier
    drain(q, 5)
    q.extend("a2", range(10), Owner("a", share=1))
    assert [key for key, _ in drain(q, 4)] in (["a2", "b1", "a2", "b1"],
                                              ["b1", "a2", "b1", "a2"])


def test_round_robin_between_a_users_requests_fifo_within_one() -> None:
    q = Q()
    q.extend("r1", [1, 2, 3], Owner("u"))
    q.extend("r2", [9], Owner("u"))
    assert drain(q) == [("r1", 1), ("r2", 9), ("r1", 2), ("r1", 3)]


def test_high_goes_before_normal_before_low_whoever_asks() -> None:
    q = Q()
    q.extend("low", [1, 2], Owner("x", "low"))
    q.extend("normal", [1, 2], Owner("y", "normal"))
    q.extend("high", [1, 2], Owner("z", "high", share=0.1))
    assert [k for k, _ in drain(q)] == ["high", "high", "normal", "normal", "low", "low"]


def test_a_users_high_request_overtakes_its_own_normal_ones() -> None:
    q = Q()
    q.extend("n", range(5), Owner("u"))
    q.pop()
    q.extend("h", [0], Owner("u", "high"))
    assert q.pop() == ("h", 0)


def test_fair_share_inside_a_class() -> None:
    q = Q()
    q.extend("a", range(100), Owner("a", "high", share=1))
    q.extend("b", range(100), Owner("b", "high", share=3))
    q.extend("c", range(100), Owner("c", "normal", share=100))
    turns = Counter(k for k, _ in drain(q, 40))
    assert turns == {"a": 10, "b": 30}


def test_push_front_gives_the_turn_back() -> None:
    q = Q()
    q.extend("a", [1, 2], Owner("ua"))
    q.extend("b", [5, 6], Owner("ub"))
    key, item = q.pop()
    q.push_front(key, item)
    assert drain(q) == [("a", 1), ("b", 5), ("a", 2), ("b", 6)]


def test_push_front_of_a_drained_key_keeps_its_owner() -> None:
    q = Q()
    q.extend("a", [1], Owner("ua", "high"))
    q.extend("b", [5], Owner("ub", "normal"))
    assert q.pop() == ("a", 1)
    q.push_front("a", 1)  # a grant given back after the key emptied
    assert q.owner("a") == Owner("ua", "high")
    assert drain(q) == [("a", 1), ("b", 5)]


def test_drop_count_len_and_empty() -> None:
    q = Q()
    assert not q and q.pop() is None and len(q) == 0
    q.extend("a", [1, 2, 3], Owner("u"))
    q.extend("b", [4], Owner("u"))
    q.extend("c", [])
    assert len(q) == 4 and q.count("a") == 3 and q.count("c") == 0
    assert q.drop("a") == 3 and q.drop("a") == 0 and q.owner("a") is None
    assert drain(q) == [("b", 4)]
    q.push_front("z", 7)
    assert q.owner("z") == Owner("z")
    assert drain(q) == [("z", 7)]


def test_unknown_priority_and_bad_shares_fall_back() -> None:
    q = Q()
    q.extend("a", range(10), Owner("a", "urgent", share=0))
    q.extend("b", range(10), Owner("b", "normal", share=float("nan")))
    assert q.owner("a") == Owner("a", "normal", 0)
    assert Counter(k for k, _ in drain(q, 10)) == {"a": 5, "b": 5}
