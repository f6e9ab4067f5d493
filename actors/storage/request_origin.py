"""Who asked for an on-demand request (ours, docs/fairness.md), as the create scripts write it."""

from __future__ import annotations

from dataclasses import dataclass

from vmpooler.actors.fairness.names import normal_user_name

__all__ = ["RequestOrigin", "origin_args", "recorded_origin"]


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


def recorded_origin(request_id: str, user: str, priority: str, share: str,
                    token_user: str) -> RequestOrigin:
    """Who asked for a request, from its hash fields (``''``: absent). A request written
    without them (an older writer, Ruby vmpooler) counts as its token's user, else as a user
    of its own (its id), at ``normal`` priority with a share of 1; an unknown priority is
    ``normal`` and a share that is not a positive number is 1. A user is in its normal form
    (:func:`~vmpooler.actors.fairness.names.normal_user_name`: ``Bob`` is ``bob``)."""
    try:
        weight = float(share)
    except ValueError:
        weight = 1.0
    if not (0 < weight < float("inf")):
        weight = 1.0
    return RequestOrigin(normal_user_name(user or token_user) or request_id,
                         priority if priority in ("high", "normal", "low") else "normal",
                         weight)
