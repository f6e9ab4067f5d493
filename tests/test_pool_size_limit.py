"""The manager never grows a pool beyond its ``max_pool_size``, whoever wrote the size
override (vmpooler's Ruby API, ``redis-cli``), and a size override that is huge or no
number at all never stops the pool actor; each refused value is logged once. Likewise an
on-demand request whose counts another writer made huge is read with a bounded count. On a
fake clock: the pool's cycles are driven by advancing it."""

from __future__ import annotations

import logging

import pytest
import redis

from tests.harness import Harness, make_config, pool, started, wait_until
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.request_store import (
    MAX_ENTRY_COUNT,
    Entry,
    RequestStore,
    parse_requested,
)

HUGE_OVERRIDES = ["1000000", "9" * 5000, "0x" + "f" * 5000, "  +99_999_999_999  "]


def cycles(h: Harness, n: int) -> None:
    """Let the pool run ``n`` more cycles (its check loop waits at most 60 s)."""
    for _ in range(n):
        h.clock.advance(60)
        h.quiesce()


def held(h: Harness) -> int:
    sizes = h.sizes("a")
    return sizes["ready"] + sizes["pending"]


def refusals(caplog: pytest.LogCaptureFixture, phrase: str) -> int:
    return sum(1 for r in caplog.records if phrase in r.getMessage())


@pytest.mark.parametrize("override", HUGE_OVERRIDES)
def test_a_size_override_above_max_pool_size_is_clamped_and_logged_once(
        redis_client: redis.Redis, caplog: pytest.LogCaptureFixture, override: str) -> None:
    caplog.set_level(logging.INFO, logger="vmpooler")
    config = make_config([pool("a", 1)], max_pool_size=3, task_limit=50)
    with started(redis_client, config) as h:
        h.wait_full("a", 1)
        redis_client.hset(schema.config_poolsize(), "a", override)
        assert h.system.notify("a", "size override")
        h.wait_full("a", 3)
        cycles(h, 5)
        assert held(h) == 3
        assert len(h.provider.inventory_snapshot().get("a", [])) == 3
        assert h.system.actor_ref("pool:a") is not None
    assert refusals(caplog, "is above max_pool_size 3: the pool is kept at 3") == 1


def test_an_override_that_is_no_integer_is_ignored_and_logged_once(
        redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="vmpooler")
    config = make_config([pool("a", 2)], max_pool_size=3)
    with started(redis_client, config) as h:
        h.wait_full("a", 2)
        redis_client.hset(schema.config_poolsize(), "a", "1e300")
        h.system.notify("a", "size override")
        cycles(h, 5)
        assert held(h) == 2
        redis_client.hset(schema.config_poolsize(), "a", "3")  # a good value is applied
        h.system.notify("a", "size override")
        h.wait_full("a", 3)
    assert refusals(caplog, "ignoring size override '1e300': not an integer") == 1


def test_a_configured_size_is_never_above_the_limit_either(redis_client: redis.Redis) -> None:
    """Built without the loader (which refuses it), a pool of 9 with a limit of 2."""
    config = make_config([pool("a", 9)], max_pool_size=2, task_limit=50)
    with started(redis_client, config) as h:
        h.wait_full("a", 2)
        cycles(h, 3)
        wait_until(lambda: held(h) == 2, 10, "the pool to stay at 2")


@pytest.mark.parametrize(("written", "count"), [
    ("3", 3), (" 4 ", 4), ("+7", 7), ("1_0", 10), ("-2", 0), ("x", 0), ("", 0), ("٣", 0),
    ("10000", 10_000), ("10001", MAX_ENTRY_COUNT), ("9" * 4000, MAX_ENTRY_COUNT),
    ("9" * 5000, MAX_ENTRY_COUNT),
])
def test_an_entry_count_is_read_bounded(written: str, count: int) -> None:
    assert parse_requested(f"a:a:{written}") == (Entry("a", "a", count),)


def test_a_request_with_a_huge_count_keeps_its_actor_answering(
        redis_client: redis.Redis) -> None:
    """Written by another writer with a 4,000-digit count: the request's actor queues
    MAX_ENTRY_COUNT clones (none starts: no on-demand slot) and stays responsive."""
    config = make_config([pool("a", 0)], ondemand_clone_limit=0)
    assert RequestStore(redis_client).create("huge", [Entry("a", "a", 10**4000)], created=1)
    with started(redis_client, config) as h:
        wait_until(lambda: redis_client.zrange(schema.odcreate_task(), 0, -1)
                   == [f"a:a:{MAX_ENTRY_COUNT}:huge"], 10, "the request's clone task")
        h.quiesce()
        assert h.system.ondemand_request("huge") is not None
