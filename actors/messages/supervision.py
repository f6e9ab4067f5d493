"""Between supervised actors, the runtime and their supervisors."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "ActorCrashed",
    "ActorStopped",
    "RestartActor",
    "StopSupervising",
]


@dataclass(frozen=True, slots=True)
class ActorCrashed:
    """A supervised actor → supervisor: it failed and has stopped."""

    name: str
    error: str
    error_class: str


@dataclass(frozen=True, slots=True)
class RestartActor:
    """Scheduler → supervisor: the back-off for ``name`` is over, start it again."""

    name: str
    attempt: int = field(default=0)


@dataclass(frozen=True, slots=True)
class ActorStopped:
    """Runtime → watcher (``runtime.pooled.notify_when_stopped``): the pooled actor ``urn``,
    registered as ``name``, has stopped and will handle no more messages. The on-demand
    manager waits for it before it starts that request's next actor."""

    name: str
    urn: str


@dataclass(frozen=True, slots=True)
class StopSupervising:
    """System → supervisor, at shutdown: restart nothing from now on (children are being
    stopped; a crash or a pending restart must not bring one back)."""
