"""PooledActor on an ActorExecutor: pykka's message semantics on a bounded set of threads.

What is proved here: messages are handled in order; one actor never runs on two threads at
once, however many senders and worker threads there are; a failing actor stops alone; stop
handles what came before it and refuses what came after; thousands of actors need no more
threads than the executor has; a busy actor does not starve the others; a blocking wait on
a pooled future from a worker thread is refused instead of deadlocking the pool.

Synchronisation is by futures and events only; nothing sleeps.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Any

import pykka
import pytest

from tests.harness import wait_until
from vmpooler.actors.messages import ActorCrashed
from vmpooler.actors.runtime.executor import ActorExecutor, BlockingCallError
from vmpooler.actors.runtime.pooled import PooledActor, notify_when_stopped
from vmpooler.actors.runtime.supervisor import PooledSupervisedActor

WAIT = 10.0


@pytest.fixture
def executor() -> Iterator[ActorExecutor]:
    ex = ActorExecutor(4, batch=3, name="test-actor").start()
    yield ex
    ex.stop(timeout=WAIT)


class Recorder(pykka.ThreadingActor):
    """A plain ThreadingActor that keeps what it is told; ``"log"`` answers the list."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    def on_receive(self, message: Any) -> Any:
        if message == "log":
            return list(self.seen)
        self.seen.append(message)
        return None


class Counter(PooledActor):
    """Records each message; detects a second thread entering while one is inside."""

    def __init__(self, *, executor: ActorExecutor, hold: threading.Event | None = None,
                 stops: list[str] | None = None) -> None:
        super().__init__(executor=executor)
        self.guard = threading.Lock()
        self.overlaps = 0
        self.count = 0
        self.seen: list[Any] = []
        self.threads: set[int] = set()
        self.hold = hold
        self.started_on: int | None = None
        self.stops = stops if stops is not None else []

    def on_start(self) -> None:
        self.started_on = threading.get_ident()

    def on_stop(self) -> None:
        self.stops.append("on_stop")

    def on_receive(self, message: Any) -> Any:
        if not self.guard.acquire(blocking=False):
            self.overlaps += 1  # another thread is inside this actor right now
            return None
        try:
            if message == "block" and self.hold is not None:
                assert self.hold.wait(WAIT)
            if message == "state":
                return {"count": self.count, "overlaps": self.overlaps,
                        "seen": list(self.seen), "threads": set(self.threads),
                        "started_on": self.started_on}
            if isinstance(message, Exception):
                raise message
            count = self.count
            for _ in range(30):  # widen the window between read and write
                pass
            self.count = count + 1
            self.seen.append(message)
            self.threads.add(threading.get_ident())
            return count
        finally:
            self.guard.release()


def state(ref: pykka.ActorRef[Any]) -> dict[str, Any]:
    return dict(ref.ask("state", timeout=WAIT))


# -- ordering and the single-writer guarantee ---------------------------------------------------
def test_messages_are_handled_in_the_order_they_were_sent(executor: ActorExecutor) -> None:
    ref = Counter.start(executor=executor)
    for i in range(1000):
        ref.tell(i)
    s = state(ref)
    assert s["seen"] == list(range(1000))
    assert s["overlaps"] == 0
    ref.stop(timeout=WAIT)


def test_one_actor_never_runs_on_two_threads_at_once() -> None:
    """Many senders, many actors, more workers than one: each actor's counter must end
    exact, each sender's messages in its order, and the guard never found taken."""
    executor = ActorExecutor(8, batch=2, name="test-contention").start()
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        refs = [Counter.start(executor=executor) for _ in range(12)]
        senders, per_sender = 8, 300
        go = threading.Event()

        def send(sender: int) -> None:
            assert go.wait(WAIT)
            for seq in range(per_sender):
                for ref in refs:
                    ref.tell((sender, seq))

        threads = [threading.Thread(target=send, args=(n,)) for n in range(senders)]
        for t in threads:
            t.start()
        go.set()
        for t in threads:
            t.join(WAIT)
        workers: set[int] = set()
        for ref in refs:
            s = state(ref)
            assert s["overlaps"] == 0, "two threads were inside one actor at once"
            assert s["count"] == senders * per_sender, "an update was lost"
            for sender in range(senders):
                mine = [seq for who, seq in s["seen"] if who == sender]
                assert mine == list(range(per_sender)), "a sender's messages were reordered"
            workers |= s["threads"]
        assert len(workers) > 1  # the actors did move between worker threads
        for ref in refs:
            ref.stop(timeout=WAIT)
    finally:
        sys.setswitchinterval(old)
        executor.stop(timeout=WAIT)


def test_on_start_runs_on_a_worker_before_the_first_message(executor: ActorExecutor) -> None:
    ref = Counter.start(executor=executor)
    ref.tell("first")
    s = state(ref)
    assert s["started_on"] is not None and s["started_on"] != threading.get_ident()
    assert s["seen"] == ["first"]
    ref.stop(timeout=WAIT)


# -- failures ----------------------------------------------------------------------------------
class Crashy(PooledActor):
    def __init__(self, *, executor: ActorExecutor, failed: threading.Event) -> None:
        super().__init__(executor=executor)
        self.failed = failed

    def on_receive(self, message: Any) -> Any:
        if message == "crash":
            raise RuntimeError("boom")
        return "fine"

    def on_failure(self, *exc_info: Any) -> None:
        self.failed.set()


def test_a_failing_actor_stops_alone() -> None:
    executor = ActorExecutor(1, batch=4, name="test-one").start()  # every actor on one thread
    try:
        failed = threading.Event()
        crashy = Crashy.start(executor=executor, failed=failed)
        others = [Counter.start(executor=executor) for _ in range(3)]
        for ref in others:
            ref.tell("before")
        crashy.tell("crash")
        for ref in others:
            ref.tell("after")
        assert failed.wait(WAIT), "on_failure was not called"
        wait_until(lambda: not crashy.is_alive(), WAIT, "the crashed actor to stop")
        with pytest.raises(pykka.ActorDeadError):
            crashy.tell("anything")
        with pytest.raises(pykka.ActorDeadError):
            crashy.ask("anything", timeout=WAIT)
        for ref in others:
            assert state(ref)["seen"] == ["before", "after"]
        assert executor.threads_alive() == 1
        assert crashy not in pykka.ActorRegistry.get_all()
        for ref in others:
            ref.stop(timeout=WAIT)
    finally:
        executor.stop(timeout=WAIT)


def test_an_ask_failure_goes_back_to_the_caller(executor: ActorExecutor) -> None:
    ref = Counter.start(executor=executor)
    with pytest.raises(ValueError, match="bad"):
        ref.ask(ValueError("bad"), timeout=WAIT)
    assert ref.is_alive()
    assert state(ref)["overlaps"] == 0
    ref.stop(timeout=WAIT)


class FailsToStart(PooledActor):
    def on_start(self) -> None:
        raise RuntimeError("cannot start")

    def on_receive(self, message: Any) -> Any:
        return "never"


def test_an_actor_failing_in_on_start_answers_nothing(executor: ActorExecutor) -> None:
    ref = FailsToStart.start(executor=executor)
    future = ref.ask("x", block=False)
    with pytest.raises(pykka.ActorDeadError):
        future.get(timeout=WAIT)
    assert not ref.is_alive()


class Supervised(PooledSupervisedActor):
    def handle(self, message: Any) -> Any:
        if isinstance(message, BaseException):
            raise message
        return "pong"


@pytest.mark.parametrize("error", [RuntimeError("boom"), SystemExit(1)],
                         ids=["RuntimeError", "SystemExit"])
def test_a_supervised_pooled_actor_reports_its_crash_and_stops_alone(
    executor: ActorExecutor, error: BaseException,
) -> None:
    supervisor = Recorder.start()
    bystander = Counter.start(executor=executor)
    try:
        ref = Supervised.start(name="toy", supervisor=supervisor, executor=executor)
        assert ref.ask("ping", timeout=WAIT) == "pong"
        ref.tell(error)
        wait_until(lambda: not ref.is_alive(), WAIT, "the actor to stop")
        crashes = wait_until(lambda: [m for m in supervisor.ask("log", timeout=WAIT)
                                      if isinstance(m, ActorCrashed)], WAIT)
        assert [c.name for c in crashes] == ["toy"]
        assert bystander.is_alive() and supervisor.is_alive()
        assert state(bystander)["overlaps"] == 0
    finally:
        bystander.stop(timeout=WAIT)
        supervisor.stop(timeout=WAIT)


# -- stop ---------------------------------------------------------------------------------------
def test_stop_handles_what_came_before_and_refuses_what_came_after(
    executor: ActorExecutor,
) -> None:
    hold = threading.Event()
    stops: list[str] = []
    ref = Counter.start(executor=executor, hold=hold, stops=stops)
    ref.tell("block")  # the actor is now inside a handler, waiting for the test
    before = ref.ask("before", block=False)
    stopped = ref.stop(block=False)
    after = ref.ask("after", block=False)
    hold.set()
    assert before.get(timeout=WAIT) == 1  # handled (its count: "block" was the first)
    assert stopped.get(timeout=WAIT) is True
    with pytest.raises(pykka.ActorDeadError):
        after.get(timeout=WAIT)
    with pytest.raises(pykka.ActorDeadError):
        ref.tell("later")
    assert ref.stop(timeout=WAIT) is False  # already dead
    assert ref not in pykka.ActorRegistry.get_all()
    assert stops == ["on_stop"]


def test_a_stopped_executor_stops_its_actors(executor: ActorExecutor) -> None:
    """The turn running when the executor stops ends; what is still queued is refused."""
    hold = threading.Event()
    ref = Counter.start(executor=executor, hold=hold)
    ref.tell("block")
    futures = [ref.ask(i, block=False) for i in range(2 * executor.batch)]
    stopper = threading.Thread(target=executor.stop, kwargs={"timeout": WAIT})
    stopper.start()
    wait_until(lambda: executor.stopped, WAIT, "the executor to stop")
    hold.set()
    stopper.join(WAIT)
    assert executor.threads_alive() == 0
    in_turn = executor.batch - 1  # the turn that handled "block" took this many more
    assert [f.get(timeout=WAIT) for f in futures[:in_turn]] == list(range(1, in_turn + 1))
    for future in futures[in_turn:]:
        with pytest.raises(pykka.ActorDeadError):
            future.get(timeout=WAIT)
    assert not ref.is_alive() and ref not in pykka.ActorRegistry.get_all()
    late = Counter.start(executor=executor)  # started after the stop: dead at once
    assert not late.is_alive()
    with pytest.raises(pykka.ActorDeadError):
        late.ask("x", timeout=WAIT)


def test_notify_when_stopped_tells_after_the_last_message(executor: ActorExecutor) -> None:
    watcher = Recorder.start()
    hold = threading.Event()
    try:
        ref = Counter.start(executor=executor, hold=hold)
        ref.tell("block")
        notify_when_stopped(ref, watcher, ("stopped", ref.actor_urn))
        ref.stop(block=False)
        assert watcher.ask("log", timeout=WAIT) == []  # still inside its handler
        hold.set()
        wait_until(lambda: watcher.ask("log", timeout=WAIT) == [("stopped", ref.actor_urn)],
                   WAIT, "the stop notification")
        assert not ref.is_alive()
        notify_when_stopped(ref, watcher, "late")  # already stopped: told at once
        wait_until(lambda: "late" in watcher.ask("log", timeout=WAIT), WAIT)
        with pytest.raises(TypeError):
            notify_when_stopped(watcher, watcher, "not pooled")
    finally:
        watcher.stop(timeout=WAIT)


# -- scale and fairness -------------------------------------------------------------------------
def _os_threads() -> int:
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("Threads:")).split()[1])


def test_thousands_of_actors_run_on_the_executors_threads() -> None:
    python_before, os_before = threading.active_count(), _os_threads()
    executor = ActorExecutor(4, name="test-scale").start()
    try:
        refs = [Counter.start(executor=executor) for _ in range(3000)]
        futures = [ref.ask("hello", block=False) for ref in refs]
        assert [f.get(timeout=WAIT) for f in futures] == [0] * len(refs)
        assert threading.active_count() - python_before <= 4
        assert _os_threads() - os_before <= 4
        stops = [ref.stop(block=False) for ref in refs]
        assert all(s.get(timeout=WAIT) for s in stops)
    finally:
        executor.stop(timeout=WAIT)


class Logger(PooledActor):
    """Appends (name, message) to a shared list; the first message may wait on ``hold``."""

    def __init__(self, *, executor: ActorExecutor, name: str, out: list[Any],
                 hold: threading.Event | None = None) -> None:
        super().__init__(executor=executor)
        self.name, self.out, self.hold = name, out, hold

    def on_receive(self, message: Any) -> Any:
        if message == "block" and self.hold is not None:
            assert self.hold.wait(WAIT)
        self.out.append((self.name, message))
        return None


def test_a_busy_actor_does_not_starve_the_others() -> None:
    executor = ActorExecutor(1, batch=8, name="test-fair").start()
    out: list[Any] = []
    hold = threading.Event()
    try:
        busy = Logger.start(executor=executor, name="busy", out=out, hold=hold)
        quiet = Logger.start(executor=executor, name="quiet", out=out)
        busy.tell("block")
        for i in range(500):
            busy.tell(i)
        quiet.tell("hello")
        hold.set()
        busy.ask("sync", timeout=WAIT)
        quiet.ask("sync", timeout=WAIT)
        position = out.index(("quiet", "hello"))
        assert position <= 2 * executor.batch, f"the quiet actor waited for {position} messages"
        busy.stop(timeout=WAIT)
        quiet.stop(timeout=WAIT)
    finally:
        executor.stop(timeout=WAIT)


# -- futures ------------------------------------------------------------------------------------
class Asker(pykka.ThreadingActor):
    """A ThreadingActor that asks a pooled actor and waits (allowed: it has its own thread)."""

    def on_receive(self, message: Any) -> Any:
        return message.ask("from a threading actor", timeout=WAIT)


class BlockingAsker(PooledActor):
    """A pooled actor that (wrongly) waits for another pooled actor's answer."""

    def on_receive(self, message: Any) -> Any:
        try:
            return message.ask("nested", timeout=WAIT)
        except BlockingCallError:
            return "refused"


def test_futures_work_from_plain_threads_and_threading_actors(
    executor: ActorExecutor,
) -> None:
    ref = Counter.start(executor=executor)
    asker = Asker.start()
    try:
        assert asker.ask(ref, timeout=WAIT) == 0
        results: list[Any] = []
        thread = threading.Thread(target=lambda: results.append(ref.ask("x", timeout=WAIT)))
        thread.start()
        thread.join(WAIT)
        assert results == [1]
        assert ref.proxy().count.get(timeout=WAIT) == 2  # proxies work too
    finally:
        asker.stop(timeout=WAIT)
        ref.stop(timeout=WAIT)


def test_a_blocking_ask_between_pooled_actors_is_refused() -> None:
    executor = ActorExecutor(1, name="test-deadlock").start()  # would deadlock at once
    try:
        target = Counter.start(executor=executor)
        asker = BlockingAsker.start(executor=executor)
        assert asker.ask(target, timeout=WAIT) == "refused"
        assert state(target)["count"] == 1  # the nested message was still delivered
        target.stop(timeout=WAIT)
        asker.stop(timeout=WAIT)
    finally:
        executor.stop(timeout=WAIT)
