"""``FairQueue``: round-robin across keys, first-in first-out within a key.

The on-demand manager queues each request's wanted VMs under the request's id and takes one
VM per turn, so a 50-VM request and a 1-VM request queued behind it share the clone slots:
the small one waits for at most one VM of each request ahead of it, never for all fifty.

Every operation is O(1) in the number of keys (the turn order is an ``OrderedDict``), so
10,000 requests queued at once cost no more per grant than ten.
"""

from __future__ import annotations

import copy
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable, Iterator
from typing import Generic, TypeVar

__all__ = ["FairQueue", "PlayedForward"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class PlayedForward(Generic[K, V]):
    """What a queue's future order says, for any queue with ``pop`` and ``count``: the
    honest waits read positions from it (``actors/ondemand/waits.py``)."""

    def pop(self) -> tuple[K, V] | None:
        raise NotImplementedError

    def count(self, key: K) -> int:
        raise NotImplementedError

    def order(self) -> Iterator[tuple[K, V]]:
        """Every queued ``(key, item)`` in the order :meth:`pop` would hand them out if
        nothing changed meanwhile: pops from a copy (items are not copied when they define
        ``__deepcopy__`` as themselves), so it follows whatever order ``pop`` implements.
        The queue itself is left alone. O(n) to copy, then one pop per item taken."""
        clone = copy.deepcopy(self)
        while (popped := clone.pop()) is not None:
            yield popped

    def ahead_of(self, key: K) -> int:
        """How many items :meth:`pop` hands out before ``key``'s next one (0 when ``key``'s
        is next, or it has nothing queued)."""
        if not self.count(key):
            return 0
        for index, (queued, _item) in enumerate(self.order()):
            if queued == key:
                return index
        return 0


class FairQueue(PlayedForward[K, V]):
    """Not thread-safe: owned by one actor."""

    def __init__(self) -> None:
        self._items: dict[K, deque[V]] = {}
        self._turns: OrderedDict[K, None] = OrderedDict()  # keys in turn order
        self._size = 0

    def extend(self, key: K, items: Iterable[V]) -> None:
        """Queue ``items`` after everything already queued under ``key``."""
        items = list(items)
        if not items:
            return
        if key not in self._items:
            self._items[key] = deque()
            self._turns[key] = None
        self._items[key].extend(items)
        self._size += len(items)

    def push_front(self, key: K, item: V) -> None:
        """Put ``item`` back at the head of ``key``'s queue, and ``key`` first in turn."""
        if key not in self._items:
            self._items[key] = deque()
        self._turns[key] = None
        self._turns.move_to_end(key, last=False)
        self._items[key].appendleft(item)
        self._size += 1

    def pop(self) -> tuple[K, V] | None:
        """The next ``(key, item)`` in round-robin order, or None when empty."""
        if not self._turns:
            return None
        key, _ = self._turns.popitem(last=False)
        queue = self._items[key]
        item = queue.popleft()
        self._size -= 1
        if queue:
            self._turns[key] = None
        else:
            del self._items[key]
        return key, item

    def drop(self, key: K) -> int:
        """Forget everything queued under ``key``; returns how many items were dropped."""
        queue = self._items.pop(key, None)
        if queue is None:
            return 0
        del self._turns[key]
        self._size -= len(queue)
        return len(queue)

    def count(self, key: K) -> int:
        """Items queued under ``key``."""
        queue = self._items.get(key)
        return len(queue) if queue is not None else 0

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return bool(self._turns)
