"""``FairShareQueue``: strict priority classes, a weighted fair share between users inside
each class, round robin between a user's keys, first-in first-out within a key.

The on-demand manager queues each request's wanted VMs under the request's id, with the
request's :class:`Owner` (its user, priority and the user's share). :meth:`pop` chooses:

1. **The class.** The most urgent priority (``high``, then ``normal``, then ``low``) with
   anything queued. A high item of any user goes before every normal or low item.
2. **The user, by share** (stride scheduling with virtual time). Inside the class each user
   has a *pass*; the user with the lowest pass is served and its pass grows by
   ``1 / share``, so over a long run users get turns in the ratio of their shares. A user
   that starts waiting (or waits again after being idle) starts at the class's virtual time,
   the pass of the last turn given, never below: idleness banks no credit, and a newcomer
   is served at the next turn (ties go to the user that waited first). A user that went
   idle *ahead* of the virtual time keeps its pass (it got more than its share: leaving and
   coming back does not wipe that).
3. **The key** (request) of that user: round robin (:class:`FairQueue`).
4. **The item**: the oldest of that key.

Passes are kept per class: a user's turns in one class do not count in another. A class's
state is forgotten when it empties.

Every operation is O(log users) (a heap of the waiting users; entries of users that
stopped waiting are skipped when met). Not thread-safe: owned by one actor.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from vmpooler.actors.fairness.fair_queue import FairQueue, PlayedForward

__all__ = ["CLASSES", "FairShareQueue", "Owner"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

CLASSES = ("high", "normal", "low")
"""The priority classes, most urgent first; any other priority counts as ``normal``."""


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose a key's items are: the ``user`` they count for, the ``priority`` class they
    wait in, and the user's ``share`` (weight, > 0; a non-positive or non-finite one counts
    as 1)."""

    user: str
    priority: str = "normal"
    share: float = 1.0


def _weight(share: float) -> float:
    return share if share > 0 and share != float("inf") and share == share else 1.0


@dataclass(slots=True)
class _User(Generic[K, V]):
    """A user waiting in one class: its keys, its pass and the heap entry that is current."""

    keys: FairQueue[K, V] = field(default_factory=FairQueue)
    share: float = 1.0
    pass_: float = 0.0
    ticket: int | None = None  # the tie-breaker of its live heap entry (None: not in it)


@dataclass(slots=True)
class _Class(Generic[K, V]):
    """One priority class: its waiting users by pass, and the virtual time."""

    users: dict[str, _User[K, V]] = field(default_factory=dict)
    heap: list[tuple[float, int, str]] = field(default_factory=list)
    idle: dict[str, float] = field(default_factory=dict)  # users gone idle ahead of vtime
    vtime: float = 0.0
    size: int = 0


class FairShareQueue(PlayedForward[K, V]):
    """Items queued under keys, handed out as the module describes."""

    def __init__(self) -> None:
        self._classes: dict[str, _Class[K, V]] = {name: _Class() for name in CLASSES}
        self._owners: dict[K, Owner] = {}
        self._seq = itertools.count(1)  # 0 has no negative: first-made entries need one
        self._size = 0

    # -- queueing -------------------------------------------------------------------------------
    def extend(self, key: K, items: Iterable[V], owner: Owner | None = None) -> None:
        """Queue ``items`` after everything already queued under ``key``. ``owner`` is
        recorded the first time the key is seen and kept until :meth:`drop` (later ones are
        ignored); None makes the key its own user, normal priority, share 1."""
        items = list(items)
        if not items:
            return
        owner = self._owner(key, owner)
        klass = self._classes[owner.priority]
        user = self._join(klass, owner)
        user.keys.extend(key, items)
        klass.size += len(items)
        self._size += len(items)
        self._schedule(klass, owner.user, user)

    def push_front(self, key: K, item: V) -> None:
        """Put ``item`` back at the head of ``key``'s queue and ``key`` first among its
        user's keys; the turn it was popped with is given back to the user."""
        owner = self._owner(key, None)
        klass = self._classes[owner.priority]
        user = self._join(klass, owner)
        user.pass_ = max(klass.vtime, user.pass_ - 1.0 / user.share)
        user.keys.push_front(key, item)
        klass.size += 1
        self._size += 1
        user.ticket = None  # its pass changed: a new entry, first among equal passes
        self._schedule(klass, owner.user, user, first=True)

    def pop(self) -> tuple[K, V] | None:
        """The next ``(key, item)``, or None when empty."""
        for name in CLASSES:
            klass = self._classes[name]
            while klass.heap:
                pass_, ticket, user_name = heapq.heappop(klass.heap)
                user = klass.users.get(user_name)
                if user is None or user.ticket != ticket:
                    continue  # stale: the user left, or has a newer entry
                user.ticket = None
                popped = user.keys.pop()
                assert popped is not None  # a user with a live entry has items
                klass.vtime = max(klass.vtime, pass_)
                user.pass_ = pass_ + 1.0 / user.share
                klass.size -= 1
                self._size -= 1
                if user.keys:
                    self._schedule(klass, user_name, user)
                else:
                    self._leave(klass, user_name, user)
                return popped
        return None

    def drop(self, key: K) -> int:
        """Forget everything queued under ``key``; returns how many items were dropped."""
        owner = self._owners.pop(key, None)
        if owner is None:
            return 0
        klass = self._classes[owner.priority]
        user = klass.users.get(owner.user)
        if user is None:
            return 0
        dropped = user.keys.drop(key)
        klass.size -= dropped
        self._size -= dropped
        if not user.keys:
            self._leave(klass, owner.user, user)
        return dropped

    # -- reading --------------------------------------------------------------------------------
    def count(self, key: K) -> int:
        """Items queued under ``key``."""
        owner = self._owners.get(key)
        if owner is None:
            return 0
        user = self._classes[owner.priority].users.get(owner.user)
        return 0 if user is None else user.keys.count(key)

    def owner(self, key: K) -> Owner | None:
        """The owner ``key`` was queued with (None once dropped, or never queued)."""
        return self._owners.get(key)

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    # -- internals ------------------------------------------------------------------------------
    def _owner(self, key: K, owner: Owner | None) -> Owner:
        known = self._owners.get(key)
        if known is not None:
            return known
        owner = owner or Owner(str(key))
        if owner.priority not in self._classes:
            owner = Owner(owner.user, "normal", owner.share)
        self._owners[key] = owner
        return owner

    def _join(self, klass: _Class[K, V], owner: Owner) -> _User[K, V]:
        """The user's record in the class, made when it starts waiting (at the virtual time,
        or its pass if it left ahead of it)."""
        user = klass.users.get(owner.user)
        if user is None:
            start = max(klass.vtime, klass.idle.pop(owner.user, klass.vtime))
            user = klass.users[owner.user] = _User(share=_weight(owner.share), pass_=start)
        else:
            user.share = _weight(owner.share)  # the latest request's share counts
        return user

    def _schedule(self, klass: _Class[K, V], name: str, user: _User[K, V], *,
                  first: bool = False) -> None:
        """Put the user in the heap unless it is there; ties go to the earlier entry, and
        before all of them to one made ``first``."""
        if user.ticket is None:
            user.ticket = -next(self._seq) if first else next(self._seq)
            heapq.heappush(klass.heap, (user.pass_, user.ticket, name))

    def _leave(self, klass: _Class[K, V], name: str, user: _User[K, V]) -> None:
        """The user has nothing left in the class."""
        del klass.users[name]
        user.ticket = None
        if user.pass_ > klass.vtime:
            klass.idle[name] = user.pass_
        if klass.size == 0:  # nobody waits: forget the class's history
            klass.heap.clear()
            klass.idle.clear()
            klass.vtime = 0.0
