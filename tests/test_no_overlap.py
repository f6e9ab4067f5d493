"""Two actors never act on one VM at once — checked under churn, at the provider's edge.

:class:`OverlapRecorder` is the dummy provider with every per-VM method wrapped: it counts,
per VM name, the threads inside a call for that VM, and records every moment at which a
second thread enters while another is still inside. Each call dwells ~2 ms (an
``Event.wait`` timeout, not a sleep) so that overlapping calls really do overlap. A whole
system (three pools, short ``ready_ttl``, ``vm_checktime=1``, a short provider call
timeout) is then churned: fake-clock advances without waiting for the actors, checkouts
(some marked for migration), returns, wake-ups, pool resets, size overrides up and down,
drains, disk and snapshot tasks.

What prevents overlap, and what this test proves about it:

* the pool actor's ``ProviderCalls.busy`` (``ProviderCalls.send``, actors/pool/calls.py): a
  pool actor sends at most one call per VM and skips busy VMs in its cycle. It cannot see
  calls from other senders (the task actor) nor a call that already timed out (its answer
  frees the VM while the worker still runs).
* ``ProviderActor._busy`` (``ProviderActor._submit``): the provider actor runs at most one
  call per ``(pool, vm)`` and answers a second one ``busy`` at once — until the first
  *really* returns, even after its timeout answer. This is the guard that covers every
  sender and timed-out calls.

Verified by hand (throwaway runs with monkeypatches, not kept), three runs each: with both
guards defeated (the pool actor's send neither consulting nor filling its busy map, and the
provider actor's ``_busy`` made to forget every key) :func:`test_no_two_calls_on_one_vm_under_churn`
failed every time, with overlaps such as ``vm_ready``/``vm_ready`` and
``destroy_vm``/``vm_ready``; with only the provider actor's guard defeated it failed every
time too (the task actor's ``create_disk``/``create_snapshot`` against the pool actor's
``migrate_vm``/``tag_vm_user``/``vm_ready``); with only the pool actor's guard defeated it
passed, the provider actor answering the extra calls ``busy``. So ``ProviderActor._busy``
is the guard that prevents overlap; the pool actor's busy map keeps a pool from asking for
work it would be refused. :func:`test_recorder_sees_two_calls_on_one_vm` keeps the detector
honest.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis

from tests.harness import (
    Harness,
    assert_no_vm_in_two_queues,
    context_for,
    make_config,
    pool,
    queue_members,
    started,
    wait_until,
)
from vmpooler.actors.config import Config
from vmpooler.actors.storage import schema, timefmt
from vmpooler.providers.dummy import DummyProvider

POOLS = {"a": 3, "b": 2, "c": 4}
STEPS = 300
CALL_TIMEOUT = 60  # fake seconds: the churn outruns some calls, which then time out


class OverlapRecorder(DummyProvider):
    """The dummy provider, recording any moment two threads are inside calls for one VM.

    Nested calls on one thread (a method calling another) count once.
    """

    def __init__(self, *args: Any, dwell: float = 0.002, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dwell = dwell
        self.release = threading.Event()  # set it to end every dwell at once
        self._track = threading.Lock()
        self._inside: dict[str, dict[int, list[str]]] = {}  # vm -> thread -> methods
        self.overlaps: list[tuple[str, tuple[str, ...]]] = []
        self.tracked_calls = 0

    @contextmanager
    def tracking(self, method: str, vm: str) -> Iterator[None]:
        me = threading.get_ident()
        with self._track:
            threads = self._inside.setdefault(vm, {})
            threads.setdefault(me, []).append(method)
            self.tracked_calls += 1
            if len(threads) > 1:
                self.overlaps.append((vm, tuple(sorted(m[0] for m in threads.values()))))
        try:
            self.release.wait(self.dwell)
            yield
        finally:
            with self._track:
                threads[me].pop()
                if not threads[me]:
                    del threads[me]
                if not threads:
                    del self._inside[vm]

    def inside(self, vm: str) -> int:
        """Threads currently inside a call for ``vm``."""
        with self._track:
            return len(self._inside.get(vm, {}))


def _tracked(name: str) -> Callable[..., Any]:
    real = getattr(DummyProvider, name)

    def call(self: OverlapRecorder, pool_name: str, vm: str, *args: Any, **kwargs: Any) -> Any:
        with self.tracking(name, vm):
            return real(self, pool_name, vm, *args, **kwargs)

    call.__name__ = name
    return call


for _name in ("get_vm", "create_vm", "get_vm_ip_address", "vm_ready", "destroy_vm",
              "create_disk", "create_snapshot", "revert_snapshot", "migrate_vm",
              "tag_vm_user", "vm_exists"):
    setattr(OverlapRecorder, _name, _tracked(_name))


def _recorder(config: Config, seed: int, *, dwell: float = 0.002,
              **knobs: Any) -> OverlapRecorder:
    return OverlapRecorder(context_for(config, knobs), rng=random.Random(seed),
                           sleep=lambda _s: None, dwell=dwell)


def test_recorder_sees_two_calls_on_one_vm() -> None:
    """The detector itself: two threads inside calls for one VM are recorded."""
    config = make_config([pool("a", 1)])
    provider = _recorder(config, 1, dwell=30.0)
    first = threading.Thread(target=provider.get_vm, args=("a", "vm-1"))
    second = threading.Thread(target=provider.vm_ready, args=("a", "vm-1"))
    try:
        first.start()
        wait_until(lambda: provider.inside("vm-1") == 1, 5, "the first call to be inside")
        second.start()
        wait_until(lambda: provider.overlaps, 5, "the overlap to be recorded")
    finally:
        provider.release.set()
        for thread in (first, second):
            if thread.ident is not None:
                thread.join(5)
    assert provider.overlaps == [("vm-1", ("get_vm", "vm_ready"))]
    assert provider.inside("vm-1") == 0


def _checkout_one(h: Harness, rng: random.Random, pool_name: str) -> None:
    """Check out a ready VM as the API would, unless the pool actor took it first."""
    ready = sorted(h.client.smembers(schema.ready(pool_name)))
    if not ready:
        return
    vm = rng.choice(ready)
    if not h.client.sismember(schema.ready(pool_name), vm):
        return
    try:
        h.checkout(pool_name, vm, lifetime=rng.choice([1, 2]))
    except AssertionError:
        return  # retired between the read and the SMOVE: the API would answer 404 too
    if rng.random() < 0.5:
        h.client.sadd(schema.migrating(pool_name), vm)
    if rng.random() < 0.5:
        h.client.sadd(schema.tasks_disk(), f"{vm}:8")
    if rng.random() < 0.5:
        h.client.sadd(schema.tasks_snapshot(), f"{vm}:s{rng.randint(1, 3)}")
    h.system.notify_tasks()


def _return_one(h: Harness, rng: random.Random, pool_name: str) -> None:
    """Give back a running VM as the API's DELETE does: running → completed."""
    running = sorted(h.client.smembers(schema.running(pool_name)))
    if running:
        vm = rng.choice(running)
        if h.client.smove(schema.running(pool_name), schema.completed(pool_name), vm):
            h.client.hset(schema.vm(vm), "destroy", timefmt.format_epoch(h.clock.now()))


def _churn(h: Harness, rng: random.Random, steps: int) -> None:
    for step in range(steps):
        name = rng.choice(sorted(POOLS))
        roll = rng.random()
        if roll < 0.35:
            h.clock.advance(rng.uniform(1, 30))  # do not wait for the actors: let work pile up
        elif roll < 0.55:
            _checkout_one(h, rng, name)
            h.system.notify(name, "checked out")
        elif roll < 0.62:
            _return_one(h, rng, name)
            h.system.notify(name, "returned")
        elif roll < 0.70:
            h.client.sadd(schema.poolreset(), name)
            h.system.notify(name, "reset")
        elif roll < 0.80:
            h.client.hset(schema.config_poolsize(), name, str(rng.randint(0, 6)))
            h.system.notify(name, "size override")
        elif roll < 0.84:
            h.client.hdel(schema.config_poolsize(), name)
            h.system.notify(name, "size override removed")
        elif roll < 0.90:
            h.system.drain(name, "churn")
        else:
            h.system.notify(name, "poke")
        if step % 15 == 14:
            h.quiesce()  # let the pools fill again so that checkouts find VMs


def test_no_two_calls_on_one_vm_under_churn(redis_client: redis.Redis) -> None:
    config = make_config(
        [pool(name, size, ready_ttl=2) for name, size in POOLS.items()],
        vm_checktime=1, check_loop_delay_min=2, check_loop_delay_max=10,
        provider_call_timeout=CALL_TIMEOUT, task_limit=6, circuit_breaker_failure_threshold=50,
    )
    provider = _recorder(config, 11, vmready_fail_percent=5, destroyvm_fail_percent=5,
                         getvm_rename_percent=5, migratevm_couldmove_percent=50)
    with started(redis_client, config, provider=provider, seed=3) as h:
        for name, size in POOLS.items():
            h.wait_full(name, size)
        _churn(h, random.Random(5), STEPS)
        h.quiesce()
        h.advance(30, step=10)  # a couple of cycles with nothing else going on

        assert provider.overlaps == [], f"calls overlapped on a VM: {provider.overlaps[:10]}"
        assert provider.tracked_calls > 500, "the churn hardly reached the provider"
        inventory = provider.inventory_snapshot()
        for name in POOLS:
            assert_no_vm_in_two_queues(redis_client, name)
            queues = queue_members(redis_client, name)
            for vm in inventory.get(name, []):
                holders = [q for q, members in queues.items() if vm in members]
                assert len(holders) == 1, f"{name}: inventory VM {vm} is in {holders or 'none'}"
        assert h.metrics.counts("vmpooler_actor.crashed") == 0
        # Pools still work after the churn.
        for name in POOLS:
            redis_client.hdel(schema.config_poolsize(), name)
            h.system.notify(name, "churn over")

        def full() -> bool:
            h.advance(5)
            return all(h.sizes(n)["ready"] >= s for n, s in POOLS.items())

        wait_until(full, 10, "every pool to be full again")
