"""Which pool serves a requested name (a pool or an alias): vmpooler's choice for a checkout
(``fetch_single_vm``) and for an on-demand request (``evaluate_template_aliases``), with
alias failover's preference for the pools that can deliver now.

Pure: the configuration, the random source and the health reader (:class:`Health`, e.g.
:class:`~vmpooler.actors.placement.health.BackendHealth`) are the caller's; the health reader
is asked only for a name served by a pool with ``failover: true``, so for every other name
the choice is exactly vmpooler's and reads nothing. Every function makes the same calls on
the random source in the same order for the same input (a seeded source gives the same
pools).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from vmpooler.actors.config import Config
from vmpooler.actors.placement.weights import draw_first, weighted_draw
from vmpooler.actors.storage.request_records import Entry

__all__ = [
    "Health",
    "Names",
    "checkout_candidates",
    "choose_pool",
    "failover_names",
    "failover_pools",
    "names_of",
    "ondemand_candidates",
    "ondemand_plan",
]


class Health(Protocol):
    """What placement asks of alias failover's published health."""

    def undeliverable(self, config: Config, pools: Sequence[str]) -> frozenset[str]:
        """The pools of ``pools`` that cannot deliver now; may raise ``redis.RedisError``."""
        ...


def failover_pools(config: Config) -> list[str]:
    """The pools with ``failover: true``, in configuration order."""
    return [pool.name for pool in config.pools if pool.failover]


def failover_names(config: Config) -> frozenset[str]:
    """The names a client may ask for (pools and aliases) whose candidate pools include a
    pool with ``failover: true``."""
    opted = set(failover_pools(config))
    names: set[str] = set()
    for alias, pools in config.aliases.items():
        if opted & set(pools):
            names.add(alias)
            names.update(p for p in pools if p == alias)
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class Names:
    """What placement looks up in a :class:`Config`, worked out once per ``Config`` (it is
    immutable; a reload makes a new one): pool names, the names a client may request (pools
    and aliases: vmpooler's ``pool_names``), alias -> pools, and the names served by a pool
    with ``failover: true``."""

    config: Config
    pools: frozenset[str]
    requestable: frozenset[str]
    aliases: Mapping[str, tuple[str, ...]]
    failover: frozenset[str]


_last_names: list[Names] = []  # the index of the Config seen last (one entry)


def names_of(config: Config) -> Names:
    """The :class:`Names` of ``config`` (the last one's kept: the same object while the
    configuration is not reloaded). Thread-safe (a race builds it twice, equal)."""
    cached = _last_names[0] if _last_names else None
    if cached is not None and cached.config is config:
        return cached
    aliases = config.aliases
    names = Names(config=config, pools=frozenset(config.pool_names),
                  requestable=frozenset(config.pool_names) | frozenset(aliases),
                  aliases=aliases, failover=failover_names(config))
    _last_names[:] = [names]
    return names


def _deliverable_first(config: Config, health: Health, found: list[str],
                       ) -> list[str]:
    """``found`` with the pools that cannot deliver now moved last (order kept otherwise)."""
    down = health.undeliverable(config, found)
    if not down:
        return found
    return [b for b in found if b not in down] + [b for b in found if b in down]


def checkout_candidates(config: Config, rng: random.Random, health: Health,
                        name: str) -> list[str]:
    """Pools that may serve one checked-out unit of ``name``, best first (vmpooler's
    ``fetch_single_vm``).

    Candidates are ``name`` and its alias targets. When aliases are configured at all, one
    candidate is drawn to the front (:func:`~.weights.draw_first`: by weight when every
    candidate's clone target has a ``backend_weight``, else uniformly), the others follow as
    fallbacks. Names that are not pools are dropped. For a name served by a pool with
    ``failover: true`` (ours), the pools that cannot deliver now go last, so they serve only
    when no other candidate has a ready VM."""
    names = names_of(config)
    backends = [name]
    if names.aliases:
        backends += [p for p in names.aliases.get(name, ()) if p not in backends]
        backends = draw_first(config, rng, backends)
    found = [b for b in backends if b in names.pools]
    if name in names.failover and len(found) > 1:
        return _deliverable_first(config, health, found)
    return found


def ondemand_candidates(config: Config, name: str) -> list[str]:
    """The pools that may serve an on-demand ``name``: itself if it is a configured pool, then
    the pools it is an alias of (vmpooler's ``evaluate_template_aliases``)."""
    found = [name] if name in config.pool_names else []
    found += [p for p in config.aliases.get(name, ()) if p not in found]
    return found


def choose_pool(config: Config, rng: random.Random, name: str,
                avoid: frozenset[str] = frozenset()) -> str | None:
    """The pool one on-demand instance of ``name`` is cloned in; None if ``name`` has no pool.

    With more than one candidate and a ``backend_weight`` for the clone target of every one,
    the draw is weighted (a weight of 0 never wins; all 0 → uniform); otherwise it is
    uniform. Unlike :func:`checkout_candidates`, an alias that is not itself a pool is not a
    candidate, so weights apply to aliases too, as in vmpooler. The pools of ``avoid`` (those
    that cannot deliver now) are left out unless no other candidate is left."""
    backends = ondemand_candidates(config, name)
    if not backends:
        return None
    backends = [b for b in backends if b not in avoid] or backends
    drawn = weighted_draw(config, rng, backends) if len(backends) > 1 else None
    return drawn or rng.choice(backends)


def ondemand_plan(config: Config, rng: random.Random, health: Health,
                  counts: Mapping[str, int]) -> list[Entry]:
    """One pool drawn per instance (:func:`choose_pool`), counted per (name, pool) in order
    of first draw; never an entry with a count of 0. For a name served by a pool with
    ``failover: true`` (ours) the draws leave out the pools that cannot deliver now (one
    health read per name), unless none can."""
    entries: list[Entry] = []
    served_by_failover = names_of(config).failover
    for name, count in counts.items():
        drawn: dict[str, int] = {}
        avoid: frozenset[str] = frozenset()
        if count and name in served_by_failover:
            avoid = health.undeliverable(config, ondemand_candidates(config, name))
        for _ in range(count):
            pool = choose_pool(config, rng, name, avoid)
            if pool is not None:
                drawn[pool] = drawn.get(pool, 0) + 1
        entries += [Entry(alias=name, pool=pool, count=n) for pool, n in drawn.items()]
    return entries
