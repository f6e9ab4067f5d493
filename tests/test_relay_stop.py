"""Stream readers stop at once: a read blocked in XREAD/XREADGROUP is woken by
``CLIENT UNBLOCK``, so a stop never waits out the block. Each test configures a block far
longer than the stop's own timeout: a stop that waited the read out would return with the
reader's thread still running."""

from __future__ import annotations

import logging
import threading

import pytest
import redis

from tests.harness import wait_until
from vmpooler.actors.cluster.relay import Relay
from vmpooler.actors.runtime.supervisor import ActorDirectory
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.stream_reader import StreamReader

LONG_BLOCK_MS = 600_000  # ten minutes: far beyond any stop's timeout below
STOP_TIMEOUT = 20.0


def _blocked(client: redis.Redis, command: str) -> bool:
    return any(c.get("cmd") == command and "b" in c.get("flags", "")
               for c in client.client_list())


def _waited_out(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "did not stop within" in r.getMessage()]


def test_relay_stop_unblocks_its_read(redis_client: redis.Redis,
                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="vmpooler.actors.storage.stream_reader")
    relay = Relay(redis_client, member="m1", directory=ActorDirectory(),
                  live=lambda: {"m1"}, block_ms=LONG_BLOCK_MS).start()
    wait_until(lambda: _blocked(redis_client, "xread"), 5, "the relay's blocking XREAD")
    relay.stop(timeout=STOP_TIMEOUT)
    assert not _waited_out(caplog), "stop() timed out waiting for the blocked read"
    assert not relay.reading
    assert not _blocked(redis_client, "xread")
    assert not redis_client.exists(schema.manager_inbox("m1"))


def test_stream_reader_stop_unblocks_a_read_and_runs_no_further_step(
        redis_client: redis.Redis) -> None:
    steps: list[int] = []
    reading = threading.Event()

    def step(client: redis.Redis) -> bool:
        steps.append(1)
        reading.set()
        client.xread({"vmpooler-test-stream": "$"}, block=LONG_BLOCK_MS)
        return True

    reader = StreamReader(redis_client, step, name="test-reader", label="test",
                          what="a test stream", block_ms=LONG_BLOCK_MS).start()
    assert reading.wait(5)
    wait_until(lambda: _blocked(redis_client, "xread"), 5, "the blocking XREAD")
    reader.stop(timeout=STOP_TIMEOUT)
    assert not reader.alive, "stop() returned with the reader still blocked"
    assert steps == [1] and reader.errors == 0
    reader.stop(timeout=STOP_TIMEOUT)  # idempotent


def test_stream_reader_survives_failing_steps_and_still_stops(
        redis_client: redis.Redis) -> None:
    failures = threading.Event()
    calls: list[int] = []

    def step(client: redis.Redis) -> bool:
        calls.append(1)
        if len(calls) <= 2:
            raise redis.ResponseError("a failing read")
        failures.set()
        client.xread({"vmpooler-test-stream": "$"}, block=LONG_BLOCK_MS)
        return True

    reader = StreamReader(redis_client, step, name="test-reader", label="test",
                          what="a test stream", block_ms=LONG_BLOCK_MS,
                          backoff=(0.001, 0.002)).start()
    assert failures.wait(10)
    reader.stop(timeout=STOP_TIMEOUT)
    assert not reader.alive
    assert reader.errors == 2
