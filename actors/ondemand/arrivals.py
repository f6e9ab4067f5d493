"""What the clone queue should expect: the on-demand requests' recent arrivals, learned
online, played forward as the arrivals to come (docs/fairness.md, "Honest waits").

The queue hands out one VM per user per turn (``FairShareQueue``): a request of several VMs
also waits, for its later VMs, for requests that arrive after the estimate is made. The
wait estimates (:mod:`.waits`) therefore play these expected arrivals into the queue too.

:class:`Arrivals` learns, per priority class:

* **the rate**: requests a second, an exponentially decayed count over an exponentially
  decayed watching time (:data:`HALF_LIFE`); until it has watched for a half-life, the time
  counts as one half-life (few arrivals seen early give a low rate, never a wild one);
* **the mix**: the last :data:`KEEP` arrivals, each its user, share and wanted pools.

:meth:`Arrivals.expected` plays the future as the recent past repeats at the learned rate:
the ``j``-th arrival of a class at ``now + j / rate`` (the expected time of the ``j``-th
event of a Poisson process), its VMs and user those of the recent arrivals taken in turn,
oldest first. A user seen more than once among them comes back as that user (its requests
share its turns); a user seen once is taken for a passer-by: each of its repeats is a user
of its own. Deterministic: the same arrivals at the same times give the same stream.

Not thread-safe: owned by the on-demand manager's actor.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from vmpooler.actors.fairness.fair_share import CLASSES, Owner

__all__ = ["HALF_LIFE", "KEEP", "Arrival", "Arrivals"]

HALF_LIFE = 600.0
"""Seconds after which an arrival counts half in the rate: long against a clone (so a rate
rests on a few dozen arrivals), short against a working day's swings."""

KEEP = 32
"""Recent arrivals kept per class, the mix the expected ones repeat."""

_TAU = HALF_LIFE / math.log(2)


@dataclass(frozen=True, slots=True)
class Arrival:
    """One expected request: ``at`` (monotonic seconds), ``owner`` (whose turns it takes)
    and ``pools`` (one entry per VM it waits a clone for)."""

    at: float
    owner: Owner
    pools: tuple[str, ...]


@dataclass(slots=True)
class _Class:
    """One priority class's learning: decayed count and watching time as of ``updated``."""

    count: float = 0.0
    watched: float = 0.0
    updated: float | None = None
    recent: deque[tuple[Owner, tuple[str, ...]]] = field(
        default_factory=lambda: deque(maxlen=KEEP))

    def decay_to(self, now: float) -> None:
        if self.updated is not None and now > self.updated:
            factor = math.exp(-(now - self.updated) / _TAU)
            self.count *= factor
            self.watched = self.watched * factor + _TAU * (1 - factor)
        self.updated = now if self.updated is None else max(self.updated, now)

    def rate(self, now: float) -> float:
        self.decay_to(now)
        return self.count / max(self.watched, HALF_LIFE)


class Arrivals:
    """The requests' arrivals as :mod:`this module <.arrivals>` describes. ``start``: when
    watching began (monotonic seconds)."""

    def __init__(self, *, start: float) -> None:
        self._classes = {name: _Class(updated=start) for name in CLASSES}
        self._seen: set[str] = set()

    def arrived(self, request_id: str, pools: tuple[str, ...], owner: Owner, *,
                at: float) -> None:
        """A request asked for clones of ``pools`` (one entry per VM). Only a request's
        first ask counts (a replacement VM, or a request taken over from another manager
        asking again, is no arrival); an empty ask counts for nothing."""
        if not pools or request_id in self._seen:
            return
        self._seen.add(request_id)
        klass = self._classes.get(owner.priority, self._classes["normal"])
        klass.decay_to(at)
        klass.count += 1.0
        own = owner.user == request_id  # a user of its own: a passer-by by definition
        klass.recent.append((Owner("" if own else owner.user, owner.priority, owner.share),
                             pools))

    def forget(self, keep: set[str]) -> None:
        """Forget the requests not in ``keep`` (those still running) as seen."""
        self._seen &= keep

    def rate(self, priority: str, *, now: float) -> float:
        """Requests a second of a class, as learned by ``now``."""
        return self._classes[priority].rate(now)

    def expected(self, *, now: float) -> Iterator[Arrival]:
        """The arrivals to expect after ``now``, soonest first, every class merged; endless
        while any class has a rate (the caller stops taking)."""
        streams: list[tuple[float, int, str, int]] = []  # (at, class index, class, j)
        plans: dict[str, tuple[float, list[tuple[Owner, tuple[str, ...]]], set[str]]] = {}
        for index, (name, klass) in enumerate(self._classes.items()):
            rate = klass.rate(now)
            if rate <= 0 or not klass.recent:
                continue
            users = Counter(o.user for o, _ in klass.recent if o.user)
            plans[name] = (rate, list(klass.recent), {u for u, n in users.items() if n > 1})
            streams.append((now + 1 / rate, index, name, 1))
        heapq.heapify(streams)
        while streams:
            at, index, name, j = heapq.heappop(streams)
            rate, recent, recurring = plans[name]
            owner, pools = recent[(j - 1) % len(recent)]
            if owner.user not in recurring:
                owner = Owner(f"\0foreseen:{name}:{j}", owner.priority, owner.share)
            yield Arrival(at, owner, pools)
            heapq.heappush(streams, (now + (j + 1) / rate, index, name, j + 1))
