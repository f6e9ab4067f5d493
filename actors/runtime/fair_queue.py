"""``FairQueue``: round-robin across keys, first-in first-out within a key.

The on-demand manager queues each request's wanted VMs under the request's id and takes one
VM per turn, so a 50-VM request and a 1-VM request queued behind it share the clone slots:
the small one waits for at most one VM of each request ahead of it, never for all fifty.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

__all__ = ["FairQueue"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class FairQueue(Generic[K, V]):
    """Not thread-safe: owned by one actor."""

    def __init__(self) -> None:
        self._items: dict[K, deque[V]] = {}
        self._turns: deque[K] = deque()

    def extend(self, key: K, items: Iterable[V]) -> None:
        """Queue ``items`` after everything already queued under ``key``."""
        items = list(items)
        if not items:
            return
        if key not in self._items:
            self._items[key] = deque()
            self._turns.append(key)
        self._items[key].extend(items)

    def push_front(self, key: K, item: V) -> None:
        """Put ``item`` back at the head of ``key``'s queue, and ``key`` first in turn."""
        if key not in self._items:
            self._items[key] = deque()
        else:
            self._turns.remove(key)
        self._turns.appendleft(key)
        self._items[key].appendleft(item)

    def pop(self) -> tuple[K, V] | None:
        """The next ``(key, item)`` in round-robin order, or None when empty."""
        if not self._turns:
            return None
        key = self._turns.popleft()
        queue = self._items[key]
        item = queue.popleft()
        if queue:
            self._turns.append(key)
        else:
            del self._items[key]
        return key, item

    def drop(self, key: K) -> int:
        """Forget everything queued under ``key``; returns how many items were dropped."""
        queue = self._items.pop(key, None)
        if queue is None:
            return 0
        self._turns.remove(key)
        return len(queue)

    def count(self, key: K) -> int:
        """Items queued under ``key``."""
        queue = self._items.get(key)
        return len(queue) if queue is not None else 0

    def __len__(self) -> int:
        return sum(len(q) for q in self._items.values())

    def __bool__(self) -> bool:
        return bool(self._turns)
