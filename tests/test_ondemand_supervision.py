"""The on-demand manager as the request actors' supervisor: one actor per request across a
manager restart (without blocking the manager), the system's restart policy with failing
the request as its escalation, and request actors on a few shared threads.

The manager runs alone here (a fake clock, a real redis-server); its request actors are
small pooled stand-ins built by the test's factory, so the test decides when one is stuck,
crashes or stops.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pykka
import pytest
import redis

from tests.harness import make_config, pool, started, wait_until
from tests.test_ondemand import gated
from vmpooler.actors.messages import RequestChanged, request_actor_name
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.ondemand.manager import OnDemandManager
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.runtime.executor import DEFAULT_THREADS, ActorExecutor
from vmpooler.actors.runtime.pooled import PooledInbox
from vmpooler.actors.runtime.restart_policy import RestartPolicy
from vmpooler.actors.runtime.supervisor import ActorDirectory, PooledSupervisedActor
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import Entry, RequestStore
from vmpooler.actors.system import PoolerSystem

WAIT = 10.0
RID = "r1"


class StandIn(PooledSupervisedActor):
    """A request actor stand-in: ``"hold"`` blocks it until ``release`` is set; it crashes
    at start while ``crashes`` (a shared list of exceptions) is not empty."""

    def __init__(self, *, manager: pykka.ActorRef[Any], executor: ActorExecutor,
                 release: threading.Event, crashes: list[BaseException]) -> None:
        super().__init__(name=request_actor_name(RID), supervisor=manager, executor=executor)
        self.release = release
        self.crashes = crashes

    def setup(self) -> None:
        if self.crashes:
            raise self.crashes.pop(0)

    def handle(self, message: Any) -> Any:
        if message == "hold":
            assert self.release.wait(WAIT)
        return "pong"


@dataclass
class Rig:
    client: redis.Redis
    executor: ActorExecutor
    directory: ActorDirectory = field(default_factory=ActorDirectory)
    clock: FakeClock = field(default_factory=FakeClock)
    metrics: RecordingMetrics = field(default_factory=RecordingMetrics)
    release: threading.Event = field(default_factory=threading.Event)
    crashes: list[BaseException] = field(default_factory=list)
    starts: list[bool] = field(default_factory=list)  # per start: was another actor alive?
    manager: pykka.ActorRef[Any] | None = None

    def stand_in(self, manager: pykka.ActorRef[Any]) -> pykka.ActorRef[Any]:
        return StandIn.start(manager=manager, executor=self.executor, release=self.release,
                             crashes=self.crashes)

    def factory(self, request_id: str, manager: pykka.ActorRef[Any],
                fence: Any = None, traceparent: str = "") -> pykka.ActorRef[Any]:
        current = self.directory.get(request_actor_name(request_id))
        self.starts.append(current is not None)
        return self.stand_in(manager)

    def start_manager(self, policy: RestartPolicy | None = None) -> pykka.ActorRef[Any]:
        self.manager = OnDemandManager.start(
            store=RequestStore(self.client), directory=self.directory,
            request_factory=self.factory, clone_limit=1, sweep_interval=5.0,
            data_ttl_hours=1, clock=self.clock, scheduler=self.clock, metrics=self.metrics,
            policy=policy,
        )
        return self.manager

    def sync(self) -> None:
        assert self.manager is not None
        self.manager.ask("ping", timeout=WAIT)

    def status(self) -> str | None:
        return self.client.hget(schema.odrequest(RID), "status")


@pytest.fixture
def rig(redis_client: redis.Redis) -> Iterator[Rig]:
    executor = ActorExecutor(2, name="test-ondemand").start()
    r = Rig(redis_client, executor)
    assert RequestStore(redis_client).create(RID, [Entry("a", "a", 1)],
                                             created=int(r.clock.now()))
    yield r
    r.release.set()
    if r.manager is not None:
        r.manager.stop(timeout=WAIT)
    for name in r.directory.names():
        ref = r.directory.get(name)
        if ref is not None:
            ref.stop(timeout=WAIT)
    executor.stop(timeout=WAIT)


def test_a_new_manager_starts_a_request_actor_only_after_the_old_one_stopped(rig: Rig) -> None:
    """The predecessor's actor is stuck in a handler when the new manager starts: the new
    manager answers its mail at once (it does not wait for it), starts no second actor for
    the request while the old one lives, and starts one as soon as the old one has stopped."""
    dead_manager = Recorderless.start()
    dead_manager.stop(timeout=WAIT)
    old = rig.stand_in(dead_manager)
    rig.directory.put(request_actor_name(RID), old)
    old.tell("hold")  # stuck until the test releases it
    rig.start_manager()
    rig.sync()  # setup done, and the first sweep (which finds the request) handled
    rig.sync()
    assert rig.starts == [], "a second actor was started while the old one was running"
    assert old.is_alive()
    rig.release.set()
    wait_until(lambda: rig.starts, WAIT, "the request's new actor")
    assert rig.starts == [False], "the new actor started while the old one was alive"
    assert not old.is_alive()
    new = rig.directory.get(request_actor_name(RID))
    assert new is not None and new is not old
    assert new.ask("ping", timeout=WAIT) == "pong"


class Recorderless(pykka.ThreadingActor):
    """The predecessor's (dead) manager: nothing it is told matters."""


def test_a_crashing_request_actor_is_restarted_then_its_request_failed(rig: Rig) -> None:
    """The system's policy (here: two restarts within 100 s) decides; giving up fails the
    request, as it did before the policy was shared."""
    rig.crashes.extend(RuntimeError(f"bug {n}") for n in range(5))
    policy = RestartPolicy(backoff=1.0, max_backoff=60.0, intensity=2, period=100.0)
    rig.start_manager(policy)
    for n, delay in enumerate([1.0, 2.0]):
        wait_until(lambda n=n: len(rig.starts) == n + 1, WAIT, f"start {n + 1}")
        restart = wait_until(lambda: [due for due, m in rig.clock.pending()
                                      if isinstance(m, RequestChanged)], WAIT, "a restart")
        assert restart == [pytest.approx(delay)]
        rig.clock.advance(delay)
    wait_until(lambda: rig.status() == "failed", WAIT, "the request to be failed")
    assert len(rig.starts) == 3  # started, restarted twice, then given up
    reason = rig.client.hget(schema.odrequest(RID), "failure_reason")
    assert reason == "Internal error: bug 2"
    assert rig.metrics.counts("vmpooler_actor.given_up", actor="request") == 1
    assert rig.metrics.counts("vmpooler_actor.crashed", actor="request") == 3


def test_request_actor_crashes_during_an_outage_never_fail_the_request(rig: Rig) -> None:
    rig.crashes.extend(redis.ConnectionError("redis away") for _ in range(4))
    policy = RestartPolicy(backoff=1.0, max_backoff=4.0, intensity=1, period=1000.0)
    rig.start_manager(policy)
    for n in range(4):
        wait_until(lambda n=n: len(rig.starts) == n + 1, WAIT, f"start {n + 1}")
        wait_until(lambda: any(isinstance(m, RequestChanged) for _, m in rig.clock.pending()),
                   WAIT, "a restart")
        rig.clock.advance(4.0)
    wait_until(lambda: len(rig.starts) == 5, WAIT, "the start after the outage")
    actor = rig.directory.get(request_actor_name(RID))
    assert actor is not None and actor.ask("ping", timeout=WAIT) == "pong"
    assert rig.status() is None


def test_request_actors_share_the_systems_few_threads(redis_client: redis.Redis) -> None:
    """300 requests in flight (their VMs never get ready) add 300 actors, not 300 threads."""
    config = make_config([pool("a", 0)], ondemand_clone_limit=1, ondemand_request_ttl=60)
    with started(redis_client, config, provider=gated(config)) as h:
        h.quiesce()
        before = threading.active_count()
        for _ in range(300):
            assert h.system.request_ondemand({"a": 1})
        wait_until(lambda: sum(1 for n in h.system.directory.names()
                               if n.startswith("request:")) == 300, WAIT, "300 actors")
        h.quiesce()
        assert threading.active_count() - before < 20


def test_the_system_owns_its_executor_and_leaves_an_injected_one_running(
    redis_client: redis.Redis,
) -> None:
    # No on-demand clone slot: the request stays in flight, so its actor lives until the
    # stop (with a slot the dummy provider made it ready before a poll could see the actor).
    config = make_config([pool("a", 0)], ondemand_clone_limit=0)
    with started(redis_client, config) as h:
        own = h.system._res.executor  # the test looks at the wiring only
        assert own.threads_alive() == DEFAULT_THREADS
    assert own.stopped and own.threads_alive() == 0
    injected = ActorExecutor(2, name="test-injected")
    clock = FakeClock()
    system = PoolerSystem.start(config, redis_client=redis_client, clock=clock,
                                scheduler=clock, metrics=RecordingMetrics(),
                                resolver=lambda _fqdn: False, actor_executor=injected)
    try:
        rid = system.request_ondemand({"a": 1})
        ref = wait_until(lambda: system.actor_ref(request_actor_name(rid)), WAIT)
        assert isinstance(ref.actor_inbox, PooledInbox)  # on the injected executor
        assert injected.threads_alive() == 2
    finally:
        system.stop()
    assert not injected.stopped and injected.threads_alive() == 2
    injected.stop(timeout=WAIT)


def test_a_backing_off_request_is_started_by_its_timer_only(
    rig: Rig, caplog: pytest.LogCaptureFixture,
) -> None:
    """After a crash the request waits out the policy's back-off: neither the sweeps that
    come due meanwhile nor a ``RequestChanged`` start its actor before the timer does."""
    rig.crashes.append(RuntimeError("bug 0"))
    policy = RestartPolicy(backoff=30.0, max_backoff=60.0, intensity=5, period=100.0)
    with caplog.at_level(logging.ERROR, logger="vmpooler.actors.ondemand.manager"):
        manager = rig.start_manager(policy)
        wait_until(lambda: len(rig.starts) == 1, WAIT, "the first start")
        wait_until(lambda: [due for due, m in rig.clock.pending()
                            if isinstance(m, RequestChanged)] == [pytest.approx(30.0)],
                   WAIT, "the restart after the back-off")
    assert [r.getMessage() for r in caplog.records
            if r.name == "vmpooler.actors.ondemand.manager"] == [
        "[!] request 'r1' crashed (RuntimeError: bug 0); restarting in 30s"]
    manager.tell(RequestChanged(RID, "created"))
    for _ in range(5):  # the sweeps of the next 25 s
        rig.clock.advance(5.0)
        rig.sync()
    rig.sync()
    assert len(rig.starts) == 1, "a backing-off request was started before its timer"
    assert rig.directory.get(request_actor_name(RID)) is None
    rig.clock.advance(5.0)
    wait_until(lambda: len(rig.starts) == 2, WAIT, "the restart")
    actor = wait_until(lambda: rig.directory.get(request_actor_name(RID)), WAIT)
    assert actor.ask("ping", timeout=WAIT) == "pong"
    assert rig.metrics.counts("vmpooler_actor.crashed", actor="request") == 1


def test_a_request_given_up_logs_and_counts_as_the_supervisor_does(
    rig: Rig, caplog: pytest.LogCaptureFixture,
) -> None:
    rig.crashes.extend(RuntimeError(f"bug {n}") for n in range(2))
    policy = RestartPolicy(backoff=1.0, max_backoff=60.0, intensity=1, period=100.0)
    with caplog.at_level(logging.ERROR, logger="vmpooler.actors.ondemand.manager"):
        rig.start_manager(policy)
        wait_until(lambda: any(isinstance(m, RequestChanged) for _, m in rig.clock.pending()),
                   WAIT, "a restart")
        rig.clock.advance(1.0)
        wait_until(lambda: rig.status() == "failed", WAIT, "the request to be failed")
    assert [r.getMessage() for r in caplog.records
            if r.name == "vmpooler.actors.ondemand.manager"] == [
        "[!] request 'r1' crashed (RuntimeError: bug 0); restarting in 1s",
        "[!] request 'r1' crashed 2 times within 100s (RuntimeError: bug 1); failing it",
    ]
    assert rig.metrics.counts("vmpooler_actor.crashed", actor="request") == 2
    assert rig.metrics.counts("vmpooler_actor.given_up", actor="request") == 1
    assert rig.metrics.counts("vmpooler_actor.restarted") == 0
