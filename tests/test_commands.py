"""The API → manager ``Commands`` transports: direct actor messages, and the durable Redis
stream read by the manager's :class:`CommandConsumer` (consumer group, XACK, claims,
idempotency), over a real redis-server. Clocks are fake: only commands can wake a pool."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pykka
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.harness import Harness, make_config, pool, started, wait_until
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.service.command_stream import (
    GROUP,
    STREAM,
    CommandConsumer,
    StreamOptions,
)
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.web.commands import DirectCommands, StreamCommands


@pytest.fixture
def api_client(redis_server: EmbeddedRedis, redis_client: redis.Redis) -> Iterator[redis.Redis]:
    """Another process's client (the API's): its own connections to the same server."""
    client = redis.Redis(host="127.0.0.1", port=redis_server.port, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def dead_client() -> Iterator[redis.Redis]:
    """A client of a port where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True,
                         socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    yield client
    client.close()


class Recorder:
    """``notify``/``notify_tasks`` that remember their calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self._lock = threading.Lock()

    def notify(self, pool_name: str, reason: str) -> bool:
        with self._lock:
            self.calls.append(("pool_changed", pool_name, reason))
        return True

    def notify_tasks(self) -> bool:
        with self._lock:
            self.calls.append(("tasks_queued",))
        return True


@contextmanager
def consuming(client: redis.Redis, recorder: Recorder,
              **options: Any) -> Iterator[pykka.ActorRef[Any]]:
    ref = CommandConsumer.start(client=client, notify=recorder.notify,
                                notify_tasks=recorder.notify_tasks,
                                options=StreamOptions(**options), clock=FakeClock())
    try:
        yield ref
    finally:
        ref.stop(block=True, timeout=10)


def group(client: redis.Redis) -> dict[str, Any]:
    (info,) = client.xinfo_groups(STREAM)
    return dict(info)


def all_acknowledged(client: redis.Redis) -> bool:
    """Every entry of the stream was delivered to the group and acknowledged."""
    last = client.xrevrange(STREAM, count=1)
    info = group(client)
    return bool(last) and info["last-delivered-id"] == last[0][0] and info["pending"] == 0


def refill_after_checkout(h: Harness, name: str, size: int, wake: Any) -> None:
    """Check out every ready VM, call ``wake()``, and see the pool refill with no timer."""
    ready = h.wait_full(name, size)
    h.quiesce()
    before = h.clock.monotonic()
    for vm in ready:
        h.checkout(name, vm)
    wake()
    h.wait_full(name, size)
    assert h.clock.monotonic() == before, "the fake clock did not move"


# -- direct transport ------------------------------------------------------------------------
def test_direct_commands_refill_a_pool_at_once(redis_client: redis.Redis) -> None:
    with started(redis_client, make_config([pool("a", 2)])) as h:
        direct = DirectCommands(h.system)
        refill_after_checkout(h, "a", 2, lambda: direct.pool_changed("a", "checked out"))
        direct.pool_changed("no-such-pool", "ignored")
        direct.tasks_queued()


# -- stream transport, end to end ------------------------------------------------------------
def test_stream_commands_from_another_process_refill_the_pool(
    redis_client: redis.Redis, api_client: redis.Redis
) -> None:
    with started(redis_client, make_config([pool("a", 2)])) as h:
        sender = StreamCommands(api_client)
        refill_after_checkout(h, "a", 2, lambda: sender.pool_changed("a", "checked out"))
        wait_until(lambda: all_acknowledged(redis_client), what="the command to be acked")


def test_commands_sent_while_no_manager_runs_are_consumed_when_one_starts(
    redis_client: redis.Redis, api_client: redis.Redis
) -> None:
    config = make_config([pool("a", 1)])
    with started(redis_client, config) as h:
        h.wait_full("a", 1)
    assert not pykka.ActorRegistry.get_by_class(CommandConsumer), "stopped with the system"
    sender = StreamCommands(api_client)
    sender.pool_changed("a", "while down")
    sender.tasks_queued()
    assert group(redis_client)["last-delivered-id"] != api_client.xrevrange(STREAM)[0][0]
    with started(redis_client, config) as h:
        wait_until(lambda: all_acknowledged(redis_client), what="the backlog to be consumed")
        h.wait_full("a", 1)


def test_consumer_dispatches_backlog_in_order_then_new_commands(
    redis_client: redis.Redis, api_client: redis.Redis
) -> None:
    sender = StreamCommands(api_client)  # creates the group: nothing is lost before a manager
    sender.pool_changed("a", "one")
    sender.tasks_queued()
    sender.pool_changed("b", "two")
    rec = Recorder()
    with consuming(redis_client, rec):
        wait_until(lambda: len(rec.calls) == 3, what="the backlog")
        sender.pool_changed("c", "three")
        wait_until(lambda: len(rec.calls) == 4, what="a new command")
        wait_until(lambda: all_acknowledged(redis_client), what="the acks")
    assert rec.calls == [("pool_changed", "a", "one"), ("tasks_queued",),
                         ("pool_changed", "b", "two"), ("pool_changed", "c", "three")]


def test_duplicate_command_ids_are_processed_once(
    redis_client: redis.Redis, api_client: redis.Redis
) -> None:
    StreamCommands(api_client).pool_changed("a", "first")
    for pool_name in ("a", "b", "a"):
        api_client.xadd(STREAM, {"id": "cmd-1" if pool_name == "a" else "cmd-2",
                                 "kind": "pool_changed", "pool": pool_name, "reason": "dup"})
    rec = Recorder()
    with consuming(redis_client, rec):
        wait_until(lambda: all_acknowledged(redis_client), what="every entry to be acked")
        assert rec.calls == [("pool_changed", "a", "first"), ("pool_changed", "a", "dup"),
                             ("pool_changed", "b", "dup")]


def test_entries_a_dead_manager_left_unacknowledged_are_claimed(
    redis_client: redis.Redis, api_client: redis.Redis
) -> None:
    sender = StreamCommands(api_client)
    sender.pool_changed("old", "read by a manager that died")
    sender.pool_changed("young", "read a moment ago by a live manager")
    read = api_client.xreadgroup(GROUP, "dead", {STREAM: ">"}, count=10)
    old_id, young_id = (entry_id for entry_id, _ in read[0][1])
    api_client.xclaim(STREAM, GROUP, "dead", 0, [old_id], idle=120_000)  # idle for 2 min
    rec = Recorder()
    with consuming(redis_client, rec, consumer="live"):
        sender.pool_changed("fresh", "new")
        wait_until(lambda: ("pool_changed", "fresh", "new") in rec.calls, what="fresh")
        assert rec.calls[0] == ("pool_changed", "old", "read by a manager that died")
        assert all(call[1] != "young" for call in rec.calls), "not idle long enough"
        wait_until(lambda: [p["message_id"] for p in api_client.xpending_range(
            STREAM, GROUP, "-", "+", 10)] == [young_id], what="only 'young' to stay pending")


def test_a_restarted_consumer_replays_its_own_unacknowledged_entries(
    redis_client: redis.Redis, api_client: redis.Redis
) -> None:
    StreamCommands(api_client).pool_changed("a", "read, then the manager crashed")
    api_client.xreadgroup(GROUP, "manager-1", {STREAM: ">"}, count=10)
    rec = Recorder()
    with consuming(redis_client, rec, consumer="manager-1"):
        wait_until(lambda: all_acknowledged(redis_client), what="the replay")
    assert rec.calls == [("pool_changed", "a", "read, then the manager crashed")]


def test_a_vanished_group_is_created_again(
    redis_client: redis.Redis, api_client: redis.Redis
) -> None:
    rec = Recorder()
    with consuming(redis_client, rec, block_ms=100):
        wait_until(lambda: redis_client.exists(STREAM) and group(redis_client))
        redis_client.delete(STREAM)
        StreamCommands(api_client).pool_changed("a", "after the stream was deleted")
        wait_until(lambda: rec.calls, what="the command")


def test_redis_errors_never_crash_the_consumer(dead_client: redis.Redis) -> None:
    rec = Recorder()
    with consuming(dead_client, rec) as ref:
        wait_until(lambda: ref.proxy().read_errors().get(timeout=5) >= 1, what="a failure")
        assert ref.is_alive()
    assert not ref.is_alive()


# -- the sender ------------------------------------------------------------------------------
def test_stream_commands_never_raise(dead_client: redis.Redis) -> None:
    sender = StreamCommands(dead_client)
    sender.pool_changed("a", "Redis is down")
    sender.tasks_queued()


def test_stream_entries_and_trimming(api_client: redis.Redis) -> None:
    sender = StreamCommands(api_client, maxlen=100)
    for i in range(1000):
        sender.pool_changed(f"p{i}", "why")
    sender.tasks_queued()
    assert 100 <= api_client.xlen(STREAM) < 1000
    (_, last), (_, before) = api_client.xrevrange(STREAM, count=2)
    assert uuid.UUID(last["id"]).version == 4
    assert last == {"id": last["id"], "kind": "tasks_queued", "pool": "", "reason": ""}
    assert before == {"id": before["id"], "kind": "pool_changed", "pool": "p999",
                      "reason": "why"}
    assert len(api_client.xinfo_groups(STREAM)) == 1


def test_background_sending_coalesces_a_burst_per_pool(redis_client: redis.Redis) -> None:
    sender = StreamCommands(redis_client, background=True)
    for _ in range(200):
        sender.pool_changed("a", "checkout")
    sender.tasks_queued()
    assert sender.flush(10)
    entries = redis_client.xrange(schema.commands())
    kinds = [(e[1]["kind"], e[1]["pool"]) for e in entries]
    assert ("pool_changed", "a") in kinds and ("tasks_queued", "") in kinds
    assert len(entries) < 200, "a burst for one pool is sent as few commands"
