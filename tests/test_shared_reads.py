"""SharedReads: concurrent equal reads share one run, and never one that began before them."""

from __future__ import annotations

import threading

import pytest

from tests.harness import wait_until
from vmpooler.actors.storage.status_store import SharedReads


def test_sequential_calls_each_run() -> None:
    shared: SharedReads[int] = SharedReads()
    runs = iter(range(10))
    assert [shared.read("k", lambda: next(runs)) for _ in range(3)] == [0, 1, 2]


def test_callers_during_a_run_share_the_next_run_not_that_one() -> None:
    shared: SharedReads[int] = SharedReads()
    release_first = threading.Event()
    started: list[int] = []

    def run() -> int:
        n = len(started)
        started.append(n)
        if n == 0:
            release_first.wait(5)
        return n

    results: dict[str, int] = {}
    first = threading.Thread(target=lambda: results.__setitem__("first", shared.read("k", run)))
    first.start()
    wait_until(lambda: started, 5, "the first run to start")
    # asked while run 0 is in progress: must get a later run, all of them the same one
    late = [threading.Thread(target=lambda i=i: results.__setitem__(f"late{i}",
                                                                    shared.read("k", run)))
            for i in range(5)]
    for t in late:
        t.start()
    wait_until(lambda: shared.waiting("k") == 5, 5, "the five late calls to queue")
    assert started == [0]          # nobody started a second run while the first is going
    release_first.set()
    for t in (first, *late):
        t.join(5)
    assert results["first"] == 0
    assert {results[f"late{i}"] for i in range(5)} == {1}
    assert started == [0, 1]


def test_different_keys_do_not_wait_for_each_other() -> None:
    shared: SharedReads[str] = SharedReads()
    release, holding = threading.Event(), threading.Event()

    def hold() -> str:
        holding.set()
        return str(release.wait(5))

    holder = threading.Thread(target=lambda: shared.read("a", hold))
    holder.start()
    assert holding.wait(5)
    assert shared.read("b", lambda: "b") == "b"
    release.set()
    holder.join(5)


def test_an_exception_reaches_every_caller_of_its_run_and_the_next_run_is_fresh() -> None:
    shared: SharedReads[int] = SharedReads()
    release = threading.Event()
    calls = []

    def failing() -> int:
        calls.append(1)
        release.wait(5)
        raise ConnectionError("down")

    errors: list[BaseException] = []

    def call() -> None:
        try:
            shared.read("k", failing)
        except ConnectionError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(4)]
    threads[0].start()
    wait_until(lambda: calls, 5, "the first run to start")
    for t in threads[1:]:
        t.start()
    wait_until(lambda: shared.waiting("k") == 3, 5, "the other three calls to queue")
    release.set()
    for t in threads:
        t.join(5)
    assert len(errors) == 4 and len(calls) == 2  # the first run, then one shared by three
    with pytest.raises(ConnectionError):
        shared.read("k", failing)
    assert shared.read("k", lambda: 7) == 7
