"""Alias failover's Redis operations: each failover pool's published state.

``vmpooler__failover__<pool>`` (ours) is a hash the pool's actor rewrites every cycle behind
the pool's lease, expiring when no manager refreshes it; sibling pools (on any manager) and
the API read it. Methods may raise ``redis.RedisError``; :meth:`FailoverStore.publish` run
with a fence raises :class:`~vmpooler.actors.storage.lease_store.Fenced` (nothing written)
once the lease is no longer held. Thread-safe (the client's connection pool is).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.lease_store import Fence, run_fenced
from vmpooler.actors.storage.schema import FailoverScripts
from vmpooler.actors.storage.schema.lease_scripts import fenced

__all__ = ["FailoverState", "FailoverStore", "parse_state", "state_fields"]


@dataclass(frozen=True, slots=True)
class FailoverState:
    """One failover pool's published state.

    ``state`` is ``ok``, ``down`` or ``recovering``; ``reason`` why it is down
    (``breaker_open``, ``inventory_failed``, ``clone_failed``; None otherwise); ``since``
    the epoch of its last change of state; ``size`` its size in effect; ``ready`` the ready
    VMs it can deliver (0 while its inventory fails); ``effective`` the size it keeps now
    (``size`` plus what it covers); ``covering`` sibling → VMs it covers for it;
    ``updated`` the epoch of the publication.
    """

    pool: str
    state: str
    reason: str | None = None
    since: float = 0.0
    size: int = 0
    ready: int = 0
    effective: int = 0
    covering: Mapping[str, int] = field(default_factory=dict)
    updated: float = 0.0


def state_fields(state: FailoverState) -> dict[str, str]:
    """The hash fields of one published :class:`FailoverState`."""
    return {
        "state": state.state,
        "reason": state.reason or "",
        "since": f"{state.since:.0f}",
        "size": str(state.size),
        "ready": str(state.ready),
        "effective": str(state.effective),
        "covering": ",".join(f"{pool}:{n}" for pool, n in sorted(state.covering.items())),
        "updated": f"{state.updated:.0f}",
    }


def _int(text: Any) -> int:
    try:
        return int(float(text))
    except (TypeError, ValueError):
        return 0


def parse_state(pool: str, raw: Mapping[str, str]) -> FailoverState | None:
    """The state of a hash read back (None when empty or without a known ``state``);
    unreadable numbers read as 0."""
    state = raw.get("state")
    if state not in ("ok", "down", "recovering"):
        return None
    covering: dict[str, int] = {}
    for part in (raw.get("covering") or "").split(","):
        name, sep, count = part.rpartition(":")
        if sep and name:
            covering[name] = _int(count)
    return FailoverState(
        pool=pool, state=state, reason=raw.get("reason") or None,
        since=float(_int(raw.get("since"))), size=_int(raw.get("size")),
        ready=_int(raw.get("ready")), effective=_int(raw.get("effective")),
        covering=covering, updated=float(_int(raw.get("updated"))))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class FailoverStore:
    """Publishes and reads failover states."""

    def __init__(self, client: redis.Redis, fence: Fence | None = None) -> None:
        self.client = client
        self.fence = fence
        source = FailoverScripts.PUBLISH if fence is None else fenced(FailoverScripts.PUBLISH)
        self._publish = client.register_script(source)

    def with_fence(self, fence: Fence | None) -> FailoverStore:
        """A store whose publications run behind ``fence`` (None: unfenced)."""
        return FailoverStore(self.client, fence)

    def publish(self, state: FailoverState, *, ttl: float) -> None:
        """Replace the pool's published state; it expires after ``ttl`` seconds."""
        args: list[Any] = [max(1, int(ttl))]
        for item in state_fields(state).items():
            args.extend(item)
        keys = [schema.failover(state.pool)]
        fence = self.fence
        if fence is None:
            self._publish(keys=keys, args=args)
            return
        run_fenced(self._publish, fence, keys, args)

    def read(self, pools: Iterable[str]) -> dict[str, FailoverState]:
        """Published states by pool (pools with none, or an unreadable one, left out); one
        round trip."""
        names = list(pools)
        if not names:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(schema.failover(name))
        found: dict[str, FailoverState] = {}
        for name, raw in zip(names, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(raw, dict) and raw:
                state = parse_state(name, {_text(k): _text(v) for k, v in raw.items()})
                if state is not None:
                    found[name] = state
        return found
