"""FairQueue: round-robin across keys, FIFO within a key."""

from __future__ import annotations

from vmpooler.actors.fairness.fair_queue import FairQueue


def drain(q: FairQueue[str, int]) -> list[tuple[str, int]]:
    out = []
    while (item := q.pop()) is not None:
        out.append(item)
    return out


def test_turns_alternate_between_keys() -> None:
    q: FairQueue[str, int] = FairQueue()
    q.extend("big", range(4))
    q.extend("small", [9])
    assert drain(q) == [("big", 0), ("small", 9), ("big", 1), ("big", 2), ("big", 3)]


def test_push_front_goes_first_and_keeps_order_within_key() -> None:
    q: FairQueue[str, int] = FairQueue()
    q.extend("a", [1, 2])
    q.extend("b", [5])
    key, item = q.pop()
    q.push_front(key, item)
    assert drain(q) == [("a", 1), ("b", 5), ("a", 2)]


def test_drop_count_len_and_empty() -> None:
    q: FairQueue[str, int] = FairQueue()
    assert not q and q.pop() is None and len(q) == 0
    q.extend("a", [1, 2, 3])
    q.extend("b", [4])
    q.extend("c", [])
    assert len(q) == 4 and q.count("a") == 3 and q.count("c") == 0
    assert q.drop("a") == 3 and q.drop("a") == 0
    assert drain(q) == [("b", 4)]
    q.push_front("z", 7)
    assert drain(q) == [("z", 7)]
