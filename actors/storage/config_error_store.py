"""The pools' configuration errors in Redis (``vmpooler__configerror``, ours), for
``/status`` and the dashboard.

One hash, pool -> JSON ``{"error_class", "message", "since", "template", "clone_target"}``
(``since`` a vmpooler time string), so ``/status`` reads every pool's in one ``HMGET``. A
pool's field has one writer, its pool actor: it sets the field when the pool enters the
configuration-error state (a clone failed permanently) or the error changes, and deletes it
when the pool leaves the state. Plain writes, no script: nothing else moves the field, so
there is nothing to race with. Methods may raise ``redis.RedisError``. Thread-safe (the
client's connection pool is).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.replies import maybe_text

__all__ = ["ConfigErrorStore", "parse_config_error"]


def parse_config_error(raw: str | None) -> Mapping[str, str] | None:
    """A published field as a mapping of strings; None when absent, not JSON or not an
    object (a hand-written value must not break ``/status``)."""
    if not raw:
        return None
    try:
        value: Any = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return {str(k): str(v) for k, v in value.items()}


class ConfigErrorStore:
    """Writes and reads the pools' configuration errors over ``client``."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def publish(self, pool: str, *, error_class: str, message: str, since: str,
                template: str, clone_target: str) -> None:
        """Set the pool's field (replacing what it held)."""
        self.client.hset(schema.config_errors(), pool, json.dumps({
            "error_class": error_class, "message": message, "since": since,
            "template": template, "clone_target": clone_target}))

    def clear(self, pool: str) -> None:
        """Delete the pool's field (nothing happens when there is none)."""
        self.client.hdel(schema.config_errors(), pool)

    def read(self, pool: str) -> Mapping[str, str] | None:
        """The pool's error as published; None when the pool is not in the state."""
        return parse_config_error(maybe_text(self.client.hget(schema.config_errors(), pool)))
