"""API tokens in Redis (reference §1.3): the hash ``schema.token(t)`` with ``user``,
``created`` and ``last``, no TTL, as vmpooler keeps them.

Used by the API's ``/token`` endpoints and by on-demand requests (the token's user). Reads
never use ``KEYS``: listing walks the key space with ``SCAN`` and one pipelined ``HMGET``
per batch, and the running VMs of a token are found with ``SSCAN`` over the pools' running
sets and one pipelined ``HGET`` per batch, so a large key space never blocks Redis.

A ``vmpooler__token__*`` key that holds something else than a hash (written by someone
else) is no token: listing skips it and logs it once, and reads of one token find none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import redis

from vmpooler.actors.fairness.names import normal_user_name
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.redis_errors import WrongTypeKeys, is_wrong_type, tolerant_results
from vmpooler.actors.storage.replies import fields as as_fields
from vmpooler.actors.storage.replies import maybe_text, text_dict, text_list

__all__ = ["BATCH", "TokenStore"]

BATCH = 500
"""Keys or VMs handled per SCAN step and per pipeline."""

_T = TypeVar("_T")


class TokenStore:
    """Token records over one Redis client. Thread-safe as the client is."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.wrong_type = WrongTypeKeys("tokens")

    def tokens_of(self, user: str) -> Iterator[tuple[str, str | None, str | None]]:
        """``(token, created, last)`` of every token owned by ``user``: whose ``user`` field
        is ``user`` in the normal form (:func:`~vmpooler.actors.fairness.names.normal_user_name`;
        a token written as ``Bob`` is ``bob``'s). ``SCAN`` may yield a token twice: callers
        that need each once deduplicate."""
        user = normal_user_name(user)
        prefix = schema.token("")
        cursor = 0
        while True:
            cursor, found = self.client.scan(cursor, match=schema.token("*"), count=BATCH)
            keys = text_list(found)
            if keys:
                pipe = self.client.pipeline(transaction=False)
                for key in keys:
                    pipe.hmget(key, "user", "created", "last")
                replies = tolerant_results(pipe, keys, "hash", self.wrong_type)
                for key, reply in zip(keys, replies, strict=True):
                    if (reply is not None and reply[0] is not None
                            and normal_user_name(reply[0]) == user and key.startswith(prefix)):
                        yield key[len(prefix):], reply[1], reply[2]
            if int(cursor) == 0:
                return

    def create(self, user: str, *, created: str, new_token: Callable[[], str],
               groups: Iterable[str] | None = None) -> str:
        """Record a fresh token for ``user`` and return it. ``HSETNX`` claims the name, so a
        collision with a live token draws again instead of handing that token out. With
        ``groups`` (ours: the user's LDAP groups), they are recorded comma-separated in the
        field ``groups``, an empty one included."""
        while True:
            token = new_token()
            key = schema.token(token)
            if self.client.hsetnx(key, "user", user):
                fields = {"created": created}
                if groups is not None:
                    fields["groups"] = ",".join(groups)
                self.client.hset(key, mapping=as_fields(fields))
                return token

    def details(self, token: str) -> dict[str, str]:
        """Every field of the token's hash; empty if there is no such token."""
        return self._read(token, lambda key: dict(text_dict(self.client.hgetall(key))), {})

    def user_of(self, token: str) -> str | None:
        """The token's ``user`` field, or None."""
        return self._read(token, lambda key: maybe_text(self.client.hget(key, "user")), None)

    def _read(self, token: str, read: Callable[[str], _T], none: _T) -> _T:
        """``read(key)`` of the token's key; ``none`` when that key is not a hash."""
        key = schema.token(token)
        try:
            return read(key)
        except redis.ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            self.wrong_type.report(key, "hash")
            return none

    def delete(self, token: str) -> bool:
        """Delete the token. True if it existed."""
        return bool(self.client.delete(schema.token(token)))

    def running_vms(self, token: str, pools: Iterable[str],
                    same: Callable[[str | None, str], bool]) -> Iterator[str]:
        """VMs in the running sets of ``pools`` whose ``token:token`` matches ``token`` by
        ``same(stored, token)`` (the API passes a constant-time comparison). ``SSCAN`` may
        yield a VM twice."""
        for pool in pools:
            cursor = 0
            while True:
                cursor, found = self.client.sscan(schema.running(pool), cursor, count=BATCH)
                vms = text_list(found)
                if vms:
                    pipe = self.client.pipeline(transaction=False)
                    for vm in vms:
                        pipe.hget(schema.vm(vm), "token:token")
                    for vm, owner in zip(vms, pipe.execute(), strict=True):
                        if same(owner, token):
                            yield vm
                if int(cursor) == 0:
                    break
