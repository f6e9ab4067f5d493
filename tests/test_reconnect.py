"""``:redis: reconnect_attempts``: a command whose connection fails is retried on a fresh
connection that many times (with back-off) before the caller sees the error."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
import redis

from tests.harness import make_config, pool
from vmpooler.actors.config import RedisSettings
from vmpooler.actors.storage.connection import connect
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.system import PoolerSystem


@pytest.fixture
def slamming_door() -> Iterator[tuple[int, list[int]]]:
    """A port that accepts every connection and closes it at once; counts the accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    accepted = [0]

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted[0] += 1
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


@pytest.mark.parametrize("attempts", [0, 1, 3])
def test_a_failing_connection_is_tried_again(
    slamming_door: tuple[int, list[int]], attempts: int,
) -> None:
    port, accepted = slamming_door
    client = connect("127.0.0.1", port, reconnect_attempts=attempts)
    with pytest.raises(redis.ConnectionError):
        client.ping()
    if attempts == 0:
        assert accepted[0] == 1
    else:  # the command, and each connection it opens, are retried
        assert accepted[0] >= attempts + 1
    client.close()


def test_the_system_builds_its_client_with_the_configured_attempts(
    redis_server: EmbeddedRedis, redis_client: redis.Redis,
) -> None:
    base = make_config([pool("a", 0)])
    config = type(base)(**{**{f: getattr(base, f) for f in base.__dataclass_fields__},
                           "redis": RedisSettings(server="127.0.0.1", port=redis_server.port,
                                                  reconnect_attempts=4)})
    system = PoolerSystem.start(config)
    try:
        retry = system.redis.connection_pool.connection_kwargs["retry"]
        assert retry.get_retries() == 4
    finally:
        system.stop()
