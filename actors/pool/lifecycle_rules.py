"""Pure decisions of the pool lifecycle (reference §4.2–§4.8), free of Redis and actors.

Every function here is deterministic in its arguments, so the rules can be tested alone.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Backoff",
    "LifetimePolicy",
    "PendingVerdict",
    "hostname_mismatch",
    "lifetime_expired",
    "pending_verdict",
    "ready_ttl_expired",
]


@dataclass(frozen=True, slots=True)
class Backoff:
    """vmpooler's polling back-off: ``min``, ``max`` seconds and ``decay`` factor.

    As vmpooler does, ``decay <= 1`` becomes 2.0 and ``max < min`` becomes ``min``.
    """

    min: float
    max: float
    decay: float

    @classmethod
    def of(cls, minimum: float, maximum: float, decay: float) -> Backoff:
        minimum = max(0.05, float(minimum))
        return cls(minimum, max(minimum, float(maximum)), float(decay) if decay > 1 else 2.0)

    def next(self, current: float, *, busy: bool) -> float:
        """The delay after a cycle: ``min`` after a busy one, else ``current × decay`` capped."""
        if busy:
            return self.min
        return min(self.max, max(self.min, current) * self.decay)


class PendingVerdict:
    """What to do with a pending VM that is not ready yet."""

    WAIT = "wait"
    NOTIFY = "notify"
    FAIL = "fail"


def pending_verdict(
    *, now: float, clone_started: float | None, timeout_min: float,
    notification_min: float, already_notified: bool,
) -> str:
    """FAIL past ``timeout`` minutes since the clone began; NOTIFY (once) past
    ``timeout_notification``; otherwise WAIT. A VM with no clone time has timed out."""
    if clone_started is None:
        return PendingVerdict.FAIL
    minutes = (now - clone_started) / 60.0
    if minutes > timeout_min:
        return PendingVerdict.FAIL
    if minutes > notification_min and not already_notified:
        return PendingVerdict.NOTIFY
    return PendingVerdict.WAIT


def ready_ttl_expired(*, now: float, ready_since: float | None, ready_ttl_min: float) -> bool:
    """A ready VM older than the pool's ``ready_ttl`` minutes (or with no ``ready`` time)."""
    if ready_since is None:
        return True
    return (now - ready_since) / 60.0 > ready_ttl_min


def hostname_mismatch(vm: str, reported: str | None) -> bool:
    """The provider reports a non-empty hostname that is not the VM's name."""
    return bool(reported) and reported != vm


@dataclass(frozen=True, slots=True)
class LifetimePolicy:
    """Lifetime of checked-out VMs, in hours: the VM's ``lifetime`` field, else the default."""

    default_hours: int

    def hours(self, field: str | None) -> int:
        """The lifetime that applies; an unparseable field falls back to the default."""
        if field is None or field == "":
            return self.default_hours
        try:
            return int(float(field))
        except ValueError:
            return self.default_hours


def lifetime_expired(*, now: float, checkout: float | None, lifetime_hours: int) -> bool:
    """Whole hours since checkout reached the lifetime (a lifetime of 0 never expires)."""
    if lifetime_hours <= 0 or checkout is None:
        return False
    return int((now - checkout) // 3600) >= lifetime_hours

