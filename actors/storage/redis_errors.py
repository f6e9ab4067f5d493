"""What a Redis error means, and keys of the wrong type met while walking the key space.

What callers may rely on:

* :func:`redis_unavailable` is True only for errors that say Redis cannot serve now (a retry
  later may succeed); :func:`redis_failure` is the phrase a log line uses for an error:
  ``redis refused a command`` for a reply error that is no outage, ``redis unavailable``
  otherwise (a ``WRONGTYPE`` reply is never reported as an outage);
* :func:`is_wrong_type` recognises the ``WRONGTYPE`` reply (an operation on a key holding
  another kind of value);
* :class:`WrongTypeKeys` remembers which keys it has logged, so a walk of the key space that
  meets the same odd key every cycle logs it once; it remembers at most ``capacity`` keys
  (the oldest are forgotten first), so its memory is bounded whatever the key space holds;
* :func:`tolerant_results` runs a pipeline and gives back its replies with ``None`` in place
  of each reply that is a ``WRONGTYPE`` error (logged once per key); any other error raises.

Every method is thread-safe.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import MasterDownError

__all__ = ["WrongTypeKeys", "is_wrong_type", "redis_failure", "redis_unavailable",
           "tolerant_results"]

log = logging.getLogger(__name__)

_OUTAGE_ERRORS: tuple[type[Exception], ...] = (
    redis.ConnectionError,  # refused, reset, no free connection, BusyLoadingError, no master
    redis.TimeoutError,
    redis.ReadOnlyError,  # a demoted master during a failover
    MasterDownError,  # a replica that lost its master
)
_OUTAGE_REPLIES = ("MASTERDOWN", "LOADING", "READONLY", "TRYAGAIN")
_WRONG_TYPE = "WRONGTYPE"


def redis_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` says Redis cannot serve now (a retry later may succeed): redis-py's
    ``ConnectionError`` (``BusyLoadingError``, ``MasterNotFoundError`` included),
    ``TimeoutError``, ``ReadOnlyError`` or a ``MASTERDOWN``/``LOADING``/``READONLY``/
    ``TRYAGAIN`` reply; also when such an error is the ``__cause__`` of ``exc``."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 5:
        if isinstance(current, _OUTAGE_ERRORS):
            return True
        if isinstance(current, redis.ResponseError) and str(current).startswith(_OUTAGE_REPLIES):
            return True
        current, seen = current.__cause__, seen + 1
    return False


def is_wrong_type(exc: BaseException) -> bool:
    """True for Redis's ``WRONGTYPE`` reply, also inside a pipeline's error text (redis-py
    prefixes it with ``Command # n (...) of pipeline caused error:``) or a script's."""
    return isinstance(exc, redis.ResponseError) and _WRONG_TYPE in str(exc)


def redis_failure(exc: BaseException) -> str:
    """The phrase a log line uses for ``exc``: ``redis refused a command`` for an error reply
    that is no outage (``WRONGTYPE``, a script error, ...), else ``redis unavailable``."""
    if isinstance(exc, redis.ResponseError) and not redis_unavailable(exc):
        return "redis refused a command"
    return "redis unavailable"


class WrongTypeKeys:
    """The keys of the wrong type already logged by one walker (``what``: its name in the
    log line), at most ``capacity`` of them."""

    def __init__(self, what: str, *, capacity: int = 1024) -> None:
        self.what = what
        self.capacity = capacity
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def report(self, key: str, expected: str) -> bool:
        """Log that ``key`` is not a ``expected`` and is skipped, the first time it is
        reported (True then)."""
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return False
            self._seen[key] = None
            while len(self._seen) > self.capacity:
                self._seen.popitem(last=False)
        log.warning("[!] [%s] skipping key '%s': it holds another kind of value than a %s "
                    "(written by something other than vmpooler?); logged once", self.what,
                    key[:200], expected)
        return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)


def tolerant_results(pipe: Any, keys: Sequence[str], expected: str,
                     seen: WrongTypeKeys) -> list[Any]:
    """Execute ``pipe`` (one command per entry of ``keys``, in order) and return the replies,
    ``None`` for each command that met a key of the wrong type (reported to ``seen``).

    Any other error reply, and every connection error, raises as ``execute`` would.
    """
    replies = pipe.execute(raise_on_error=False)
    out: list[Any] = []
    for key, reply in zip(keys, replies, strict=True):
        if isinstance(reply, Exception):
            if not is_wrong_type(reply):
                raise reply
            seen.report(key, expected)
            out.append(None)
        else:
            out.append(reply)
    return out
