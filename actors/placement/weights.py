"""``backend_weight``: the weight of a pool's clone target, and vmpooler's weighted draw of one
backend among several. Pure: the random source is the caller's, and every draw makes the
same calls on it in the same order (so a seeded source gives the same pools)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from vmpooler.actors.config import Config

__all__ = ["backend_weight", "draw_first", "target_weight", "weighted_draw"]


def target_weight(config: Config, clone_target: str | None) -> int | None:
    """The ``backend_weight`` of ``clone_target`` (the global ``clone_target`` when None), or
    None when there is no target or no weight for it."""
    target = clone_target or config.settings.clone_target
    return None if target is None else config.settings.backend_weight.get(target)


def backend_weight(config: Config, name: str) -> int | None:
    """The ``backend_weight`` of the pool's clone target, or None (unknown pool, no target or
    no weight for it)."""
    try:
        pool = config.pool(name)
    except KeyError:
        return None
    return target_weight(config, pool.clone_target)


def weighted_draw(config: Config, rng: random.Random, backends: Sequence[str]) -> str | None:
    """One of ``backends`` drawn by ``backend_weight`` (a weight of 0 never wins), or None
    when weights are not configured for every one of them or all are 0. Calls
    ``rng.random()`` once when it draws, never otherwise."""
    if not config.settings.backend_weight:
        return None
    weights = [backend_weight(config, b) for b in backends]
    if None in weights:
        return None
    positive = [(b, w) for b, w in zip(backends, weights, strict=True) if w and w > 0]
    total = sum(w for _, w in positive)
    if total <= 0:
        return None
    point = rng.random() * total
    for backend, weight in positive:
        point -= weight
        if point < 0:
            return backend
    return positive[-1][0]


def draw_first(config: Config, rng: random.Random, backends: Sequence[str]) -> list[str]:
    """``backends`` with one drawn to the front (vmpooler's choice of backend): by weight
    (:func:`weighted_draw`), else uniformly (``rng.choice``); the others keep their order
    behind it as fallbacks. ``backends`` must not be empty."""
    ordered = list(backends)
    first = weighted_draw(config, rng, ordered) or rng.choice(ordered)
    ordered.remove(first)
    ordered.insert(0, first)
    return ordered
