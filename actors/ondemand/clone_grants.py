"""``CloneGrants``: the granter's fair share of ``ondemand_clone_limit``.

Wanted VMs queue per request in a :class:`FairShareQueue` (strict priority classes, a
weighted fair share between users inside each, round robin between a user's requests:
docs/fairness.md) and are handed out while ``tasks__ondemandclone`` (counted in Redis by
the pool actors' clone scripts) plus grants not yet answered stays under the limit. A grant
goes to the pool actor as :class:`CloneForRequest` carrying the request's fence; its answer
(:class:`RequestCloneAnswered`), a freed slot or the sweep lets the next one go.

The queue holds the wants of every manager's requests (the manager running a request
passes them on to the granter, :mod:`vmpooler.actors.cluster.granter`). Each request is
known with the fence of the lease it was last heard under: wants and withdrawals under an
older fence (a manager that lost the request) are ignored, the first under a newer one (its
new holder, which asks afresh) replaces what the request had queued. Owned by the manager's
actor; not thread-safe.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import redis

from vmpooler.actors.cluster.remote import Remote
from vmpooler.actors.cluster.router import Router
from vmpooler.actors.fairness.fair_share import FairShareQueue, Owner
from vmpooler.actors.messages import CloneForRequest, RequestCloneAnswered
from vmpooler.actors.messages.address import Address
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.runtime.clock import Clock
from vmpooler.actors.runtime.supervisor import ActorDirectory
from vmpooler.actors.storage.redis_errors import redis_failure
from vmpooler.actors.storage.request_store import RequestStore

__all__ = ["GRANT_LOST_AFTER", "CloneGrants", "Grant", "Want", "fence_token"]

log = logging.getLogger(__name__)

GRANT_LOST_AFTER = 30.0  # s without an answer from the pool actor (it answers at once): regrant


def fence_token(fence: str) -> int:
    """The token of a request lease's value ``"<token> <holder>"`` (0 for '': no lease)."""
    head = fence.partition(" ")[0]
    return int(head) if head.isdigit() else 0


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
    """A slot handed to ``request_id`` for ``want`` at ``granted_at`` (monotonic), under
    the request's ``fence``, not yet answered by the pool actor."""

    request_id: str
    want: Want
    granted_at: float
    fence: str = ""


class CloneGrants:
    """Grants clone slots to the requests that want VMs, while ``granting()`` says this
    manager is the granter (by default always)."""

    def __init__(
        self,
        *,
        store: RequestStore,
        directory: ActorDirectory,
        clone_limit: int,
        clock: Clock,
        metrics: Metrics,
        remote: Remote,
        granting: Callable[[], bool] = lambda: True,
    ) -> None:
        self.store = store
        self.directory = directory
        self.clone_limit = clone_limit
        self.clock = clock
        self.metrics = metrics
        self.router = Router(directory, remote)
        self.granting = granting
        self.wants: FairShareQueue[str, Want] = FairShareQueue()  # request -> its VMs
        self.known: dict[str, str] = {}  # request -> the fence it was last heard under
        self.granted: dict[int, Grant] = {}  # grant number -> the grant
        self.grants = 0
        self.blocked = False  # the last grant found no free slot: wait for one to be freed
        # request -> (pool, monotonic start) of its clones started since it was granted
        # (what the wait estimates start from; trimmed by the estimates, dropped with it)
        self.cloning: dict[str, list[tuple[str, float]]] = {}
        self.traces: dict[str, str] = {}  # request -> its actor's span (a traceparent)

    def reset(self) -> None:
        """Forget every request (the granter changed: the queue is rebuilt from the wants
        sent again)."""
        self.wants = FairShareQueue()
        self.known.clear()
        self.granted.clear()
        self.cloning.clear()
        self.traces.clear()
        self.blocked = False

    def runs(self, request_id: str) -> bool:
        """Whether a request is known here (it asked and has not been withdrawn)."""
        return request_id in self.known

    def want(self, request_id: str, wants: tuple[tuple[str, str], ...],
             owner: Owner | None = None, *, whole: bool = False, fence: str = "",
             traceparent: str = "") -> None:
        """The request wants these ``(alias, pool)`` VMs too; none: it withdraws its
        queued ones. ``whole``: they are all it has queued (replacing what it had, less the
        grants not yet answered). ``owner``: who asked (None: the request is a user of its
        own, normal priority, share 1). ``fence``: the request's lease value (see the
        module). ``traceparent``: the request actor's span, the parent of its clones' spans.
        Grants what it can."""
        if not self._current(request_id, fence):
            return
        if traceparent:
            self.traces[request_id] = traceparent
        renewed = request_id in self.known and self.known[request_id] != fence
        self.known[request_id] = fence
        if whole or renewed:
            self.wants.drop(request_id)
            if whole:
                wants = tuple(self._less_granted(request_id, wants, fence))
        if wants:
            at = self.clock.monotonic()
            self.wants.extend(request_id, [Want(alias, pool, at) for alias, pool in wants],
                              owner)
        else:
            self.wants.drop(request_id)
        self.grant()

    def withdraw(self, request_id: str, fence: str = "") -> None:
        """The request no longer runs where it ran under ``fence``: forget it, unless it
        was heard since under a newer fence."""
        if self._current(request_id, fence):
            self.drop(request_id)

    def drop(self, request_id: str) -> None:
        """Forget the request and what it wanted (grants already made stay counted)."""
        self.wants.drop(request_id)
        self.cloning.pop(request_id, None)
        self.traces.pop(request_id, None)
        self.known.pop(request_id, None)

    def prune(self, in_flight: set[str]) -> None:
        """Forget known requests no longer in flight (a withdrawal lost on its way)."""
        for request_id in [r for r in self.known if r not in in_flight]:
            self.drop(request_id)

    def _current(self, request_id: str, fence: str) -> bool:
        known = self.known.get(request_id)
        return known is None or fence_token(fence) >= fence_token(known)

    def _less_granted(self, request_id: str, wants: tuple[tuple[str, str], ...],
                      fence: str) -> list[tuple[str, str]]:
        """``wants`` less the VMs of the request's grants under ``fence`` not yet answered
        (a grant under an older fence clones nothing: ``START_CLONE`` refuses it)."""
        granted = Counter((g.want.alias, g.want.pool) for g in self.granted.values()
                          if g.request_id == request_id and g.fence == fence)
        kept = []
        for alias, pool in wants:
            if granted[(alias, pool)] > 0:
                granted[(alias, pool)] -= 1
            else:
                kept.append((alias, pool))
        return kept

    def ahead_of(self, request_id: str) -> int:
        """How many VMs are granted before the request's next one, in the queue's order (0
        when its next one goes first, or it has none queued)."""
        return self.wants.ahead_of(request_id)

    def freed(self) -> None:
        """A slot may be free (a clone finished, or the sweep): grant again."""
        self.blocked = False
        self.grant()

    def grant(self) -> None:
        """Hand out free slots, in the order of :attr:`wants` (only while ``granting()``)."""
        if self.blocked or not self.wants or not self.granting():
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
            number, fence = self.grants + 1, self.known.get(request_id, "")
            grant = CloneForRequest(request_id, want.alias, want.pool, grant=number,
                                    reply_to=self.router.member, fence=fence,
                                    traceparent=self.traces.get(request_id, ""))
            if not self.router.here(Address.pool(want.pool), grant):
                # the pool actor is restarting: try again at the next sweep
                self.wants.push_front(request_id, want)
                self.blocked = True
                return
            self.grants = number
            self.granted[number] = Grant(request_id, want, self.clock.monotonic(), fence)
            free -= 1

    def answered(self, message: RequestCloneAnswered) -> None:
        """The pool actor answered a grant (a VM name: the slot is reserved; None: no
        slot)."""
        grant = self.granted.pop(message.grant, None)
        if grant is None:
            return  # already given up on and granted again
        wanted_at = grant.want.wanted_at
        if message.vm is None:
            if self._regrantable(grant):
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
                if self._regrantable(grant):
                    self.wants.push_front(grant.request_id, grant.want)

    def _regrantable(self, grant: Grant) -> bool:
        """Whether a grant that started no clone goes back to the queue: its request is
        still known under the fence it was granted with (a newer holder asked afresh)."""
        return self.known.get(grant.request_id) == grant.fence
