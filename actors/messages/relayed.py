"""The envelope of a message that came from another manager: :class:`Relayed`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Relayed"]


@dataclass(frozen=True, slots=True)
class Relayed:
    """Relay → an actor of this manager: ``message`` was sent by an actor of another
    manager, and has been relayed ``hops`` times (0: by a manager of a release that did not
    count them and did not mark it as passed on). A supervised actor unwraps it before its
    ``handle``; one that passes messages on to other managers (the router refuses to relay a
    message that already hopped once) or that treats another manager's message apart
    overrides ``handle_relayed``."""

    message: Any
    hops: int = 1
