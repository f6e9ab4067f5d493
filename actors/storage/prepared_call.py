"""A script call whose wire form is encoded once and sent as is at every call.

redis-py encodes every argument of every command in Python; for a script called with
hundreds of keys (the status reading: four queues of every pool) that was most of the
call's CPU (0.28 ms of client CPU per call against 0.07 ms sent pre-encoded, 100 pools;
BENCHMARKS.md "/status stays cheap"). A :class:`PreparedCall` packs ``EVALSHA sha numkeys
keys... args...`` once and, at each call, writes those bytes on a connection of the
client's pool and reads the reply.

What callers may rely on: the reply is what ``script(keys=..., args=...)`` returns (the
same connection, parser and decoding), error replies raise as there. Whenever the short path
cannot answer (the script is not loaded on the server: ``NOSCRIPT``; the connection failed)
the call goes through the registered script instead, with redis-py's retries and script
loading. Thread-safe: the packed bytes are immutable and each call takes its own connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

__all__ = ["PreparedCall"]


class PreparedCall:
    """``script(keys=keys, args=args)`` over ``client``, encoded once."""

    __slots__ = ("_args", "_client", "_keys", "_packed", "_script")

    def __init__(self, client: redis.Redis, script: Script, keys: Sequence[Any],
                 args: Sequence[Any]) -> None:
        self._client = client
        self._script = script
        self._keys = list(keys)
        self._args = list(args)
        self._packed: Any = None

    def __call__(self) -> Any:
        client = self._client
        if client.connection is not None:  # a single-connection client: its own locking
            return self._slow()
        pool = client.connection_pool
        conn = pool.get_connection()
        try:
            packed = self._packed
            if packed is None:
                packed = self._packed = conn.pack_command(
                    "EVALSHA", self._script.sha, len(self._keys), *self._keys, *self._args)
            conn.send_packed_command(packed)
            reply = conn.read_response()
        except NoScriptError:
            pool.release(conn)
            return self._slow()
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            conn.disconnect()
            pool.release(conn)
            return self._slow()
        except redis.ResponseError:  # an error reply, read whole: the connection is fine
            pool.release(conn)
            raise
        except BaseException:  # interrupted mid-reply: the connection cannot be reused
            conn.disconnect()
            pool.release(conn)
            raise
        pool.release(conn)
        return reply

    def _slow(self) -> Any:
        """Through the registered script: loads it when the server lacks it, retries as the
        client is configured to."""
        return self._script(keys=self._keys, args=self._args)
