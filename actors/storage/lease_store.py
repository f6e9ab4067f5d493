"""Leases with fencing tokens: which manager owns a pool or an in-flight on-demand request.

A lease is one Redis string per owned thing (``schema.lease(kind, name)``) taken with
``SET NX PX``: it expires after its TTL unless its holder renews it, and only the holder may
renew or release it. Taking a lease draws a new fencing token from one counter
(``schema.lease_token()``), so tokens only grow. An owner's writes run behind the fence
(:func:`vmpooler.actors.storage.schema.lease_scripts.fenced`): each carries the lease value
the writer believes it holds, and a script whose lease now holds another value writes
nothing and replies ``FENCED``, which the stores raise as :class:`Fenced`.

Methods may raise ``redis.RedisError``; all are thread-safe (the client's pool is).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.replies import text
from vmpooler.actors.storage.schema import LeaseScripts
from vmpooler.actors.storage.schema.lease_scripts import FENCED

__all__ = ["POOL", "REQUEST", "Fence", "Fenced", "Lease", "LeaseState", "LeaseStore",
           "run_fenced"]

POOL = "pool"
"""The lease kind of pools (``vmpooler__lease__pool__<name>``)."""
REQUEST = "request"
"""The lease kind of in-flight on-demand requests (``vmpooler__lease__request__<id>``)."""


class Fenced(Exception):  # noqa: N818 - the reply's name
    """A fenced write was refused: the caller no longer holds the lease ``key``. Nothing was
    written (not a ``redis.RedisError``: Redis is fine, the caller is out of date)."""

    def __init__(self, key: str, value: str | None) -> None:
        super().__init__(f"lease {key} no longer held as {value!r}")
        self.key = key
        self.value = value


class Fence(Protocol):
    """What a store needs to fence its writes: the lease key and the value held now (None
    when nothing is held: the write is refused without a round trip)."""

    @property
    def key(self) -> str: ...

    def held(self) -> str | None: ...


def run_fenced(script: Callable[..., Any], fence: Fence, keys: Sequence[str],
               args: Sequence[Any]) -> Any:
    """Run a script made by :func:`~vmpooler.actors.storage.schema.lease_scripts.fenced`
    behind ``fence``: the lease key and the value held now go after ``keys`` and ``args``.
    Returns the script's reply; raises :class:`Fenced` (nothing written) when the lease
    holds another value or none (``''`` never matches a lease, so the script refuses)."""
    held = fence.held()
    reply = script(keys=[*keys, fence.key], args=[*args, held or ""])
    if reply == FENCED:
        raise Fenced(fence.key, held)
    return reply


@dataclass(frozen=True, slots=True)
class Lease:
    """One holding of a lease: its key, fencing token and holder. ``value`` is what the
    lease key holds while this holding lasts."""

    key: str
    token: int
    holder: str

    @property
    def value(self) -> str:
        """``<token> <holder>``."""
        return f"{self.token} {self.holder}"

    @classmethod
    def parse(cls, key: str, value: str) -> Lease:
        """The holding a lease key's ``value`` names."""
        token, _, holder = value.partition(" ")
        return cls(key, int(token), holder)


@dataclass(frozen=True, slots=True)
class LeaseState:
    """The answer of :meth:`LeaseStore.acquire`: ``lease`` is the current holding (ours when
    ``ours``), ``taken`` whether this call took it (a new token), ``ttl_ms`` the time left of
    another holder's lease (0 when ours)."""

    lease: Lease
    ours: bool
    taken: bool
    ttl_ms: int = 0


class LeaseStore:
    """See the module docstring."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._acquire = client.register_script(LeaseScripts.ACQUIRE)
        self._renew = client.register_script(LeaseScripts.RENEW)
        self._release = client.register_script(LeaseScripts.RELEASE)

    def acquire(self, kind: str, name: str, holder: str, *, ttl: float) -> LeaseState:
        """Take the lease if free (a new token), renew it if ``holder`` holds it, else report
        who does. ``ttl`` in seconds."""
        key = schema.lease(kind, name)
        reply = self._acquire(keys=[key, schema.lease_token()],
                              args=[holder, max(1, int(ttl * 1000))])
        code, value = int(reply[0]), str(reply[1])
        lease = Lease.parse(key, value)
        if code == 0:
            return LeaseState(lease, ours=False, taken=False, ttl_ms=int(reply[2]))
        return LeaseState(lease, ours=True, taken=code == 1)

    def renew(self, lease: Lease, *, ttl: float) -> bool:
        """Extend ``lease`` by ``ttl`` seconds from now; False (nothing written) if it is no
        longer held."""
        return bool(self._renew(keys=[lease.key], args=[lease.value, max(1, int(ttl * 1000))]))

    def renew_many(self, leases: list[Lease], *, ttl: float) -> list[bool]:
        """:meth:`renew` each of ``leases``, in one round trip; whether each still held."""
        if not leases:
            return []
        pipe = self.client.pipeline(transaction=False)
        for lease in leases:
            self._renew(keys=[lease.key], args=[lease.value, max(1, int(ttl * 1000))],
                        client=pipe)
        return [bool(r) for r in pipe.execute()]

    def release(self, lease: Lease) -> bool:
        """Give ``lease`` up; False (nothing written) if it was no longer held."""
        return bool(self._release(keys=[lease.key], args=[lease.value]))

    def holder(self, kind: str, name: str) -> Lease | None:
        """The current holding of the lease, or None when it is free."""
        key = schema.lease(kind, name)
        value = self.client.get(key)
        return Lease.parse(key, text(value)) if value else None

    def holders(self, kind: str, names: list[str]) -> dict[str, Lease | None]:
        """The current holding of each named lease, in one round trip."""
        if not names:
            return {}
        keys = [schema.lease(kind, n) for n in names]
        values = self.client.mget(keys)
        return {n: (Lease.parse(k, text(v)) if v else None)
                for n, k, v in zip(names, keys, values, strict=True)}
