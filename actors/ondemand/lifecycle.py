"""The life of one on-demand request's actor as an explicit state: :class:`Phase`, the
transitions it allows (:data:`TRANSITIONS`, the one place they are written); and its
timings: the back-off after a Redis error, the interval between checks of its VMs.

::

    CLAIMING ──► ACTIVE ──► GRACE
        │          │          │
        └──────────┴──────────┴──► FINISHED

* ``CLAIMING``: the start's claim has not gone through yet; messages wait, in order.
* ``ACTIVE``: the request asks for the VMs it misses, attaches ready ones, retries failures.
* ``GRACE``: the deadline passed with VMs on their way and ``ondemand_request_grace`` set:
  no new clone, only those VMs may still complete the request.
* ``FINISHED``: ready, failed, deleted, gone, or handed to another manager: every later
  message is dropped.

A transition not in the table raises :class:`IllegalTransitionError` (the actor crashes and its
supervisor rebuilds it from Redis), so a guard that lets a message through in the wrong
phase is loud instead of silently resurrecting a finished request.
"""

from __future__ import annotations

from enum import Enum

from vmpooler.actors.config import GlobalSettings
from vmpooler.actors.runtime.transitions import IllegalTransitionError
from vmpooler.actors.runtime.transitions import check_transition as check_table

__all__ = ["OUTCOMES", "TRANSITIONS", "VERIFY_MIN", "IllegalTransitionError", "Phase",
           "backoff", "check_transition", "ttl_reason", "verify_interval"]


class Phase(Enum):
    """Where a request actor is in its life (see the module's picture)."""

    CLAIMING = "claiming"
    ACTIVE = "active"
    GRACE = "grace"
    FINISHED = "finished"


TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.CLAIMING: frozenset({Phase.ACTIVE, Phase.FINISHED}),
    Phase.ACTIVE: frozenset({Phase.GRACE, Phase.FINISHED}),
    Phase.GRACE: frozenset({Phase.FINISHED}),
    Phase.FINISHED: frozenset(),
}
"""Every allowed move: ``TRANSITIONS[old]`` holds the phases ``old`` may become."""


def check_transition(request_id: str, old: Phase, new: Phase) -> Phase:
    """Return ``new`` if :data:`TRANSITIONS` allows ``old -> new``; raise
    :class:`~vmpooler.actors.runtime.transitions.IllegalTransitionError` (its message:
    ``request '<id>': illegal transition <old> -> <new>``) otherwise."""
    return check_table(TRANSITIONS, f"request '{request_id}'", old, new)


BACKOFF_MAX = 30.0
"""Seconds a request actor waits at most before it handles a message again after a Redis
error."""


def backoff(outage: int) -> float:
    """Seconds to wait after the ``outage``-th consecutive Redis error (1, 2, 4, … up to
    :data:`BACKOFF_MAX`); ``outage`` counts from 1."""
    return min(BACKOFF_MAX, 2.0 ** (max(1, outage) - 1))


VERIFY_MIN = 5.0
"""Seconds between two checks that the VMs on their way are still pending, at least
(``check_loop_delay_max``, at most a minute)."""


def verify_interval(settings: GlobalSettings) -> float:
    """Seconds between two checks of a request's VMs on their way: ``check_loop_delay_max``,
    between :data:`VERIFY_MIN` and a minute."""
    return min(60.0, max(VERIFY_MIN, float(settings.check_loop_delay_max)))


def ttl_reason(settings: GlobalSettings) -> str:
    """The failure reason of a request that reached its deadline (vmpooler's words)."""
    return (f"The request exceeded ondemand_request_ttl of "
            f"{settings.ondemand_request_ttl} minutes")


OUTCOMES = frozenset({"ready", "failed", "deleted"})
"""The ``result`` tag values of ``ondemand.outcome``: the terminal state a request actor saw
the request reach (once per request; a request found already finished at start is not
counted)."""
