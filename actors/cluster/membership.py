"""Which managers are live, and which of them owns a thing: rendezvous hashing.

The live managers are the members of the heartbeat set (``vmpooler__manager__heartbeat``)
whose beat is younger than the stale age, less those naming a process of this host that no
longer exists. Each owned thing belongs to the live member with the highest rendezvous hash
(blake2b of member and name), so a joining or leaving manager moves only about its share:

* on-demand requests (an open-ended set): :func:`rendezvous_owner`;
* pools (a set every manager knows from its configuration): :func:`balanced_owners`,
  rendezvous hashing with bounded loads, so every live manager gets its share even when
  there are few pools (plain rendezvous leaves a manager without a pool one time in 13 with
  nine pools over three managers).

:class:`Membership` is one manager's shared, cached view of both (its pool actors ask it
instead of each reading the heartbeat set). Used by pool ownership, request leases and the
relay between managers.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterable

from vmpooler.actors.storage.heartbeat_store import HeartbeatStore

__all__ = ["Membership", "balanced_owners", "dead_here", "live_managers", "rendezvous_owner"]


def _score(member: str, name: str) -> int:
    digest = hashlib.blake2b(f"{member}\0{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _ranked(members: Collection[str], name: str) -> list[str]:
    return sorted(members, key=lambda m: (_score(m, name), m), reverse=True)


def rendezvous_owner(members: Collection[str], name: str) -> str:
    """The member owning ``name``: the highest blake2b score of member and name (ties, which
    need a hash collision, go to the larger member)."""
    return max(members, key=lambda m: (_score(m, name), m))


def balanced_owners(members: Collection[str], names: Iterable[str]) -> dict[str, str]:
    """``name -> member`` for every name: rendezvous hashing with bounded loads. The names
    are taken in a fixed order (their own hash), each going to the highest-ranked member
    that still has room: every member gets ``len(names) // len(members)`` names, and
    ``len(names) % len(members)`` of them one more. Every manager computing it from the same
    members and names gets the same answer; every member gets its share (when there are at
    least as many names as members), and a member joining or leaving moves little more than
    its share (about 26 % of 1,000 pools when a fourth manager joins three)."""
    ordered = sorted(set(names), key=lambda n: (hashlib.blake2b(n.encode(),
                                                                digest_size=8).digest(), n))
    if not members or not ordered:
        return {}
    base, extra = divmod(len(ordered), len(members))
    load = dict.fromkeys(members, 0)
    bigger = 0  # members given base + 1 names so far
    owners: dict[str, str] = {}
    for name in ordered:
        for member in _ranked(members, name):
            if load[member] < base or (load[member] == base and bigger < extra):
                bigger += load[member] == base
                owners[name] = member
                load[member] += 1
                break
    return owners


def dead_here(member: str) -> bool:
    """True when ``member`` (``host:pid:started``) names a process of this host that no
    longer exists. Any other member (another host, a live or unreadable pid) is not."""
    host_pid = member.rpartition(":")[0]
    host, _, pid = host_pid.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def live_managers(heartbeats: HeartbeatStore, now: float, stale_after: float) -> set[str]:
    """The heartbeat members whose beat is at most ``stale_after`` s old at ``now``, less
    those naming a process of this host that no longer exists. May raise
    ``redis.RedisError``."""
    return {b.manager for b in heartbeats.beats()
            if now - b.at <= stale_after and not dead_here(b.manager)}


class Membership:
    """One manager's view of the live managers (itself always included) and of the owner of
    each of its ``pools``, read from the heartbeat set at most once per ``max_age`` seconds
    (real time) and shared by every caller. Thread-safe. :meth:`live` and :meth:`owner` may
    raise ``redis.RedisError`` when the view is due and Redis cannot be read."""

    def __init__(self, *, manager: str, heartbeats: HeartbeatStore, now: Callable[[], float],
                 stale_after: float, pools: Iterable[str], max_age: float = 1.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.manager = manager
        self.heartbeats = heartbeats
        self.now = now  # epoch seconds, the clock heartbeats are written with
        self.stale_after = stale_after
        self.pools = tuple(sorted(set(pools)))
        self.max_age = max_age
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._live: frozenset[str] = frozenset()
        self._read_at: float | None = None
        self._owners: dict[str, str] = {}
        self.reads = 0  # heartbeat reads so far (for tests and benchmarks)

    def live(self) -> frozenset[str]:
        """The live managers, this one included."""
        with self._lock:
            return self._current()

    def owner(self, pool: str) -> str:
        """The live manager owning ``pool`` (balanced over this view's pools; a pool not
        among them by plain rendezvous)."""
        with self._lock:
            live = self._current()
            owner = self._owners.get(pool)
            return owner if owner is not None else rendezvous_owner(live, pool)

    def _current(self) -> frozenset[str]:
        mono = self.monotonic()
        if self._read_at is not None and mono - self._read_at < self.max_age:
            return self._live
        live = live_managers(self.heartbeats, self.now(), self.stale_after)
        live.add(self.manager)
        self.reads += 1
        self._read_at = mono
        if live != self._live:
            self._live = frozenset(live)
            self._owners = balanced_owners(self._live, self.pools)
        return self._live
