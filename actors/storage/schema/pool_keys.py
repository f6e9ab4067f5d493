"""Key names of one pool's VM queues (sets) and of the state its pool actor publishes.

Part of :mod:`vmpooler.actors.storage.schema`: import the names from there."""

from __future__ import annotations

from vmpooler.actors.storage.queues import Queue
from vmpooler.actors.storage.schema.prefix import PREFIX as _P

__all__ = [
    "active",
    "brake",
    "completed",
    "config_errors",
    "discovered",
    "empty",
    "failover",
    "held",
    "migrating",
    "pending",
    "queue",
    "ready",
    "running",
    "standby",
]



def pending(pool: str) -> str:
    """Set of VMs being cloned or booting."""
    return f"{_P}pending__{pool}"


def ready(pool: str) -> str:
    """Set of VMs ready for checkout."""
    return f"{_P}ready__{pool}"


def running(pool: str) -> str:
    """Set of checked-out VMs."""
    return f"{_P}running__{pool}"


def completed(pool: str) -> str:
    """Set of VMs waiting to be destroyed."""
    return f"{_P}completed__{pool}"


def discovered(pool: str) -> str:
    """Set of provider VMs found in no queue (destroyed on the next pass unless claimed)."""
    return f"{_P}discovered__{pool}"


def migrating(pool: str) -> str:
    """Set of checked-out VMs the provider may migrate (a side set: they stay in running)."""
    return f"{_P}migrating__{pool}"


def queue(name: Queue, pool: str) -> str:
    """The key of ``pool``'s queue ``name`` (``queue(Queue.READY, p) == ready(p)``)."""
    return f"{_P}{name}__{pool}"


def held(pool: str) -> str:
    """Set of a pool's ready VMs that failed a check while its mass-failure brake was
    engaged (ours): out of ``ready``, so no checkout takes them, and not destroyed; checked
    again when the brake releases."""
    return f"{_P}held__{pool}"


def standby(pool: str) -> str:
    """Set of a pool's standby VMs (ours, docs/sizing.md "Standby tier"): cloned, checked
    ready, then suspended or powered off; out of ``ready``, so no client or key reader of
    vmpooler sees them. Each VM's hash says where it stands (``standby``: ``suspending``,
    ``suspended``, ``resuming`` or ``checking``; ``standby_since``, ``resumed``)."""
    return f"{_P}standby__{pool}"


def active(pool: str) -> str:
    """Hash VM -> checkout time of checked-out VMs."""
    return f"{_P}active__{pool}"


def empty(pool: str) -> str:
    """String ``"true"`` while the pool has no ready VM."""
    return f"{_P}empty__{pool}"


def brake(pool: str) -> str:
    """Hash ``engaged failures held updated`` of a pool's mass-failure brake (ours), written
    by its pool actor when they change, for ``/status``."""
    return f"{_P}brake__{pool}"


def config_errors() -> str:
    """Hash pool -> JSON ``{error_class, message, since, template, clone_target}`` of the
    pools in the configuration-error state (ours: a clone failed permanently); each pool's
    field is written by its pool actor when it enters the state or the error changes and
    deleted when it leaves, for ``/status``."""
    return f"{_P}configerror"


def failover(pool: str) -> str:
    """Hash ``state reason since size ready effective covering updated`` of a pool with
    ``failover: true`` (ours): whether it can deliver and what it takes over of its alias
    siblings, written by its pool actor every cycle behind its lease; expires when no
    manager refreshes it (docs/vsphere.md)."""
    return f"{_P}failover__{pool}"
