"""The supervisor: restart with doubling back-off, a restart budget, and containment of
``SystemExit``/``KeyboardInterrupt`` to the one actor that raised it.

Children are :class:`Toy` actors that crash on command. Time is a :class:`FakeClock`
(the supervisor's clock and scheduler), so a back-off elapses only when the test says so.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pykka
import pytest
import redis

from tests.harness import make_config, pool, started, wait_until
from vmpooler.actors.messages import ActorCrashed, RestartActor, StopSupervising
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.runtime.restart_policy import (
    CrashLines,
    RestartHistory,
    RestartPolicy,
    Restarts,
)
from vmpooler.actors.runtime.supervisor import ActorDirectory, SupervisedActor, Supervisor

BACKOFF = 1.0
INTENSITY = 3
PERIOD = 100.0
WAIT = 5.0
SUPERVISOR_LOG = "vmpooler.actors.runtime.supervisor"


class Toy(SupervisedActor):
    """Answers ``"ping"`` with its generation; raises what it is told to raise."""

    def __init__(self, *, name: str, generation: int,
                 supervisor: pykka.ActorRef[Any] | None) -> None:
        super().__init__(name=name, supervisor=supervisor)
        self.generation = generation

    def handle(self, message: Any) -> Any:
        if isinstance(message, BaseException):
            raise message
        return self.generation


@dataclass
class Tree:
    """A started supervisor with its directory, clock and metrics."""

    supervisor: pykka.ActorRef[Any]
    directory: ActorDirectory
    clock: FakeClock
    metrics: RecordingMetrics
    starts: dict[str, int] = field(default_factory=dict)

    def start_child(self, name: str) -> pykka.ActorRef[Any]:
        def factory(sup: pykka.ActorRef[Any]) -> pykka.ActorRef[Any]:
            self.starts[name] = self.starts.get(name, 0) + 1
            return Toy.start(name=name, generation=self.starts[name], supervisor=sup)

        ref: pykka.ActorRef[Any] = self.supervisor.proxy().start_child(name, factory).get(
            timeout=WAIT)
        return ref

    def crash(self, name: str, error: BaseException | None = None) -> None:
        """Make the child crash (a ``tell`` whose handler raises) and wait until it stopped."""
        ref = self.directory.get(name)
        assert ref is not None, f"{name} is not running"
        ref.tell(error or RuntimeError("boom"))
        wait_until(lambda: not ref.is_alive(), WAIT, f"{name} to stop")

    def restart_delays(self) -> list[float]:
        return [due for due, msg in self.clock.pending() if isinstance(msg, RestartActor)]

    def ping(self, name: str) -> int:
        ref = self.directory.get(name)
        assert ref is not None, f"{name} is not running"
        return int(ref.ask("ping", timeout=WAIT))

    def given_up(self) -> list[str]:
        return list(self.supervisor.proxy().given_up().get(timeout=WAIT))


@pytest.fixture
def tree() -> Iterator[Tree]:
    clock = FakeClock()
    metrics = RecordingMetrics()
    directory = ActorDirectory()
    supervisor = Supervisor.start(
        directory=directory, scheduler=clock, clock=clock, metrics=metrics,
        backoff=BACKOFF, max_backoff=60.0, intensity=INTENSITY, period=PERIOD,
    )
    t = Tree(supervisor, directory, clock, metrics)
    yield t
    supervisor.stop(timeout=WAIT)
    for name in directory.names():
        ref = directory.get(name)
        if ref is not None:
            ref.stop(timeout=WAIT)


def _crash_and_wait_for_report(t: Tree, name: str, crashes_before: int,
                               error: BaseException | None = None) -> None:
    """Crash the child, then wait until the supervisor has handled the report (it arrives
    from the dying actor's thread just after the actor stops)."""
    t.crash(name, error)
    wait_until(lambda: t.metrics.counts("vmpooler_actor.crashed", actor=name) > crashes_before,
               WAIT, f"the crash of {name} to be reported")
    t.supervisor.ask("ping", timeout=WAIT)


def _restart_after(t: Tree, name: str, delay: float, generation: int) -> None:
    """Check the child is not back before ``delay``, and is back (new ref) once it passed."""
    old_starts = t.starts[name]
    assert t.restart_delays() == [pytest.approx(delay)]
    t.clock.advance(delay - 0.01)
    t.supervisor.ask("ping", timeout=WAIT)
    assert t.directory.get(name) is None
    assert t.starts[name] == old_starts
    t.clock.advance(0.01)
    wait_until(lambda: t.directory.get(name) is not None, WAIT, f"{name} to be restarted")
    assert t.ping(name) == generation


def test_crashed_child_is_restarted_after_a_doubling_backoff(tree: Tree) -> None:
    first = tree.start_child("toy")
    assert tree.ping("toy") == 1
    for n, delay in enumerate([BACKOFF, 2 * BACKOFF, 4 * BACKOFF]):
        _crash_and_wait_for_report(tree, "toy", n)
        _restart_after(tree, "toy", delay, generation=n + 2)
    current = tree.directory.get("toy")
    assert current is not None and current.actor_urn != first.actor_urn
    assert not first.is_alive()
    assert tree.metrics.counts("vmpooler_actor.crashed", actor="toy") == 3
    assert tree.metrics.counts("vmpooler_actor.restarted", actor="toy") == 3
    assert tree.given_up() == []


def test_backoff_starts_over_after_a_quiet_period(tree: Tree) -> None:
    tree.start_child("toy")
    _crash_and_wait_for_report(tree, "toy", 0)
    _restart_after(tree, "toy", BACKOFF, generation=2)
    tree.clock.advance(PERIOD)
    _crash_and_wait_for_report(tree, "toy", 1)
    _restart_after(tree, "toy", BACKOFF, generation=3)


def test_supervisor_gives_up_after_intensity_restarts_within_period(tree: Tree) -> None:
    tree.start_child("toy")
    tree.start_child("other")
    for n in range(INTENSITY):
        _crash_and_wait_for_report(tree, "toy", n)
        _restart_after(tree, "toy", BACKOFF * 2**n, generation=n + 2)
    _crash_and_wait_for_report(tree, "toy", INTENSITY)
    assert tree.given_up() == ["toy"]
    assert "toy" not in tree.directory.names()
    assert tree.restart_delays() == []
    assert tree.metrics.counts("vmpooler_actor.given_up", actor="toy") == 1
    tree.clock.advance(PERIOD)
    tree.supervisor.ask("ping", timeout=WAIT)
    assert tree.directory.get("toy") is None
    assert tree.starts["toy"] == INTENSITY + 1
    # The rest of the tree never noticed.
    assert tree.ping("other") == 1
    assert tree.starts["other"] == 1


def test_crash_lines_and_counts_through_the_give_up(
    tree: Tree, caplog: pytest.LogCaptureFixture,
) -> None:
    tree.start_child("toy")
    with caplog.at_level(logging.ERROR, logger=SUPERVISOR_LOG):
        for n in range(INTENSITY):
            _crash_and_wait_for_report(tree, "toy", n)
            _restart_after(tree, "toy", BACKOFF * 2**n, generation=n + 2)
        _crash_and_wait_for_report(tree, "toy", INTENSITY)
    assert [r.getMessage() for r in caplog.records if r.name == SUPERVISOR_LOG] == [
        *(f"[!] [supervisor] 'toy' crashed (RuntimeError: boom); restarting in {d:.1f}s"
          for d in (1, 2, 4)),
        "[!] [supervisor] 'toy' crashed 4 times within 100s (RuntimeError: boom); "
        "not restarting it",
    ]
    assert tree.supervisor.proxy().restart_counts().get(timeout=WAIT) == {"toy": INTENSITY}
    assert tree.metrics.counts("vmpooler_actor.crashed", actor="toy") == INTENSITY + 1
    assert tree.metrics.counts("vmpooler_actor.given_up", actor="toy") == 1


@pytest.mark.parametrize("error", [SystemExit(1), KeyboardInterrupt()],
                         ids=["SystemExit", "KeyboardInterrupt"])
def test_base_exception_stops_only_the_actor_that_raised_it(
    tree: Tree, error: BaseException
) -> None:
    tree.start_child("toy")
    other = tree.start_child("other")
    bystander = Toy.start(name="bystander", generation=0, supervisor=None)
    try:
        _crash_and_wait_for_report(tree, "toy", 0, error)
        assert other.is_alive() and bystander.is_alive() and tree.supervisor.is_alive()
        assert tree.ping("other") == 1
        assert bystander.ask("ping", timeout=WAIT) == 0
        _restart_after(tree, "toy", BACKOFF, generation=2)
    finally:
        bystander.stop(timeout=WAIT)


def test_ask_failures_go_back_to_the_caller_without_a_restart(tree: Tree) -> None:
    ref = tree.start_child("toy")
    with pytest.raises(ValueError, match="bad request"):
        ref.ask(ValueError("bad request"), timeout=WAIT)
    tree.supervisor.ask("ping", timeout=WAIT)
    assert ref.is_alive() and tree.ping("toy") == 1
    assert tree.metrics.counts("vmpooler_actor.crashed") == 0


def test_directory_returns_only_live_refs() -> None:
    directory = ActorDirectory()
    ref = Toy.start(name="x", generation=1, supervisor=None)
    directory.put("x", ref)
    assert directory.get("x") == ref
    ref.stop(timeout=WAIT)
    assert directory.get("x") is None
    assert directory.names() == ["x"]
    directory.remove("x")
    assert directory.names() == []


class FailsToStart(Toy):
    """Raises in ``setup`` on its first start only."""

    def setup(self) -> None:
        if self.generation == 1:
            raise RuntimeError("cannot start")


def test_an_actor_that_fails_to_start_is_reported_and_restarted(tree: Tree) -> None:
    def factory(sup: pykka.ActorRef[Any]) -> pykka.ActorRef[Any]:
        tree.starts["flaky"] = tree.starts.get("flaky", 0) + 1
        return FailsToStart.start(name="flaky", generation=tree.starts["flaky"], supervisor=sup)

    tree.supervisor.proxy().start_child("flaky", factory).get(timeout=WAIT)
    wait_until(lambda: tree.metrics.counts("vmpooler_actor.crashed", actor="flaky") == 1, WAIT)
    wait_until(lambda: tree.restart_delays(), WAIT, "a restart to be scheduled")
    tree.clock.advance(BACKOFF)
    wait_until(lambda: tree.directory.get("flaky") is not None, WAIT, "the restart")
    assert tree.ping("flaky") == 2


def test_after_stop_supervising_nothing_is_restarted(tree: Tree) -> None:
    """At shutdown the system tells the supervisor to stop supervising before it stops the
    children: a crash then, or a restart already scheduled, brings no child back."""
    tree.start_child("early")
    tree.start_child("late")
    _crash_and_wait_for_report(tree, "early", 0)  # its restart is now scheduled
    tree.supervisor.ask(StopSupervising(), timeout=WAIT)
    tree.crash("late")
    tree.clock.advance(60.0)  # the scheduled restart comes due
    tree.supervisor.ask("ping", timeout=WAIT)
    assert tree.starts == {"early": 1, "late": 1}
    assert tree.metrics.counts("vmpooler_actor.crashed", actor="late") == 0


def test_the_system_stops_its_supervisor_last(redis_client: Any) -> None:
    """Every actor is stopped, and the supervisor outlives its children (it would otherwise
    be gone while a child's crash could still reach it)."""
    with started(redis_client, make_config([pool("a", 1)])) as h:
        supervisor = h.system._supervisor
        assert supervisor is not None
        children = [h.system.directory.get(n) for n in h.system.directory.names()]
        seen: list[tuple[str, bool]] = []
        original = supervisor.stop

        def stop(*args: Any, **kwargs: Any) -> Any:
            seen.append(("supervisor", any(c is not None and c.is_alive() for c in children)))
            return original(*args, **kwargs)

        supervisor.stop = stop  # type: ignore[method-assign]  # observes the call order only
    assert seen == [("supervisor", False)]
    assert not supervisor.is_alive()
    assert all(c is None or not c.is_alive() for c in children)


# -- the one restart policy ---------------------------------------------------------------------
def test_policy_backs_off_and_gives_up_within_its_window() -> None:
    policy = RestartPolicy(backoff=1.0, max_backoff=5.0, intensity=3, period=100.0)
    history = RestartHistory()
    assert [policy.on_crash(history, t, "RuntimeError") for t in (0, 1, 2)] == [1, 2, 4]
    assert policy.on_crash(history, 3, "RuntimeError") is None  # the fourth within 100 s
    assert len(history) == 3  # a give-up records nothing
    # the window moves: the crashes at 0 and 1 are forgotten at 101.5
    assert policy.on_crash(history, 101.5, "RuntimeError") == 2
    assert policy.on_crash(history, 300, "RuntimeError") == 1  # a quiet period: back to 1 s


def test_policy_waits_out_an_outage_without_spending_the_budget() -> None:
    policy = RestartPolicy(backoff=1.0, max_backoff=8.0, intensity=2, period=1000.0)
    history = RestartHistory()
    delays = [policy.on_crash(history, t, "ConnectionError") for t in range(6)]
    assert delays == [1, 2, 4, 8, 8, 8]  # backed off, never given up
    assert history.budget_used() == 0
    assert policy.on_crash(history, 6, "RuntimeError") == 8
    assert policy.on_crash(history, 7, "RuntimeError") == 8
    assert policy.on_crash(history, 8, "RuntimeError") is None  # two real crashes: spent


def test_restarts_keep_each_childs_crashes_and_hand_a_give_up_to_the_hook() -> None:
    clock, metrics = FakeClock(), RecordingMetrics()
    given: list[tuple[str, str]] = []
    restarts = Restarts(RestartPolicy(backoff=1.0, max_backoff=60.0, intensity=1,
                                      period=100.0),
                        clock=clock, metrics=metrics, log=logging.getLogger("test.restarts"),
                        lines=CrashLines("child '%s'", "gone"), actor_tag="kind",
                        on_given_up=lambda key, crash: given.append((key, crash.error)))
    crash = ActorCrashed("a", "boom", "RuntimeError")
    assert restarts.crashed("a", crash) == 1.0
    assert restarts.crashed("b", crash) == 1.0  # each child its own history
    assert restarts.count("a") == 1 and given == []
    assert restarts.crashed("a", crash) is None
    assert given == [("a", "boom")] and restarts.count("a") == 1
    restarts.forget("a")
    assert restarts.count("a") == 0
    assert restarts.crashed("a", crash) == 1.0  # a fresh history
    assert metrics.counts("vmpooler_actor.crashed", actor="kind") == 4
    assert metrics.counts("vmpooler_actor.given_up", actor="kind") == 1


def test_supervisor_restarts_through_outage_crashes(tree: Tree) -> None:
    tree.start_child("toy")
    for n in range(INTENSITY + 2):
        _crash_and_wait_for_report(tree, "toy", n, redis.ConnectionError("redis away"))
        _restart_after(tree, "toy", min(60.0, BACKOFF * 2**n), generation=n + 2)
    assert tree.given_up() == []


class FailingMetrics(RecordingMetrics):
    """Raises from the first ``vmpooler_actor.crashed`` it is given (a broken backend)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = True

    def increment(self, name: str, *, tags: Any = None, value: int = 1) -> None:
        if self.armed and name == "vmpooler_actor.crashed":
            self.armed = False
            raise RuntimeError("metrics backend broken")
        super().increment(name, tags=tags, value=value)


def test_the_supervisor_survives_an_error_in_its_own_handler() -> None:
    clock, metrics, directory = FakeClock(), FailingMetrics(), ActorDirectory()
    supervisor = Supervisor.start(directory=directory, scheduler=clock, clock=clock,
                                  metrics=metrics, backoff=BACKOFF, intensity=INTENSITY,
                                  period=PERIOD)
    t = Tree(supervisor, directory, clock, metrics)
    try:
        t.start_child("toy")
        t.crash("toy")  # its report makes the supervisor's handler raise
        t.supervisor.ask("ping", timeout=WAIT)
        assert supervisor.is_alive()
        t.start_child("second")
        _crash_and_wait_for_report(t, "second", 0)  # the next crash is handled as usual
        _restart_after(t, "second", BACKOFF, generation=2)
    finally:
        supervisor.stop(timeout=WAIT)
        for name in directory.names():
            ref = directory.get(name)
            if ref is not None:
                ref.stop(timeout=WAIT)
