"""One ``:pools:`` entry: :class:`PoolConfig`, with its demand sizing and standby tier
(part of :mod:`vmpooler.actors.config.model`: import the names from there)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from vmpooler.actors.config._data import empty_mapping
from vmpooler.actors.config.model_settings import GlobalSettings
from vmpooler.actors.sizing.schedule import Window

__all__ = ["STANDBY_STATES", "DemandSizing", "PoolConfig", "StandbyTier"]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class DemandSizing:
    """A pool sized by demand (``sizing: demand``): it keeps between ``size_min`` and
    ``size_max`` ready VMs, as many as its checkout history calls for to serve
    ``target_warm_hit`` (0..1, exclusive) of its checkouts from ready VMs; each ``schedule``
    window covering the time sets a floor (the largest wins)."""

    size_min: int
    size_max: int
    target_warm_hit: float
    schedule: tuple[Window, ...] = ()


STANDBY_STATES = ("suspended", "powered_off")
"""The values of ``standby_state``: how a standby VM waits."""


@dataclass(frozen=True, slots=True)
class StandbyTier:
    """A pool's standby tier (``standby`` not 0): ``count`` VMs (None: ``auto``, chosen by
    the demand sizer) cloned, checked ready, then put in ``state`` (one of
    :data:`STANDBY_STATES`), resumed when the ready VMs run short, at most
    ``resume_limit`` at once, and recycled after ``ttl`` seconds in standby. ``cost`` is
    the price of a standby VM-hour against a running one."""

    count: int | None
    state: str = "suspended"
    ttl: float = 86400.0
    resume_limit: int = 10
    cost: float = 0.1

    @property
    def auto(self) -> bool:
        """Whether the demand sizer chooses the count."""
        return self.count is None


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """One entry of ``:pools:``. ``None`` fields fall back to the global setting.

    ``domain`` comes from the pool's ``dns_plugin`` entry in ``:dns_configs:``; a pool without
    ``dns_plugin`` has ``domain`` None and its VMs' FQDN is the bare hostname.
    ``raw`` holds every key of the pool as written (unknown keys are carried through).
    """

    name: str
    size: int
    template: str
    ready_ttl: int  # minutes
    provider: str = "dummy"
    alias: tuple[str, ...] = ()
    dns_plugin: str | None = None
    domain: str | None = None
    clone_target: str | None = None
    timeout: int | None = None  # minutes
    timeout_notification: int | None = None  # minutes
    check_loop_delay_min: float | None = None  # seconds
    check_loop_delay_max: float | None = None  # seconds
    check_loop_delay_decay: float | None = None
    check_hostname_for_mismatch: bool | None = None
    max_unhealthy: float | None = None  # share 0..1; None: the global one
    max_unhealthy_window: float | None = None  # seconds; None: the global one
    # Alias failover (ours, docs/vsphere.md): the pool grows by the share of a sibling of its
    # aliases that cannot deliver, up to ``size_max`` (None: its size plus the largest
    # sibling's, see actors/placement/failover.py).
    failover: bool = False
    size_max: int | None = None
    # Demand sizing (ours, docs/sizing.md): None for a pool of fixed ``size``.
    demand: DemandSizing | None = None
    # Standby tier (ours, docs/sizing.md): None for a pool without one.
    standby: StandbyTier | None = None
    # On-demand requests take this pool's ready VMs first (ours, docs/fairness.md); None:
    # the global ``ondemand_from_ready``.
    ondemand_from_ready: bool | None = None
    raw: Mapping[str, Any] = field(default_factory=empty_mapping)

    def loop_delays(self, settings: GlobalSettings) -> tuple[float, float, float]:
        """Effective ``(min, max, decay)`` back-off for this pool's check loop, in seconds.

        Pool values win over the global ones (vmpooler ignored the global ones for pools; we
        do not). Clamped like vmpooler: max below min becomes min, decay <= 1 becomes 2.0.
        """
        low = _first(self.check_loop_delay_min, settings.check_loop_delay_min)
        high = max(low, _first(self.check_loop_delay_max, settings.check_loop_delay_max))
        decay = _first(self.check_loop_delay_decay, settings.check_loop_delay_decay)
        return low, high, decay if decay > 1 else 2.0


    def from_ready(self, settings: GlobalSettings) -> bool:
        """Whether on-demand requests take this pool's ready VMs before cloning."""
        return _first(self.ondemand_from_ready, settings.ondemand_from_ready)

    def brake(self, settings: GlobalSettings) -> tuple[float | None, float]:
        """Effective ``(max_unhealthy, max_unhealthy_window)`` of the mass-failure brake: the
        pool's values, else the global ones. The share is None when the brake is off (unset
        or 100%)."""
        share = _first(self.max_unhealthy, settings.max_unhealthy)
        window = _first(self.max_unhealthy_window, settings.max_unhealthy_window)
        return (None if share is None or share >= 1.0 else share), window


def _first(value: _T | None, fallback: _T) -> _T:
    return fallback if value is None else value
