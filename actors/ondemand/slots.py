"""``CloneSlots``: the on-demand manager's fair share of ``ondemand_clone_limit``.

Wanted VMs queue per request in a :class:`FairShareQueue` (strict priority classes, a
weighted fair share between users inside each, round robin between a user's requests:
docs/fairness.md) and are handed out while ``tasks__ondemandclone`` (counted in Redis by
the pool actors' clone scripts) plus grants not yet answered stays under the limit. A grant
goes to the pool actor as :class:`CloneForRequest` carrying the request's fence; its answer
(:class:`RequestCloneAnswered`), a freed slot or the sweep lets the next one go. Owned by
the manager's actor; not thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import pykka
import redis

from vmpooler.actors.cluster.remote import Remote
from vmpooler.actors.cluster.request_leases import RequestOwnership
from vmpooler.actors.messages import CloneForRequest, RequestCloneAnswered
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.runtime.clock import Clock
from vmpooler.actors.runtime.fair_share import FairShareQueue, Owner
from vmpooler.actors.runtime.supervisor import ActorDirectory
from vmpooler.actors.storage.redis_errors import redis_failure
from vmpooler.actors.storage.request_store import RequestStore

__all__ = ["GRANT_LOST_AFTER", "CloneSlots", "Grant", "Want"]

log = logging.getLogger(__name__)

GRANT_LOST_AFTER = 30.0  # s without an answer from the pool actor (it answers at once): regrant


@dataclass(frozen=True, slots=True)
class Want:
    """One VM a request waits a clone slot for: ``wanted_at`` (monotonic) is when the
    request first asked, kept across regrants so ``clone.queue_wait`` measures the whole
    wait."""

    alias: str
    pool: str
    wanted_at: float

    def __deepcopy__(self, memo: dict[int, object]) -> Want:
        return self  # immutable: a copy of the queue (FairQueue.order) shares it


@dataclass(frozen=True, slots=True)
class Grant:
    """A slot handed to ``request_id`` for ``want`` at ``granted_at`` (monotonic), not yet
    answered by the pool actor."""

    request_id: str
    want: Want
    granted_at: float


class CloneSlots:
    """Grants clone slots to the requests that want VMs. ``runs(request_id)`` says whether
    the manager still runs a request (a grant given back for one it no longer runs is
    dropped)."""

    def __init__(
        self,
        *,
        store: RequestStore,
        directory: ActorDirectory,
        clone_limit: int,
        clock: Clock,
        metrics: Metrics,
        remote: Remote,
        leases: RequestOwnership,
        runs: Callable[[str], bool],
    ) -> None:
        self.store = store
        self.directory = directory
        self.clone_limit = clone_limit
        self.clock = clock
        self.metrics = metrics
        self.remote = remote
        self.leases = leases
        self.runs = runs
        self.wants: FairShareQueue[str, Want] = FairShareQueue()  # request -> its VMs
        self.granted: dict[int, Grant] = {}  # grant number -> the grant
        self.grants = 0
        self.blocked = False  # the last grant found no free slot: wait for one to be freed
        # request -> (pool, monotonic start) of its clones started since it was granted
        # (what the wait estimates start from; trimmed by the estimates, dropped with it)
        self.cloning: dict[str, list[tuple[str, float]]] = {}

    def want(self, request_id: str, wants: tuple[tuple[str, str], ...],
             owner: Owner | None = None) -> None:
        """The request wants these ``(alias, pool)`` VMs too; none: it withdraws its
        queued ones. ``owner``: who asked (None: the request is a user of its own, normal
        priority, share 1). Grants what it can."""
        if wants:
            at = self.clock.monotonic()
            self.wants.extend(request_id, [Want(alias, pool, at) for alias, pool in wants],
                              owner)
        else:
            self.wants.drop(request_id)
        self.grant()

    def drop(self, request_id: str) -> None:
        """Forget what the request wanted (grants already made stay counted)."""
        self.wants.drop(request_id)
        self.cloning.pop(request_id, None)

    def ahead_of(self, request_id: str) -> int:
        """How many VMs are granted before the request's next one, in the queue's order (0
        when its next one goes first, or it has none queued)."""
        return self.wants.ahead_of(request_id)

    def freed(self) -> None:
        """A slot may be free (a clone finished, or the sweep): grant again."""
        self.blocked = False
        self.grant()

    def grant(self) -> None:
        """Hand out free slots, in the order of :attr:`wants`."""
        if self.blocked or not self.wants:
            return
        try:
            in_use = self.store.ondemand_clones()
        except redis.RedisError as exc:
            log.error("[!] [ondemand] %s: %s; clones wait for the next sweep",
                      redis_failure(exc), exc)
            self.blocked = True
            return
        free = self.clone_limit - in_use - len(self.granted)
        if free <= 0:
            # Grants still unanswered re-run this when their answer comes (their slots may
            # be counted twice until then). Without any, only a freed slot
            # (RequestSlotFreed) or the sweep makes room: stop reading the counter.
            self.blocked = not self.granted
            return
        while free > 0 and self.wants:
            popped = self.wants.pop()
            if popped is None:
                break
            request_id, want = popped
            ref = self.directory.get(f"pool:{want.pool}")
            if ref is None:  # the pool actor is restarting: try again at the next sweep
                self.wants.push_front(request_id, want)
                self.blocked = True
                return
            self.grants += 1
            self.granted[self.grants] = Grant(request_id, want, self.clock.monotonic())
            fence = self.leases.fence(request_id)
            try:
                ref.tell(CloneForRequest(request_id, want.alias, want.pool, grant=self.grants,
                                         reply_to=self.remote.member,
                                         fence="" if fence is None else fence.value))
            except pykka.ActorDeadError:
                del self.granted[self.grants]
                self.wants.push_front(request_id, want)
                self.blocked = True
                return
            free -= 1

    def answered(self, message: RequestCloneAnswered) -> None:
        """The pool actor answered a grant (a VM name: the slot is reserved; None: no
        slot)."""
        grant = self.granted.pop(message.grant, None)
        if grant is None:
            return  # already given up on and granted again
        wanted_at = grant.want.wanted_at
        if message.vm is None:
            if self.runs(message.request_id):
                self.wants.push_front(message.request_id,
                                      Want(message.alias, message.pool, wanted_at))
            self.blocked = True  # no slot (or no name): wait for a freed slot or the sweep
            return
        # the pool actor reserved the slot: the wait ends here, however often it was regranted
        if self.runs(message.request_id):
            self.cloning.setdefault(message.request_id, []).append(
                (message.pool, self.clock.monotonic()))
        self.metrics.timing("clone.queue_wait", max(0.0, self.clock.monotonic() - wanted_at),
                            tags={"pool": message.pool, "kind": "ondemand"})
        self.grant()

    def regrant_lost(self) -> None:
        """Grants unanswered for :data:`GRANT_LOST_AFTER` seconds are queued again."""
        now = self.clock.monotonic()
        for number, grant in list(self.granted.items()):
            if now - grant.granted_at > GRANT_LOST_AFTER:
                del self.granted[number]
                if self.runs(grant.request_id):
                    self.wants.push_front(grant.request_id, grant.want)
