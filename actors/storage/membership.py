"""Which managers are live, and which of them owns a thing: rendezvous hashing.

The live managers are the members of the heartbeat set (``vmpooler__manager__heartbeat``)
whose beat is younger than the stale age, less those naming a process of this host that no
longer exists. Each owned thing (a pool, an on-demand request) belongs to the live member
with the highest rendezvous hash (blake2b of member and name), so a joining or leaving
manager moves only its share. Used by pool ownership, request leases and the relay between
managers.
"""

from __future__ import annotations

import hashlib
import os
import socket

from vmpooler.actors.storage.heartbeat_store import HeartbeatStore

__all__ = ["dead_here", "live_managers", "rendezvous_owner"]


def _score(member: str, name: str) -> int:
    digest = hashlib.blake2b(f"{member}\0{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def rendezvous_owner(members: set[str] | list[str], name: str) -> str:
    """The member owning ``name``: the highest blake2b score of member and name (ties, which
    need a hash collision, go to the larger member)."""
    return max(members, key=lambda m: (_score(m, name), m))


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
