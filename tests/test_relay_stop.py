"""The relay between managers stops at once: its reader, blocked in XREAD for up to
``BLOCK_MS``, is woken by its connection being shut down, and retries nothing (a retry would
block again). Every system stop waited out that read before (1.08 s each)."""

from __future__ import annotations

import time

import redis

from tests.harness import wait_until
from vmpooler.actors.runtime.supervisor import ActorDirectory
from vmpooler.actors.service.relay import BLOCK_MS, Relay
from vmpooler.actors.storage import schema


def test_stop_does_not_wait_out_a_blocked_read(redis_client: redis.Redis) -> None:
    relay = Relay(redis_client, member="m1", directory=ActorDirectory(),
                  live=lambda: {"m1"}).start()
    wait_until(lambda: any(c.get("cmd") == "xread" for c in redis_client.client_list()),
               5, "the relay's blocking XREAD")
    began = time.monotonic()
    relay.stop()
    took = time.monotonic() - began
    assert took < BLOCK_MS / 1000 / 4, f"stop took {took:.3f} s"
    assert not redis_client.exists(schema.manager_inbox("m1"))
