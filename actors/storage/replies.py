"""What redis-py's replies are on the clients the stores are given.

Every client the project makes decodes replies (``decode_responses=True``,
:mod:`vmpooler.actors.storage.connection`), so a string reply is a ``str``; redis-py types it
``bytes | str`` for any client. These helpers tell the type checker so. They neither check nor
convert, and cost one function call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from redis.typing import EncodableT, FieldT

__all__ = ["fields", "maybe_text", "text", "text_dict", "text_list", "text_set"]


def text(reply: object) -> str:
    """A string reply of a decoding client."""
    return cast(str, reply)


def maybe_text(reply: object) -> str | None:
    """A string reply that may be nil (``GET``, ``HGET``, ``SPOP`` of a missing key)."""
    return cast("str | None", reply)


def text_set(reply: object) -> set[str]:
    """A set reply (``SMEMBERS``) of a decoding client."""
    return cast("set[str]", reply)


def text_list(reply: object) -> list[str]:
    """An array-of-strings reply (``HKEYS``, ``LRANGE``) of a decoding client."""
    return cast("list[str]", reply)


def text_dict(reply: object) -> dict[str, str]:
    """A hash reply (``HGETALL``) of a decoding client."""
    return cast("dict[str, str]", reply)


def fields(mapping: Mapping[str, EncodableT]) -> dict[FieldT, EncodableT]:
    """A copy of ``mapping`` typed as redis-py's ``HSET`` and ``XADD`` want it (their key type
    is invariant, so a ``dict[str, str]`` is refused)."""
    return cast("dict[FieldT, EncodableT]", dict(mapping))


def stream_reply(reply: object) -> list[tuple[str, list[tuple[str, dict[str, str]]]]]:
    """An ``XREAD``/``XREADGROUP`` reply (RESP2): ``[(stream, [(id, fields), ...]), ...]``, or
    an empty list for nil (nothing arrived before the block ran out)."""
    return cast("list[tuple[str, list[tuple[str, dict[str, str]]]]]", reply or [])


def scored(reply: object) -> list[tuple[str, float]]:
    """A ``ZRANGE … WITHSCORES`` reply: ``[(member, score), ...]``."""
    return cast("list[tuple[str, float]]", reply)
