"""API tokens in Redis (reference §1.3): the hash ``schema.token(t)`` with ``user``,
``created`` and ``last``, no TTL, as vmpooler keeps them.

Used by the API's ``/token`` endpoints and by on-demand requests (the token's user). Reads
never use ``KEYS``: listing walks the key space with ``SCAN`` and one pipelined ``HMGET``
per batch, and the running VMs of a token are found with ``SSCAN`` over the pools' running
sets and one pipelined ``HGET`` per batch, so a large key space never blocks Redis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import redis

from vmpooler.actors.storage import schema

__all__ = ["BATCH", "TokenStore"]

BATCH = 500
"""Keys or VMs handled per SCAN step and per pipeline."""


class TokenStore:
    """Token records over one Redis client. Thread-safe as the client is."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def tokens_of(self, user: str) -> Iterator[tuple[str, str | None, str | None]]:
        """``(token, created, last)`` of every token owned by ``user``. ``SCAN`` may yield
        a token twice: callers that need each once deduplicate."""
        prefix = schema.token("")
        cursor: int | str = 0
        while True:
            cursor, keys = self.client.scan(cursor, match=schema.token("*"), count=BATCH)
            if keys:
                pipe = self.client.pipeline(transaction=False)
                for key in keys:
                    pipe.hmget(key, "user", "created", "last")
                for key, (owner, created, last) in zip(keys, pipe.execute(), strict=True):
                    if owner == user and key.startswith(prefix):
                        yield key[len(prefix):], created, last
            if int(cursor) == 0:
                return

    def create(self, user: str, *, created: str, new_token: Callable[[], str]) -> str:
        """Record a fresh token for ``user`` and return it. ``HSETNX`` claims the name, so a
        collision with a live token draws again instead of handing that token out."""
        while True:
            token = new_token()
            key = schema.token(token)
            if self.client.hsetnx(key, "user", user):
                self.client.hset(key, "created", created)
                return token

    def details(self, token: str) -> dict[str, str]:
        """Every field of the token's hash; empty if there is no such token."""
        return dict(self.client.hgetall(schema.token(token)))

    def user_of(self, token: str) -> str | None:
        """The token's ``user`` field, or None."""
        return self.client.hget(schema.token(token), "user")

    def delete(self, token: str) -> bool:
        """Delete the token. True if it existed."""
        return bool(self.client.delete(schema.token(token)))

    def running_vms(self, token: str, pools: Iterable[str],
                    same: Callable[[str | None, str], bool]) -> Iterator[str]:
        """VMs in the running sets of ``pools`` whose ``token:token`` matches ``token`` by
        ``same(stored, token)`` (the API passes a constant-time comparison). ``SSCAN`` may
        yield a VM twice."""
        for pool in pools:
            cursor: int | str = 0
            while True:
                cursor, vms = self.client.sscan(schema.running(pool), cursor, count=BATCH)
                if vms:
                    pipe = self.client.pipeline(transaction=False)
                    for vm in vms:
                        pipe.hget(schema.vm(vm), "token:token")
                    for vm, owner in zip(vms, pipe.execute(), strict=True):
                        if same(owner, token):
                            yield vm
                if int(cursor) == 0:
                    break
