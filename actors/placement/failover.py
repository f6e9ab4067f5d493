"""Alias failover, the pure part: which pools of an alias cannot deliver, and how much of
their share each healthy sibling takes over (docs/vsphere.md, "Several vCenters behind one
pool name").

Nothing here touches Redis, a clock or an actor: :class:`HealthTracker` turns what one pool
saw in its cycle into its own :class:`Health`, and :func:`plan` turns every opted-in
member's published state into the VMs each healthy member adds to its size. Every manager
computes :func:`plan` from the same published states, so all come to the same split.

The rule, in short:

* a member is ``down`` after ``threshold`` failed inventories or clones in a row, or at once
  when its provider's circuit breaker refuses its inventory; ``recovering`` once its
  inventory answers again and no clone failure streak is left; ``ok`` once it holds its
  size in ready VMs again;
* a member that is not ``ok`` owes ``size − ready`` (its published ``ready`` is 0 while its
  inventory fails: those VMs cannot be trusted);
* what a member owes is split over the ``ok`` members that share an alias with it, by
  ``backend_weight`` when every one of them has a weight, else evenly; each takes at most
  ``ceiling − size``, and what one cannot take goes to the others (so a weight of 0 takes
  only what the weighted ones cannot, or an even part when all are 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = [
    "Cover",
    "Health",
    "HealthTracker",
    "Member",
    "State",
    "apportion",
    "ceiling_of",
    "plan",
]


class State(StrEnum):
    """A member's ability to deliver, as it publishes it."""

    OK = "ok"
    DOWN = "down"
    RECOVERING = "recovering"


@dataclass(frozen=True, slots=True)
class Health:
    """One pool's own verdict: its state, why (``breaker_open``, ``inventory_failed``,
    ``clone_failed``; None when ``ok``) and how many of its ready VMs count (0 while its
    inventory fails)."""

    state: State
    reason: str | None = None
    deliverable: int = 0


@dataclass
class HealthTracker:
    """A pool's own state from one cycle to the next (used on its actor's thread only).

    ``threshold`` is the number of failed inventories or clones in a row that make it
    ``down``. Callers rely on: :meth:`observe` is the only transition, and a ``down``
    member becomes ``ok`` only through ``recovering`` (a full pool passes both at once).
    """

    threshold: int
    state: State = State.OK
    reason: str | None = None

    def observe(self, *, inventory_ok: bool, inventory_failures: int, breaker_open: bool,
                clone_failures: int, ready: int, size: int) -> Health:
        """The pool's state after a cycle: ``inventory_ok`` (its listing answered),
        ``inventory_failures`` (failed listings in a row), ``breaker_open`` (the last
        listing was refused by its provider's open breaker), ``clone_failures`` (failed
        clones in a row), ``ready`` VMs it holds and its ``size``."""
        reason: str | None = None
        if breaker_open:
            reason = "breaker_open"
        elif inventory_failures >= self.threshold:
            reason = "inventory_failed"
        elif clone_failures >= self.threshold:
            reason = "clone_failed"
        if reason is not None:
            self.state, self.reason = State.DOWN, reason
        elif self.state is State.DOWN and inventory_ok:
            self.state, self.reason = State.RECOVERING, None
        if self.state is State.RECOVERING and ready >= size:
            self.state = State.OK
        deliverable = ready if inventory_ok else 0
        return Health(self.state, self.reason if self.state is State.DOWN else None,
                      deliverable)


@dataclass(frozen=True, slots=True)
class Member:
    """One opted-in pool as the plan sees it.

    ``size`` is its size in effect (configured, or its size override), ``ready`` the ready
    VMs it counts (published), ``weight`` the ``backend_weight`` of its clone target (None:
    none), ``ceiling`` its ``size_max`` (None: the default, :func:`ceiling_of`),
    ``aliases`` the alias names it carries.
    """

    name: str
    size: int
    aliases: frozenset[str]
    state: State = State.OK
    ready: int = 0
    weight: int | None = None
    ceiling: int | None = None

    @property
    def owed(self) -> int:
        """The VMs this member cannot deliver now: 0 when ``ok``."""
        return 0 if self.state is State.OK else max(0, self.size - self.ready)


@dataclass(frozen=True, slots=True)
class Cover:
    """What one member takes over: ``extra`` VMs on top of its size, ``by_pool`` of them
    for each sibling (only siblings it takes something of)."""

    extra: int = 0
    by_pool: Mapping[str, int] = field(default_factory=dict)


def _siblings(member: Member, members: Sequence[Member]) -> list[Member]:
    return [m for m in members if m.name != member.name and m.aliases & member.aliases]


def ceiling_of(member: Member, members: Sequence[Member]) -> int:
    """The most ``member`` may grow to: its ``ceiling`` when set, else its size plus the
    largest size among its siblings (so one member alone can stand in for any one of them).
    Never below its size."""
    if member.ceiling is not None:
        return max(member.size, member.ceiling)
    sizes = [m.size for m in _siblings(member, members)]
    return member.size + (max(sizes) if sizes else 0)


def apportion(amount: int, weights: Sequence[int]) -> list[int]:
    """``amount`` split in whole parts proportional to ``weights`` (largest remainder; ties
    to the earlier one). All-zero weights split evenly; the parts sum to ``amount``."""
    if amount <= 0 or not weights:
        return [0] * len(weights)
    if sum(weights) <= 0:
        weights = [1] * len(weights)
    total = sum(weights)
    exact = [amount * w / total for w in weights]
    parts = [int(x) for x in exact]
    left = amount - sum(parts)
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[:left]:
        parts[i] += 1
    return parts


def _weights(takers: Sequence[Member]) -> list[int]:
    """``backend_weight`` of each taker when every one has one, else equal weights."""
    if any(t.weight is None for t in takers):
        return [1] * len(takers)
    return [max(0, t.weight or 0) for t in takers]


def plan(members: Iterable[Member]) -> dict[str, Cover]:
    """What each member takes over of its siblings that are not ``ok``: a :class:`Cover`
    for every member (``extra`` 0 for those that take nothing). Deterministic: members are
    taken in name order, whatever order they come in."""
    ordered = sorted(members, key=lambda m: m.name)
    room = {m.name: ceiling_of(m, ordered) - m.size
            for m in ordered if m.state is State.OK}
    taken: dict[str, dict[str, int]] = {m.name: {} for m in ordered}
    for owing in ordered:
        amount = owing.owed
        takers = [m for m in _siblings(owing, ordered) if m.name in room]
        while amount > 0:
            able = [t for t in takers if room[t.name] > 0]
            if not able:
                break  # every taker is at its ceiling: the rest is not covered
            for taker, part in zip(able, apportion(amount, _weights(able)), strict=True):
                part = min(part, room[taker.name])
                if part > 0:
                    room[taker.name] -= part
                    taken[taker.name][owing.name] = taken[taker.name].get(owing.name, 0) + part
                    amount -= part
    return {name: Cover(sum(by.values()), dict(by)) for name, by in taken.items()}
