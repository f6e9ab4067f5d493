"""Validation of alias failover (``failover`` and ``size_max`` of ``:pools:`` entries).

The keys themselves are read with the pool (``_pools.py``: ``failover`` a boolean,
``size_max`` an integer ≥ 0); here the rules between them and the pool's other keys: a pool
with ``failover: true`` must carry an alias; ``size_max`` may not be below the pool's
``size`` (unless it is sized by demand: there it is the ceiling) nor above the largest size
allowed (its provider's ``max_pool_size``, else the global one). Keys that are valid but do
nothing (``size_max`` without ``failover``, a failover pool alone in its aliases) are
reported by ``unacted.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from vmpooler.actors.config._check import Checker
from vmpooler.actors.config.model import GlobalSettings, PoolConfig, ProviderConfig

__all__ = ["check_failover"]


def check_failover(pools: Sequence[tuple[int, PoolConfig]], chk: Checker,
                   settings: GlobalSettings, providers: Mapping[str, ProviderConfig]) -> None:
    """Record the problems of ``failover``/``size_max`` of ``pools`` (each with its index in
    ``:pools:``)."""
    for index, pool in pools:
        path = ("pools", index)
        if pool.failover and not pool.alias:
            chk.fail((*path, "failover"),
                     f"pool {pool.name!r} has failover: true but no alias: failover shares "
                     "capacity between the pools of one alias")
        if pool.size_max is None:
            continue
        if pool.size_max < pool.size and pool.demand is None:
            chk.fail((*path, "size_max"),
                     f"size_max {pool.size_max} is below the pool's size {pool.size}")
        provider = providers.get(pool.provider)
        own = provider.settings.get("max_pool_size") if provider is not None else None
        limit = own if isinstance(own, int) else settings.max_pool_size
        if pool.size_max > limit:
            where = (f"providers.{pool.provider}.max_pool_size" if isinstance(own, int)
                     else "max_pool_size")
            chk.fail((*path, "size_max"),
                     f"size_max {pool.size_max} is above the largest allowed, {limit} ({where})")
