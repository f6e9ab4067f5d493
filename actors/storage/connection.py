"""Redis clients: one blocking connection pool per client, with reconnects.

Every process builds its clients here (the manager once, each API worker after the fork,
the CLI commands), so pool size, timeouts, decoding and the retry policy are the same
everywhere. :func:`connect_configured` follows the ``:redis:`` section: a server, or the
master that Redis Sentinel names (``sentinels`` + ``sentinel_master``), found again after a
failover, with the section's ACL user, password and TLS settings (``ssl``); for the embedded
server, the password it keeps in its data directory. :func:`sibling` gives a client to the
same Redis with other timeouts.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool

from vmpooler.actors.storage.embedded_files import read_password

if TYPE_CHECKING:  # the config package imports this module (pools read from Redis)
    from vmpooler.actors.config.model import RedisSettings

__all__ = ["RECONNECT_BACKOFF", "SENTINEL_TIMEOUT", "BlockingSentinelPool", "connect",
           "connect_configured", "connect_sentinel", "describe", "effective_password",
           "pool_like", "sibling", "tls_options"]

RECONNECT_BACKOFF = (0.1, 0.002)
"""``(cap, base)`` seconds of the reconnect back-off: the n-th retry waits a random time
up to ``min(cap, base * 2**n)``. Ten retries wait at most about 0.6 s in all, so a Redis
that is down fails a caller fast (as redis-rb's immediate reconnects did for vmpooler),
while a connection reset or a server restarting in well under a second is ridden out."""

SENTINEL_TIMEOUT = 1.0
"""Seconds to connect to a sentinel and for its answer (a dead one is skipped)."""


class BlockingSentinelPool(SentinelConnectionPool, redis.BlockingConnectionPool):
    """redis-py's ``SentinelConnectionPool`` with ``BlockingConnectionPool``'s bounded
    size: at most ``max_connections``, a caller waits ``timeout`` s for a free one. Each
    new connection asks the sentinels for the master; connections to a demoted master are
    dropped (``READONLY`` becomes a ``ConnectionError``, retried on the new master)."""


def _pool_kwargs(pool_size: int, pool_timeout: float, reconnect_attempts: int) -> dict[str, Any]:
    return {
        "max_connections": max(1, pool_size),
        "timeout": pool_timeout,
        "decode_responses": True,
        "socket_connect_timeout": 5,
        "socket_timeout": 30,
        "health_check_interval": 30,
        "retry": Retry(ExponentialWithJitterBackoff(*RECONNECT_BACKOFF),
                       max(0, reconnect_attempts)),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
    }


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
    tls: Mapping[str, Any] | None = None,
) -> redis.Redis:
    """A client with a blocking connection pool of ``pool_size`` connections.

    A caller waits at most ``pool_timeout`` seconds for a free connection, then gets
    ``redis.ConnectionError``. A command whose connection fails (refused, reset, timed
    out) is retried on a fresh connection up to ``reconnect_attempts`` times (``:redis:
    reconnect_attempts``) with exponential back-off and jitter (:data:`RECONNECT_BACKOFF`),
    then raises. Responses are decoded as UTF-8 strings. ``tls`` (:func:`tls_options`)
    makes every connection TLS with those options.
    """
    extra: dict[str, Any] = {}
    if tls is not None:
        extra = {"connection_class": redis.SSLConnection, **tls}
    pool = redis.BlockingConnectionPool(
        host=host, port=port, db=db, password=password, username=username,
        **_pool_kwargs(pool_size, pool_timeout, reconnect_attempts), **extra,
    )
    return redis.Redis(connection_pool=pool)


def connect_sentinel(
    sentinels: tuple[tuple[str, int], ...],
    master: str,
    *,
    password: str | None = None,
    username: str | None = None,
    sentinel_password: str | None = None,
    db: int = 0,
    pool_size: int = 10,
    pool_timeout: float = 5.0,
    reconnect_attempts: int = 10,
    tls: Mapping[str, Any] | None = None,
) -> redis.Redis:
    """Like :func:`connect`, to the master the ``sentinels`` name ``master``.

    The sentinels are asked (in turn, :data:`SENTINEL_TIMEOUT` s each) whenever a
    connection is opened; with none answering, or none knowing a healthy master, a command
    raises ``MasterNotFoundError`` (a ``redis.ConnectionError``) after its retries.
    ``password``/``username`` are the master's, ``sentinel_password`` the sentinels'.
    ``tls`` applies to both: the sentinels and the master speak TLS.
    """
    secure: dict[str, Any] = {} if tls is None else {"ssl": True, **tls}
    manager = Sentinel(list(sentinels), sentinel_kwargs={
        "password": sentinel_password, "socket_timeout": SENTINEL_TIMEOUT,
        "socket_connect_timeout": SENTINEL_TIMEOUT, **secure})
    pool = BlockingSentinelPool(
        master, manager, db=db, password=password, username=username,
        **_pool_kwargs(pool_size, pool_timeout, reconnect_attempts), **secure,
    )
    return redis.Redis(connection_pool=pool)


def tls_options(settings: RedisSettings) -> dict[str, Any] | None:
    """redis-py's TLS connection options for ``:redis: ssl`` and its ``ssl_*`` keys, or None
    when ``ssl`` is off. Verification is on unless ``ssl_verify`` is false: the server's
    certificate must chain to ``ssl_ca_file`` (else the system's CAs) and name the host."""
    if not settings.ssl:
        return None
    return {
        "ssl_ca_certs": settings.ssl_ca_file,
        "ssl_certfile": settings.ssl_cert_file,
        "ssl_keyfile": settings.ssl_key_file,
        "ssl_cert_reqs": "required" if settings.ssl_verify else "none",
        "ssl_check_hostname": settings.ssl_verify,
    }


def effective_password(settings: RedisSettings) -> str | None:
    """The password to send: ``:redis: password`` when set (it is also the embedded server's
    then), else, for the embedded server, the one it keeps in ``<data_dir>/redis.password``
    (None when there is none). Raises
    :class:`~vmpooler.actors.storage.embedded_files.DataDirError` when that file exists but
    cannot be read."""
    if settings.password is not None or not settings.embedded:
        return settings.password
    return read_password(Path(settings.data_dir))


def connect_configured(
    settings: RedisSettings,
    *,
    address: tuple[str, int] | None = None,
    pool_size: int | None = None,
    pool_timeout: float | None = None,
    reconnect_attempts: int | None = None,
) -> redis.Redis:
    """The client ``settings`` (``:redis:``) describe: through the sentinels when
    ``sentinels`` is set, else to ``address`` (the embedded server's) or ``server:port``,
    with :func:`effective_password` and :func:`tls_options`.
    The keyword arguments override the section's pool size, pool timeout and attempts."""
    size = settings.connection_pool_size if pool_size is None else pool_size
    timeout = settings.connection_pool_timeout if pool_timeout is None else pool_timeout
    attempts = settings.reconnect_attempts if reconnect_attempts is None else reconnect_attempts
    tls = tls_options(settings)
    if settings.sentinels:
        return connect_sentinel(
            settings.sentinel_addresses, str(settings.sentinel_master),
            password=settings.password, username=settings.username,
            sentinel_password=settings.sentinel_password, db=settings.db, pool_size=size,
            pool_timeout=timeout, reconnect_attempts=attempts, tls=tls)
    host, port = address or (str(settings.server or "localhost"), settings.port)
    return connect(host, port, password=effective_password(settings),
                   username=settings.username, db=settings.db, pool_size=size,
                   pool_timeout=timeout, reconnect_attempts=attempts, tls=tls)


def describe(settings: RedisSettings) -> str:
    """Where ``settings`` point, for messages: ``host:port`` or ``sentinel master <name>
    (h1:p1, h2:p2)``, followed by `` (TLS)`` with ``ssl``."""
    tls = " (TLS)" if settings.ssl else ""
    if settings.sentinels:
        return (f"sentinel master {settings.sentinel_master} "
                f"({', '.join(settings.sentinels)}){tls}")
    return f"{settings.server or 'localhost'}:{settings.port}{tls}"


def pool_like(client: redis.Redis, *, blocking: bool, max_connections: int | None = None,
              timeout: float = 5.0, **connection_kwargs: Any) -> redis.ConnectionPool:
    """A new pool of the same kind as ``client``'s (to the same server, or to the master of
    the same sentinels) whose connections take exactly ``connection_kwargs`` (the server's
    ``host``/``port`` among them unless it follows Sentinel). ``blocking``: at most
    ``max_connections``, a caller waits ``timeout`` s for a free one; else no wait."""
    pool = client.connection_pool
    kwargs = {k: v for k, v in connection_kwargs.items() if k != "connection_pool"}
    if blocking:
        kwargs.update(max_connections=max_connections or 50, timeout=timeout)
    elif max_connections is not None:
        kwargs["max_connections"] = max_connections
    if isinstance(pool, SentinelConnectionPool):
        sentinel = BlockingSentinelPool if blocking else SentinelConnectionPool
        return sentinel(pool.service_name, pool.sentinel_manager,
                        connection_class=pool.connection_class, **kwargs)
    plain = redis.BlockingConnectionPool if blocking else redis.ConnectionPool
    return plain(connection_class=pool.connection_class, **kwargs)


def sibling(client: redis.Redis, *, max_connections: int, timeout: float = 5.0,
            **overrides: Any) -> redis.Redis:
    """A client with a blocking pool of its own (``max_connections``, ``timeout`` s to wait
    for one) to the same Redis as ``client`` (the same sentinels and master when it follows
    Sentinel), with ``client``'s connection options but ``overrides`` (``socket_timeout``,
    ``retry``, ...)."""
    kwargs = {**client.connection_pool.connection_kwargs, **overrides}
    return redis.Redis(connection_pool=pool_like(
        client, blocking=True, max_connections=max_connections, timeout=timeout, **kwargs))
