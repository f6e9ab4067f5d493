"""What a ``GET /status`` of a given set of sections reads and shows, worked out once per
configuration: the pools and their names, the queues to count, which pools have a brake, a
failover, a demand sizing or a standby tier, the providers in use, each pool's alias and size
cap.

A :class:`~vmpooler.actors.config.Config` is immutable and a reload replaces it, so a plan
made for one stays true as long as that configuration is the one in force; the per-request
work left is the reading and the sections built from it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vmpooler.actors.config import Config, PoolConfig
from vmpooler.actors.placement.choose import failover_pools
from vmpooler.actors.storage.queues import Queue
from vmpooler.web.resources.status_sections import alias_of, demand_pools, standby_pools

__all__ = ["StatusPlan", "StatusPlans", "plan_for"]


@dataclass(frozen=True, slots=True)
class StatusPlan:
    """The reading and the sections of one set of ``wanted`` sections under ``config``.

    ``pools``, ``names``, ``aliases`` (:func:`alias_of`) and ``caps`` (each pool's
    ``max_pool_size``) are in configuration order; ``queues``, ``last_boot``,
    ``queue_totals``, ``durations``, ``providers``, ``brakes``, ``config_errors``,
    ``failovers``, ``sizings`` and ``standby`` are the arguments of :meth:`StatusStore.status
    <vmpooler.actors.storage.status_store.StatusStore.status>`; ``braked`` and
    ``failing_over`` the pools with a brake or ``failover: true`` (whatever is wanted).
    """

    config: Config
    wanted: frozenset[str]
    pools: tuple[PoolConfig, ...]
    names: tuple[str, ...]
    aliases: tuple[Any, ...]
    caps: tuple[int, ...]
    queues: tuple[Queue, ...]
    last_boot: bool
    queue_totals: bool
    durations: tuple[str, ...]
    providers: tuple[str, ...]
    brakes: tuple[str, ...]
    config_errors: bool
    failovers: tuple[str, ...]
    sizings: tuple[str, ...]
    standby: tuple[str, ...]
    braked: frozenset[str]
    failing_over: frozenset[str]

    def overrides(self, size_overrides: Mapping[str, str]) -> list[str | None]:
        """Each pool's raw size override (None without one), in pool order."""
        return [size_overrides.get(name) for name in self.names]


def plan_for(config: Config, wanted: frozenset[str]) -> StatusPlan:
    """The plan of ``wanted`` (names of ``/status`` sections) under ``config``."""
    pools = config.pools
    queues = [Queue.READY]
    if wanted & {"pools", "queue"}:
        queues += [Queue.RUNNING, Queue.PENDING]
    if "queue" in wanted:
        queues.append(Queue.COMPLETED)
    braked = tuple(pool.name for pool in pools if pool.brake(config.settings)[0] is not None)
    failing_over = tuple(failover_pools(config))
    per_pool = "pools" in wanted
    return StatusPlan(
        config=config, wanted=wanted, pools=pools,
        names=tuple(pool.name for pool in pools),
        aliases=tuple(alias_of(pool) for pool in pools),
        caps=tuple(config.max_pool_size(pool) for pool in pools),
        queues=tuple(queues), last_boot=per_pool, queue_totals="queue" in wanted,
        durations=tuple(kind for kind in ("clone", "boot") if kind in wanted),
        providers=(tuple(sorted({pool.provider for pool in pools}))
                   if "providers" in wanted else ()),
        brakes=braked if per_pool else (), config_errors=per_pool,
        failovers=failing_over if per_pool else (),
        sizings=tuple(demand_pools(config)) if per_pool else (),
        standby=tuple(standby_pools(config)) if per_pool else (),
        braked=frozenset(braked), failing_over=frozenset(failing_over))


class StatusPlans:
    """The plans of the configuration in force, by wanted sections (at most one per subset
    of the section names); made again when the configuration changes. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._config: Config | None = None
        self._plans: dict[frozenset[str], StatusPlan] = {}

    def get(self, config: Config, wanted: frozenset[str]) -> StatusPlan:
        """The plan of ``wanted`` under ``config``."""
        plan = self._plans.get(wanted)
        if plan is not None and plan.config is config:
            return plan
        plan = plan_for(config, wanted)
        with self._lock:
            if self._config is not config:
                self._config, self._plans = config, {}
            self._plans[wanted] = plan
        return plan
