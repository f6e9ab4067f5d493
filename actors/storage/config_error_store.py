"""A pool's configuration error in Redis (``vmpooler__configerror__<pool>``, ours), for
``/status`` and the dashboard.

The pool's actor is the key's only writer: it writes the hash when the pool enters the
configuration-error state (a clone failed permanently) or the error changes, and deletes it
when the pool leaves the state; readers (the status script) see the hash or nothing. Plain
writes, no script: nothing else moves the key, so there is nothing to race with. Methods may
raise ``redis.RedisError``. Thread-safe (the client's connection pool is).
"""

from __future__ import annotations

from collections.abc import Mapping

import redis

from vmpooler.actors.storage import schema

__all__ = ["ConfigErrorStore"]


class ConfigErrorStore:
    """Writes and reads the configuration-error hash of pools over ``client``."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def publish(self, pool: str, *, error_class: str, message: str, since: str,
                template: str, clone_target: str) -> None:
        """Replace the pool's hash with these fields (one ``MULTI``: no reader sees a mix of
        an old and a new error). ``since`` is a vmpooler time string."""
        key = schema.config_error(pool)
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(key)
        pipe.hset(key, mapping={"error_class": error_class, "message": message,
                                "since": since, "template": template,
                                "clone_target": clone_target})
        pipe.execute()

    def clear(self, pool: str) -> None:
        """Delete the pool's hash (nothing happens when there is none)."""
        self.client.delete(schema.config_error(pool))

    def read(self, pool: str) -> Mapping[str, str]:
        """The pool's hash as published; empty when the pool is not in the state."""
        return dict(self.client.hgetall(schema.config_error(pool)))
