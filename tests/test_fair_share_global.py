"""Fair shares across several managers (real redis-server, two ``PoolerSystem``s sharing it,
fake clocks): one manager, the granter, queues every manager's requests' wants, so a
user's share holds over all of them; when the granter goes, another takes over and every
request's wants reach it again."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis

from tests.harness import make_config, pool, wait_until
from tests.test_fair_share_system import owners
from tests.test_ondemand import GatedProvider, gated, status
from vmpooler.actors.cluster.granter import KIND, THING
from vmpooler.actors.cluster.membership import balanced_owners, rendezvous_owner
from vmpooler.actors.config import Config
from vmpooler.actors.pool.hostnames import HostnameGenerator
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.storage.heartbeat_store import manager_id
from vmpooler.actors.storage.lease_store import LeaseStore
from vmpooler.actors.storage.request_store import Entry, RequestOrigin, RequestStore
from vmpooler.actors.system import PoolerSystem

START_A, START_B = 1_700_000_000.0, 1_700_000_001.0


@dataclass
class Pair:
    """Managers A (started first: the granter) and B over one Redis, one provider, and
    the one pool ``pool`` (owned by A or B)."""

    pool: str
    a: PoolerSystem
    b: PoolerSystem
    clock_a: FakeClock
    clock_b: FakeClock
    provider: GatedProvider
    client: redis.Redis

    def system(self, member: str) -> PoolerSystem:
        return self.a if member == self.a.manager_id else self.b

    def ids_on(self, member: str, count: int, prefix: str) -> list[str]:
        """``count`` request ids that the rendezvous gives to ``member``."""
        live = [self.a.manager_id, self.b.manager_id]
        return [rid for n in range(10_000) if rendezvous_owner(live, rid := f"{prefix}{n}")
                == member][:count]

    def ask(self, rid: str, vms: int, origin: RequestOrigin) -> None:
        """Create the request in Redis and tell B (it starts it, or passes it on to A)."""
        assert RequestStore(self.client).create(rid, [Entry(self.pool, self.pool, vms)],
                                                created=int(self.clock_b.now()), origin=origin)
        self.b.notify_request(rid, "created")

    def granter(self) -> PoolerSystem | None:
        """The system holding the granter's lease (None while nobody holds it)."""
        lease = LeaseStore(self.client).holder(KIND, THING)
        return None if lease is None else self.system(lease.holder)

    def queued_at_granter(self, rids: list[str]) -> None:
        """Wait until each request's wants are queued (at the granter: in one manager's
        clone slots)."""
        def known() -> bool:
            seen: set[str] = set()
            for system in (self.a, self.b):
                ref = system.actor_ref("ondemand")
                if ref is not None and ref.is_alive():
                    seen |= set(ref.proxy().slots.get(timeout=10).known)
            return all(r in seen for r in rids)
        wait_until(known, 20, "every request's wants at the granter")


def _start(cfg: Config, client: redis.Redis, clock: FakeClock,
           provider: GatedProvider) -> PoolerSystem:
    return PoolerSystem.start(
        cfg, redis_client=client, clock=clock, scheduler=clock,
        providers={"dummy": provider}, hostnames=HostnameGenerator(rng=random.Random(7)),
        resolver=lambda _fqdn: False)


def config(name: str = "a") -> Config:
    return make_config([pool(name, 0)], ondemand_clone_limit=1, manager_heartbeat_interval=5)


@contextmanager
def pair(client: redis.Redis, *, pool_on: str) -> Iterator[Pair]:
    """A and B started, the pool owned by ``pool_on`` (``"a"`` or ``"b"``)."""
    id_a, id_b = manager_id(START_A), manager_id(START_B)
    owner = id_a if pool_on == "a" else id_b
    name = next(n for k in range(100) if balanced_owners([id_a, id_b], [n := f"pool{k}"])[n]
                == owner)
    cfg = config(name)
    provider = gated(cfg)  # one inventory for both: whichever owns the pool clones
    provider.all_ready = True
    clock_a, clock_b = FakeClock(start=START_A), FakeClock(start=START_B)
    a = _start(cfg, client, clock_a, provider)
    b = None
    try:
        b = _start(cfg, client, clock_b, provider)
        assert (a.manager_id, b.manager_id) == (id_a, id_b)
        if pool_on == "b":
            clock_a.advance(5)  # A's renewal: it sees B live and hands the pool over
        wait_until(lambda: (held := LeaseStore(client).holder("pool", name)) is not None
                   and held.holder == owner, 10, "the pool to be taken by its owner")
        yield Pair(name, a, b, clock_a, clock_b, provider, client)
    finally:
        if b is not None:
            b.stop()
        a.stop()


def test_one_vm_of_a_user_on_the_other_manager_goes_at_the_next_grant(
    redis_client: redis.Redis,
) -> None:
    """A user's 40 requests run on both managers; another user's single request runs on B.
    Its VM is granted at the next turn: one queue (A's) orders them all, whoever runs them.
    (Granting per manager, A, owning the pool, would win nearly every freed slot: B's
    request would wait for most of the flood.)"""
    with pair(redis_client, pool_on="a") as p:
        on_a = p.ids_on(p.a.manager_id, 20, "fa")
        on_b = p.ids_on(p.b.manager_id, 20, "fb")
        small = p.ids_on(p.b.manager_id, 1, "one")[0]
        with p.provider.gate:  # no clone ends before every request has asked
            for rid in on_a + on_b:
                p.ask(rid, 4, RequestOrigin("flood"))
            p.queued_at_granter(on_a + on_b)
            p.ask(small, 1, RequestOrigin("one"))
            p.queued_at_granter([small])
        wait_until(lambda: status(redis_client, small) == "ready", 30)
        order = owners(redis_client, p.provider.created)
        # the flood's first clone was already granted; the next grant is the small one's
        assert order.index(small) <= 1, order[:8]


def test_shares_1_to_2_hold_over_both_managers(redis_client: redis.Redis) -> None:
    """u1 (share 1) runs requests on both managers, u2 (share 2) only on B: over 90 grants
    u2 gets two thirds, within 10 %. Granting per manager would give A's slots all to u1."""
    with pair(redis_client, pool_on="a") as p:
        users: dict[str, str] = {}
        with p.provider.gate:
            for rid in p.ids_on(p.a.manager_id, 2, "u1a") + p.ids_on(p.b.manager_id, 2, "u1b"):
                p.ask(rid, 40, RequestOrigin("u1", share=1))
                users[rid] = "u1"
            for rid in p.ids_on(p.b.manager_id, 2, "u2b"):
                p.ask(rid, 60, RequestOrigin("u2", share=2))
                users[rid] = "u2"
            p.queued_at_granter(list(users))
        wait_until(lambda: len(p.provider.created) >= 91, 60, "91 clones")
        order = owners(redis_client, p.provider.created[1:91])  # after the first, ungated
        turns = Counter(users[rid] for rid in order if rid)
        for user, share in (("u1", 1), ("u2", 2)):
            expected = 90 * share / 3
            assert abs(turns[user] - expected) <= 0.1 * expected, turns


def test_the_granter_going_hands_over_and_no_request_is_stranded(
    redis_client: redis.Redis,
) -> None:
    """A (the granter) stops with requests of both managers queued at it (B owns the pool,
    its one slot held by a clone that waits): B takes the granter's lease at its next
    renewal, its own requests send their wants again, A's requests are taken over by B,
    and every request is served."""
    with pair(redis_client, pool_on="b") as p:
        assert p.granter() is p.a
        on_a = p.ids_on(p.a.manager_id, 3, "ra")
        on_b = p.ids_on(p.b.manager_id, 3, "rb")
        everyone = on_a + on_b
        with p.provider.gate:  # the first grant's clone waits: the rest stays queued at A
            for rid in everyone:
                p.ask(rid, 2, RequestOrigin(rid))
            p.queued_at_granter(everyone)
            p.a.stop()
            granting = p.b.actor_ref("ondemand").proxy().granting.get(timeout=10)
            changes = granting.changes
            for _ in range(6):  # B's renewals and sweeps (every 5 s): it grants, takes A's
                p.clock_b.advance(5)
            wait_until(lambda: p.granter() is p.b, 10, "B to grant")
            wait_until(lambda: granting.changes > changes, 10, "B to see the change")

        def served() -> bool:  # B's time goes on (a grant lost with A is granted again)
            p.clock_b.advance(1)
            return all(status(redis_client, r) == "ready" for r in everyone)

        wait_until(served, 30, "every request to be ready", every=0.05,
                   explain=lambda: str({r: status(redis_client, r) for r in everyone}))


def test_a_manager_alone_grants_at_once_and_sends_nothing(redis_client: redis.Redis) -> None:
    """One manager takes the granter's lease at start and grants its requests' VMs without
    any message through the relay (and without the clock moving)."""
    cfg = config("a")
    provider = gated(cfg)
    provider.all_ready = True
    clock = FakeClock(start=START_A)
    system = _start(cfg, redis_client, clock, provider)
    try:
        # taken as the on-demand manager starts (its own mailbox: after start() returns)
        lease = wait_until(lambda: LeaseStore(redis_client).holder(KIND, THING), 10,
                           "the granter's lease taken")
        assert lease.holder == system.manager_id
        rids = [system.request_ondemand({"a": 2}, origin=RequestOrigin(f"u{n}"))
                for n in range(3)]
        wait_until(lambda: all(status(redis_client, r) == "ready" for r in rids), 20)
        assert system.relay.delivered == 0
    finally:
        system.stop()
    assert LeaseStore(redis_client).holder(KIND, THING) is None, "released at the stop"
