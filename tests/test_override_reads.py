"""When a pool actor reads its override keys and flags (real Redis, fake clock).

A pool reads its six queues (and its standby set) every cycle, but the override keys (size,
template, clone target, reset, undo) and the flags it writes itself (prepared template,
empty) only on its first cycle, on the cycle after it is told of a change (our API's
``pool_changed``), and then periodically as a safety net for writers that tell nobody
(vmpooler's Ruby API, ``redis-cli``): every ``5 × check_loop_delay_max``. Commands are
counted with Redis's own ``INFO commandstats``; ``SUNION`` (of the reset and undo sets) is
issued by nothing but that read, so it marks each one.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

import falcon.testing
import pytest
import redis

from tests.harness import Harness, make_config, pool, started
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.pool.upkeep import OVERRIDE_REFRESH_CYCLES
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.pool_snapshot import PoolFlags, PoolOverrides
from vmpooler.actors.storage.store import Store
from vmpooler.web.api_context import ApiContext
from vmpooler.web.app import create_app
from vmpooler.web.commands import DirectCommands

DELAY_MIN, DELAY_MAX = 1, 2  # check_loop_delay_min/max: an idle cycle every 2 s
REFRESH = OVERRIDE_REFRESH_CYCLES * DELAY_MAX  # 10 s here
BOUND = REFRESH + DELAY_MAX  # docs/compatibility.md: applied within this many seconds
OVERRIDE_READS = ("hget", "sunion", "sismember", "exists")
"""Every command of the override and flag read (nothing else runs them while pools idle)."""


def commandstats(client: redis.Redis) -> Counter[str]:
    return Counter({name.removeprefix("cmdstat_"): int(stat["calls"])
                    for name, stat in client.info("commandstats").items()})


@pytest.fixture
def idle(redis_client: redis.Redis) -> Iterator[Harness]:
    """Pool ``a`` (2 VMs) full and idle, cycling every ``DELAY_MAX`` seconds."""
    config = make_config([pool("a", 2)], check_loop_delay_min=DELAY_MIN,
                         check_loop_delay_max=DELAY_MAX, experimental_features=True)
    with started(redis_client, config) as h:
        h.wait_full("a", 2)
        h.advance(3 * REFRESH, step=1)
        yield h


def cycles(h: Harness) -> int:
    return len(h.metrics.values("gauge", "vmpooler_performance.check_pool", pool="a"))


def sizes(h: Harness) -> list[float]:
    """The ``size`` gauge of every cycle so far: the size in effect."""
    return h.metrics.values("gauge", "size", pool="a")


def step(h: Harness) -> tuple[int, Counter[str]]:
    """Advance the clock one second: (cycles run, commands Redis counted)."""
    before, ran = commandstats(h.client), cycles(h)
    h.advance(1, step=1)
    return cycles(h) - ran, commandstats(h.client) - before


def until_a_read(h: Harness) -> None:
    """Step the clock until a cycle reads the override keys (so the next periodic read is
    a whole period away)."""
    for _ in range(BOUND + 1):
        if step(h)[1]["sunion"]:
            return
    raise AssertionError(f"no override read in {BOUND + 1} s")


def test_steady_cycles_read_no_override_keys_between_the_safety_net_reads(
    idle: Harness,
) -> None:
    h = idle
    until_a_read(h)
    reads_at: list[int] = []
    quiet_cycles = 0
    for second in range(1, 4 * REFRESH + 1):
        ran, counted = step(h)
        if counted["sunion"]:
            reads_at.append(second)
            # one pipeline: 3 HGET of the overrides, SUNION of the reset and undo sets, HGET
            # of the prepared template, EXISTS of the empty flag; no SISMEMBER (no marks)
            assert {c: counted[c] for c in OVERRIDE_READS} == {
                "hget": 4, "sunion": 1, "sismember": 0, "exists": 1}
        elif ran:
            quiet_cycles += ran
            assert {c: counted[c] for c in OVERRIDE_READS} == dict.fromkeys(OVERRIDE_READS, 0)
            assert counted["smembers"] == 7 * ran, \
                "each cycle still reads the six queues and the standby set"
    gaps = [b - a for a, b in zip([0, *reads_at], reads_at, strict=False)]
    assert reads_at and all(REFRESH <= gap <= BOUND for gap in gaps), reads_at
    assert quiet_cycles >= 4 * (OVERRIDE_REFRESH_CYCLES - 1) - 1


def test_an_override_written_by_our_api_is_applied_on_the_next_cycle(idle: Harness) -> None:
    h = idle
    until_a_read(h)  # the next periodic read is a whole period away; the clock stays put
    ctx = ApiContext(config=h.system.config, redis=h.client, commands=DirectCommands(h.system),
                     clock=h.clock, metrics=RecordingMetrics(), rng=random.Random(1))
    api = falcon.testing.TestClient(create_app(ctx))

    seen = len(sizes(h))
    assert api.simulate_post("/api/v3/config/poolsize", json={"a": 4}).status_code == 201
    h.quiesce()
    assert sizes(h)[seen] == 4, "the first cycle after the write applied it"
    h.wait_full("a", 4)

    seen = len(sizes(h))
    assert api.simulate_delete("/api/v3/config/poolsize/a").status_code == 201
    h.quiesce()
    assert sizes(h)[seen] == 2, "the first cycle after the undo applied it"
    assert not h.client.sismember(schema.undo_size_override(), "a"), "the undo was taken"
    h.wait_full("a", 2)

    seen = len(sizes(h))
    before = set(h.client.smembers(schema.ready("a")))
    assert api.simulate_post("/api/v3/poolreset", json={"a": True}).status_code == 201
    h.quiesce()
    assert not h.client.sismember(schema.poolreset(), "a"), "the reset was taken"
    assert h.metrics.counts("vm.lost", pool="a", reason="drained") == 2
    # The refill comes with the next cycle; on a slow machine the pool's lease (real time)
    # may have had to be taken again first, which puts that cycle on the next timer.
    assert not before & h.wait_full("a", 2), "the pool was drained and refilled"
    assert len(sizes(h)) > seen


@pytest.mark.parametrize("write", ["size", "reset"])
def test_a_key_written_directly_into_redis_is_applied_by_the_safety_net_read(
    idle: Harness, write: str,
) -> None:
    """As vmpooler's Ruby API (or redis-cli) writes them: nobody tells the manager."""
    h = idle
    until_a_read(h)
    ready = set(h.client.smembers(schema.ready("a")))
    if write == "size":
        h.client.hset(schema.config_poolsize(), "a", "3")
    else:
        h.client.sadd(schema.poolreset(), "a")

    def applied() -> bool:
        if write == "size":
            return sizes(h)[-1] == 3
        return not h.client.sismember(schema.poolreset(), "a")

    waited = cycles_before = 0
    while not applied():
        assert waited < BOUND, f"not applied within {BOUND} s"
        ran, _ = step(h)
        waited += 1
        if not applied():
            cycles_before += ran
    assert cycles_before >= OVERRIDE_REFRESH_CYCLES - 2, "idle cycles did not read the keys"
    if write == "size":
        assert h.wait_full("a", 3) >= ready
    else:
        assert not ready & h.wait_full("a", 2)


def test_the_snapshot_reads_only_what_it_is_asked_for(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    redis_client.sadd(schema.ready("a"), "r1")
    redis_client.hset(schema.config_poolsize(), "a", "7")
    redis_client.sadd(schema.undo_template_override(), "b")  # another pool's mark
    redis_client.config_resetstat()
    bare = store.snapshot("a", overrides=False, flags=False)
    assert bare.ready == {"r1"} and bare.overrides is None and bare.flags is None
    assert bare.size_override is None and not bare.empty_flag
    assert store.snapshot("a", flags=False).overrides == PoolOverrides(size="7")
    redis_client.sadd(schema.undo_size_override(), "a")
    full = store.snapshot("a")
    assert full.overrides == PoolOverrides(size="7", undo_size=True)
    assert full.flags == PoolFlags() and full.undo_size and not full.reset_requested
    counted = commandstats(redis_client)
    assert {c: counted[c] for c in ("smembers", *OVERRIDE_READS)} == {
        "smembers": 3 * 7, "hget": 3 + 3 + 1, "sunion": 2, "sismember": 3, "exists": 1}
