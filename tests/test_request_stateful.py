"""On-demand requests under every interleaving hypothesis can find (reference §2.4).

A :class:`RuleBasedStateMachine` drives the real actor system (size-0 pools ``a`` and
``b``, a fake clock, a real redis-server) with a provider whose VMs become ready only when
a rule releases them and whose clones fail when a rule says so. Rules create requests,
release VMs, fail clones, move time past deadlines, delete requests through the API path
(write + notify), delete them behind the actors' backs (a writer outside the actor system)
and restart the manager. After every step the system is let go idle and the request
invariants are checked against Redis and against a model of what was seen before.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from tests.harness import (
    QUEUES,
    Harness,
    assert_no_vm_in_two_queues,
    context_for,
    make_config,
    pool,
)
from vmpooler.actors.config import Config
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.pool.hostnames import HostnameGenerator
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import RequestStore, parse_requested
from vmpooler.actors.system import PoolerSystem
from vmpooler.providers.dummy import DummyProvider
from vmpooler.providers.errors import TransientProviderError

POOLS = ("a", "b")
COUNTS = st.tuples(st.integers(0, 3), st.integers(0, 3)).filter(lambda c: 1 <= sum(c) <= 3)
"""VMs a request asks of pools ``a`` and ``b``: one to three in all."""
FINAL = {"failed": {"failed"}, "deleted": {"deleted"}, "ready": {"ready", "deleted"}}


class ControlledProvider(DummyProvider):
    """The dummy provider; a VM is ready only once released, and marked clones fail."""

    def __init__(self, config: Config) -> None:
        super().__init__(context_for(config), rng=random.Random(3), sleep=lambda _s: None)
        self.control = threading.Lock()
        self.released: set[str] = set()
        self.failures_due = 0

    def create_vm(self, pool: str, vm: str, **kwargs: Any) -> Any:
        with self.control:
            fail = self.failures_due > 0
            if fail:
                self.failures_due -= 1
        if fail:
            raise TransientProviderError(f"clone of {vm} failed on purpose")
        return super().create_vm(pool, vm, **kwargs)

    def vm_ready(self, pool: str, vm: str) -> bool:
        with self.control:
            released = vm in self.released
        return released and super().vm_ready(pool, vm)

    def release(self, vm: str) -> None:
        with self.control:
            self.released.add(vm)

    def fail_next_clone(self) -> None:
        with self.control:
            self.failures_due += 1


class RequestMachine(RuleBasedStateMachine):
    client: redis.Redis  # set by the test before the machine runs

    requests = Bundle("requests")

    def __init__(self) -> None:
        super().__init__()
        self.client.flushall()
        self.config = make_config([pool(p, 0) for p in POOLS], ondemand_request_ttl=1)
        self.provider = ControlledProvider(self.config)
        self.clock = FakeClock()
        self.store = RequestStore(self.client)
        self.restarts = 0
        self.h = self._start()
        # The model: what was seen at earlier steps.
        self.statuses: dict[str, str | None] = {}
        self.delivered_seen: dict[str, set[str]] = {}
        self.owner: dict[str, str] = {}  # delivered VM -> its request

    def _start(self) -> Harness:
        metrics = RecordingMetrics()
        system = PoolerSystem.start(
            self.config, redis_client=self.client, clock=self.clock, scheduler=self.clock,
            metrics=metrics, providers={"dummy": self.provider},
            hostnames=HostnameGenerator(rng=random.Random(1000 + self.restarts)),
            resolver=lambda _fqdn: False,
        )
        return Harness(system, self.clock, metrics, self.provider, self.client)

    def teardown(self) -> None:
        self.h.system.stop()

    # -- rules ----------------------------------------------------------------------------------
    @initialize(target=requests, counts=COUNTS)
    def first_request(self, counts: tuple[int, int]) -> str:
        return self.create_request(counts)

    @rule(target=requests, counts=COUNTS)
    def create_request(self, counts: tuple[int, int]) -> str:
        wanted = {p: n for p, n in zip(POOLS, counts, strict=True) if n}
        rid = self.h.system.request_ondemand(wanted)
        assert rid is not None
        self.statuses[rid] = None
        self.delivered_seen[rid] = set()
        return rid

    def _unreleased(self) -> list[tuple[str, str]]:
        return sorted(
            (p, vm) for p in POOLS for vm in self.client.smembers(schema.pending(p))
            if vm not in self.provider.released
        )

    @rule(pick=st.integers(0, 15))
    def release_a_pending_vm(self, pick: int) -> None:
        candidates = self._unreleased()
        if not candidates:
            return
        p, vm = candidates[pick % len(candidates)]
        self.provider.release(vm)
        self.h.system.notify(p)

    @rule()
    def release_every_pending_vm(self) -> None:
        for _p, vm in self._unreleased():
            self.provider.release(vm)
        for p in POOLS:
            self.h.system.notify(p)

    @rule()
    def fail_the_next_clone(self) -> None:
        self.provider.fail_next_clone()

    @rule(seconds=st.sampled_from([10, 61]))
    def advance_time(self, seconds: int) -> None:
        self.h.advance(seconds)  # 61 s: past the deadline of every request made before

    @rule(rid=requests)
    def delete_through_the_api(self, rid: str) -> None:
        self.store.delete(rid)
        self.h.system.notify_request(rid, "deleted")

    @rule(rid=requests)
    def delete_behind_the_actors_backs(self, rid: str) -> None:
        self.store.delete(rid)

    @rule(mid_cycle=st.booleans())
    def restart_the_manager(self, mid_cycle: bool) -> None:
        if mid_cycle:  # stop while the pools are checking freshly released VMs
            self.release_every_pending_vm()
        self.h.system.stop()
        self.restarts += 1
        self.h = self._start()

    # -- invariants -----------------------------------------------------------------------------
    def _queues(self) -> dict[str, dict[str, set[str]]]:
        return {p: {q: set(self.client.smembers(getattr(schema, q)(p))) for q in QUEUES}
                for p in POOLS}

    @invariant()
    def requests_keep_their_promises(self) -> None:
        self.h.quiesce()
        queues = self._queues()
        where: dict[str, str] = {}
        for p in POOLS:
            assert_no_vm_in_two_queues(self.client, p)
            for q, members in queues[p].items():
                for vm in members:
                    assert vm not in where, f"{vm} is in {where[vm]} and {p}/{q}"
                    where[vm] = f"{p}/{q}"
            # Size-0 pools: nothing is ever ready; a request's VM never is.
            for vm in queues[p]["ready"]:
                owner = self.client.hget(schema.vm(vm), "request_id")
                raise AssertionError(f"{vm} (request {owner!r}) is in {p}'s ready set")

        for rid, before in self.statuses.items():
            fields = self.client.hgetall(schema.odrequest(rid))
            assert "requested" in fields, f"request {rid} vanished"
            status = fields.get("status") or None
            entries = parse_requested(fields["requested"])
            sets = {e.key: set(self.client.smembers(schema.request_vms(rid, e.alias, e.pool)))
                    for e in entries}

            # (2) failed and deleted are final; ready only becomes deleted.
            if before is not None:
                assert status in FINAL[before], f"request {rid}: {before} -> {status}"
            if status != before:
                event(f"a request became {status}")
            self.statuses[rid] = status

            # (1) ready only when every entry has exactly its count.
            if status == "ready":
                for e in entries:
                    assert len(sets[e.key]) == e.count, (
                        f"request {rid} is ready with {len(sets[e.key])} of {e.count} "
                        f"{e.alias} VMs")
            for e in entries:
                assert len(sets[e.key]) <= e.count, f"request {rid} got too many {e.alias} VMs"

            # (5) a VM is delivered to at most one request (now and ever).
            for (_alias, p), vms in sets.items():
                for vm in vms:
                    assert self.owner.setdefault(vm, rid) == rid, (
                        f"{vm} delivered to {self.owner[vm]} and {rid}")
                    assert self.client.hget(schema.vm(vm), "request_id") in (rid, None)
                    if status is None or status == "ready":
                        assert vm in queues[p]["running"], (
                            f"{vm} of {status or 'in-flight'} request {rid} is in "
                            f"{where.get(vm, 'no queue')}")
                self.delivered_seen[rid] |= vms

            # (3) a failed or deleted request's VMs are retired, never handed out.
            if status in ("failed", "deleted"):
                for vm in self.delivered_seen[rid]:
                    assert where.get(vm, "gone").split("/")[-1] in ("completed", "gone"), (
                        f"{vm} of {status} request {rid} is in {where[vm]}")


@pytest.mark.slow
@pytest.mark.timeout(300)  # ~10 s when green; shrinking a failure restarts systems many times
def test_requests_under_random_interleavings(redis_client: redis.Redis) -> None:
    RequestMachine.client = redis_client
    run_state_machine_as_test(
        RequestMachine,
        settings=settings(max_examples=25, stateful_step_count=20, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow]),
    )
