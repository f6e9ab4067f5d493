"""Redis clients: one blocking connection pool per client, with reconnects.

Every process builds its clients here (the manager once, each API worker after the fork),
so pool size, timeouts, decoding and the retry policy are the same everywhere.
"""

from __future__ import annotations

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

__all__ = ["RECONNECT_BACKOFF", "connect"]

RECONNECT_BACKOFF = (0.1, 0.002)
"""``(cap, base)`` seconds of the reconnect back-off: the n-th retry waits a random time
up to ``min(cap, base * 2**n)``. Ten retries wait at most about 0.6 s in all, so a Redis
that is down fails a caller fast (as redis-rb's immediate reconnects did for vmpooler),
while a connection reset or a server restarting in well under a second is ridden out."""


def connect(
    host: str,
    port: int,
    *,
    password: str | None = None,
    username: str | None = None,
    db: int = 0,
    pool_size: int = 10,
    pool_timeout: float = 5.0,
    reconnect_attempts: int = 10,
) -> redis.Redis:
    """A client with a blocking connection pool of ``pool_size`` connections.

    A caller waits at most ``pool_timeout`` seconds for a free connection, then gets
    ``redis.ConnectionError``. A command whose connection fails (refused, reset, timed
    out) is retried on a fresh connection up to ``reconnect_attempts`` times (``:redis:
    reconnect_attempts``) with exponential back-off and jitter (:data:`RECONNECT_BACKOFF`),
    then raises. Responses are decoded as UTF-8 strings.
    """
    pool = redis.BlockingConnectionPool(
        host=host,
        port=port,
        db=db,
        password=password,
        username=username,
        max_connections=max(1, pool_size),
        timeout=pool_timeout,
        decode_responses=True,
        socket_connect_timeout=5,
        socket_timeout=30,
        health_check_interval=30,
        retry=Retry(ExponentialWithJitterBackoff(*RECONNECT_BACKOFF), max(0, reconnect_attempts)),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
    return redis.Redis(connection_pool=pool)
