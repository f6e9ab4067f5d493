"""Who asked for an on-demand request (ours, docs/fairness.md), as the create scripts write it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RequestOrigin", "origin_args"]


@dataclass(frozen=True, slots=True)
class RequestOrigin:
    """Who asked for a request (ours, docs/fairness.md): the requester's ``user`` (a token's
    user, a client address or ``anonymous``), the request's ``priority`` (``high``,
    ``normal``, ``low``) and the user's ``share`` of clone capacity. Written with the request
    as its hash fields ``user``, ``priority`` and ``share``."""

    user: str
    priority: str = "normal"
    share: float = 1.0


def origin_args(origin: RequestOrigin | None) -> list[str]:
    """ARGV[6..8] of the create scripts for ``origin`` (``user`` '' when None)."""
    if origin is None:
        return ["", "", ""]
    return [origin.user, origin.priority, repr(float(origin.share))]
