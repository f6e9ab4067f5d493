"""Waiting for Redis at start (web/cli/startup.py): the back-off, the retry loop and the
background starter of ``vmpooler run``'s manager. Nothing here sleeps: waits are injected or
cut short, and the tests wait on events with deadlines."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest
import redis

from tests.harness import make_config, pool, wait_until
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.storage.connection import connect
from vmpooler.actors.storage.embedded_redis import free_port
from vmpooler.actors.system import PoolerSystem
from vmpooler.web.cli.startup import Backoff, ManagerStarter, retry_while_unavailable

WAIT = 10.0


class FakeSystem:
    def __init__(self) -> None:
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.stopped.set()


def failing(times: int, then: Callable[[], object], error: Exception | None = None,
            ) -> tuple[Callable[[], object], list[int]]:
    """An attempt that raises ``error`` (a refused connection) ``times`` times, then calls
    ``then``; and the list counting the calls."""
    calls: list[int] = []

    def attempt() -> object:
        calls.append(1)
        if len(calls) <= times:
            raise error or redis.ConnectionError("Error 111 connecting to 127.0.0.1:1.")
        return then()

    return attempt, calls


@pytest.mark.parametrize(("cap", "expected"), [
    (30.0, [1, 2, 4, 8, 16, 30, 30, 30]), (60.0, [1, 2, 4, 8, 16, 32, 60, 60]),
])
def test_backoff_doubles_from_one_second_to_the_cap(cap: float, expected: list[float]) -> None:
    backoff = Backoff(cap=cap)
    assert [backoff.next_delay() for _ in expected] == expected


def test_each_failure_is_logged_once_then_waited_for(caplog: pytest.LogCaptureFixture) -> None:
    attempt, calls = failing(6, lambda: "up")
    waits: list[float] = []
    with caplog.at_level(logging.ERROR, logger="vmpooler.web.cli.startup"):
        result = retry_while_unavailable(attempt, threading.Event(), Backoff(),
                                         wait=lambda s: bool(waits.append(s)))
    assert (result, len(calls), waits) == ("up", 7, [1, 2, 4, 8, 16, 30])
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"[!] [manager] redis is unavailable (Error 111 connecting to "
                     f"127.0.0.1:1.); retrying in {s:.0f}s" for s in waits]


def test_a_stop_during_a_wait_ends_the_retries() -> None:
    attempt, calls = failing(10, lambda: "up")
    assert retry_while_unavailable(attempt, threading.Event(), Backoff(),
                                   wait=lambda _s: True) is None
    assert len(calls) == 1


def test_a_stop_before_any_attempt_makes_none() -> None:
    stop = threading.Event()
    stop.set()
    attempt, calls = failing(0, lambda: "up")
    assert retry_while_unavailable(attempt, stop, Backoff()) is None
    assert calls == []


def test_other_errors_are_not_retried() -> None:
    attempt, calls = failing(1, lambda: "up", error=ValueError("a broken provider"))
    with pytest.raises(ValueError, match="a broken provider"):
        retry_while_unavailable(attempt, threading.Event(), Backoff(), wait=lambda _s: False)
    assert len(calls) == 1


# -- the starter of `vmpooler run`'s manager ---------------------------------------------------
class Outcome:
    """What the starter handed back, and when."""

    def __init__(self) -> None:
        self.started: list[object] = []
        self.failed: list[BaseException] = []
        self.event = threading.Event()

    def on_started(self, system: object) -> None:
        self.started.append(system)
        self.event.set()

    def on_failed(self, error: BaseException) -> None:
        self.failed.append(error)
        self.event.set()


def starter(attempt: Callable[[], object], outcome: Outcome, backoff: Backoff | None = None,
            ) -> ManagerStarter:
    return ManagerStarter(attempt, on_started=outcome.on_started,  # type: ignore[arg-type]
                          on_failed=outcome.on_failed,
                          backoff=backoff or Backoff(first=0.001, cap=0.002))


def test_redis_up_at_once_starts_on_the_callers_thread() -> None:
    outcome, system = Outcome(), FakeSystem()
    attempt, _ = failing(0, lambda: system)
    s = starter(attempt, outcome)
    s.begin()
    assert outcome.started == [system] and not s.waiting
    s.stop()
    assert not system.stopped.is_set()  # the caller's to stop


def test_a_first_error_other_than_redis_propagates() -> None:
    outcome = Outcome()
    attempt, _ = failing(1, FakeSystem, error=RuntimeError("a Ruby manager is running"))
    with pytest.raises(RuntimeError, match="Ruby"):
        starter(attempt, outcome).begin()
    assert outcome.started == [] and outcome.failed == []


def test_redis_down_at_first_starts_from_a_thread_once_it_answers() -> None:
    outcome, system = Outcome(), FakeSystem()
    attempt, calls = failing(3, lambda: system)
    s = starter(attempt, outcome)
    s.begin()  # returns at once: the API goes on serving
    assert outcome.event.wait(WAIT)
    assert outcome.started == [system] and len(calls) == 4
    wait_until(lambda: not s.waiting, WAIT, "the starter's thread to end")
    s.stop()
    assert not system.stopped.is_set()


def test_a_later_error_other_than_redis_is_handed_to_on_failed() -> None:
    outcome, calls = Outcome(), []

    def attempt() -> object:
        calls.append(1)
        if len(calls) == 1:
            raise redis.ConnectionError("refused")
        raise RuntimeError("a Ruby manager is running")

    s = starter(attempt, outcome)
    s.begin()
    assert outcome.event.wait(WAIT)
    assert [str(e) for e in outcome.failed] == ["a Ruby manager is running"]
    assert outcome.started == []
    s.stop()


def test_stop_ends_a_long_wait_at_once() -> None:
    outcome = Outcome()
    attempt, calls = failing(100, FakeSystem)
    s = starter(attempt, outcome, Backoff(first=600.0, cap=600.0))
    s.begin()
    assert s.waiting
    began = time.monotonic()
    s.stop()
    assert time.monotonic() - began < 2.0 and not s.waiting
    assert len(calls) == 1 and outcome.started == [] and outcome.failed == []


def test_a_system_started_after_stop_is_stopped_not_handed_over() -> None:
    outcome, system = Outcome(), FakeSystem()
    entered, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def attempt() -> object:
        calls.append(1)
        if len(calls) == 1:
            raise redis.ConnectionError("refused")
        entered.set()
        assert release.wait(WAIT)
        return system

    s = starter(attempt, outcome)
    s.begin()
    assert entered.wait(WAIT)  # the second attempt is under way
    s.stop(timeout=0.01)  # gives up waiting for it
    release.set()
    assert system.stopped.wait(WAIT)
    assert outcome.started == []


def test_a_failed_start_leaves_what_it_was_given_open() -> None:
    """``vmpooler run`` retries ``PoolerSystem.start`` with its API's client and metrics
    backend: a failed attempt must not close them under the API."""
    dead = connect("127.0.0.1", free_port(), pool_size=2, pool_timeout=1, reconnect_attempts=0)
    metrics = RecordingMetrics()
    with pytest.raises(redis.ConnectionError):
        PoolerSystem.start(make_config([pool("p", 1)]), redis_client=dead, metrics=metrics,
                           consume_commands=False)
    assert not metrics.closed
    dead.close()
