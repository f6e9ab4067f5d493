"""How honest are the waits: ``estimated_ready_at`` against the time each on-demand request
was actually ready, under a steady load on the dummy provider (docs/fairness.md, "Honest
waits").

    .venv/bin/python bench/estimates.py [--requests 200] [--seed 1] [--json out.json]

The real actor system (pool actors, on-demand manager, request actors, Redis) runs on a
fake clock, as ``vmpooler replay`` does: each clone of the dummy provider takes a time
drawn uniformly from ``--clone-min``..``--clone-max`` simulated seconds (its worker blocks
until the clock has moved past it), and the driver jumps the clock from one event to the
next (an arrival, a timer, a clone's end), waiting for the actors to go idle in between.
Requests of one to ``--max-vms`` VMs over ``--pools`` pools arrive as a Poisson process
whose rate keeps ``ondemand_clone_limit`` slots ``--load`` busy on average.

For each request: its estimate as first published (``estimated_ready_at`` of
``GET /ondemandvm/<id>``, read from the same hash) and when it was ready. A request is
*within* when ``|actual wait - estimated wait| <= --tolerance x estimated wait`` (waits from
its creation). Reported: the share within, the median and 90th percentile of the relative
error, and the median wait. Needs ``redis-server`` (``EmbeddedRedis``); nothing is slept.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vmpooler.actors.config import Config, GlobalSettings, PoolConfig  # noqa: E402
from vmpooler.actors.config.model import ProviderConfig, RedisSettings  # noqa: E402
from vmpooler.actors.metrics.backends import NullMetrics  # noqa: E402
from vmpooler.actors.pool.hostnames import HostnameGenerator  # noqa: E402
from vmpooler.actors.replay.provider import ReplayProvider, SimulatedSleep  # noqa: E402
from vmpooler.actors.runtime.clock import FakeClock  # noqa: E402
from vmpooler.actors.storage import schema  # noqa: E402
from vmpooler.actors.storage.connection import connect  # noqa: E402
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis  # noqa: E402
from vmpooler.actors.storage.wait_store import WaitStore  # noqa: E402
from vmpooler.actors.system import PoolerSystem  # noqa: E402
from vmpooler.providers.base import ProviderContext, VmInfo  # noqa: E402

__all__ = ["Result", "run"]


@dataclass(frozen=True, slots=True)
class Result:
    """One run's figures (seconds are simulated)."""

    requests: int
    measured: int  # requests with an estimate that became ready
    within: float  # share of ``measured`` within the tolerance
    tolerance: float
    error_p50: float  # relative error |actual - estimated| / estimated
    error_p90: float
    bias: float  # median of (actual - estimated) / estimated: > 0 when estimates are short
    later_within: float  # the same, of the estimate read half-way through the wait
    later_error_p50: float  # (against the wait left at that read)
    later_bias: float
    wait_p50: float
    simulated_s: float


class _Varied(ReplayProvider):
    """Clones take a uniform time between ``low`` and ``high`` seconds, drawn from the seed
    and the VM's name (so the draw does not depend on which worker thread asks first)."""

    def __init__(self, context: ProviderContext, *, sleeper: SimulatedSleep, low: float,
                 high: float, seed: int) -> None:
        super().__init__(context, clone_time=(low + high) / 2, sleeper=sleeper)
        self._seed = seed
        self._bounds = (low, high)
        self._current = threading.local()  # the VM the calling worker clones

    def create_vm(self, pool: str, vm: str, *, template: str | None = None,
                  clone_target: str | None = None) -> VmInfo:
        self._current.vm = vm
        return super().create_vm(pool, vm, template=template, clone_target=clone_target)

    @property  # type: ignore[override]
    def clone_time(self) -> float:
        vm = getattr(self._current, "vm", "")
        return random.Random(f"{self._seed}:{vm}").uniform(*self._bounds)

    @clone_time.setter
    def clone_time(self, _value: float) -> None:
        pass


def _config(pools: int, limit: int) -> Config:
    raw = {"ondemand_clone_limit": limit, "ondemand_request_ttl": 600}
    settings = GlobalSettings(ondemand_clone_limit=limit, ondemand_request_ttl=600,
                              check_loop_delay_min=5, check_loop_delay_max=60, raw=raw)
    names = [f"est-{i}" for i in range(pools)]
    return Config(
        source="bench/estimates.py", settings=settings, redis=RedisSettings(),
        pools=tuple(PoolConfig(name=n, size=0, template=f"tpl-{n}", ready_ttl=600,
                               provider="dummy", raw={"name": n, "size": 0,
                                                      "template": f"tpl-{n}"})
                    for n in names),
        providers={"dummy": ProviderConfig(name="dummy", provider_class="dummy",
                                           settings={})})


def _arrivals(rng: random.Random, requests: int, rate: float,
              burst: int) -> list[float]:
    """Arrival times of ``requests`` requests: bursts of 1..``burst`` requests (uniform)
    arriving together, the bursts a Poisson process keeping ``rate`` requests a second."""
    times: list[float] = []
    t = 0.0
    while len(times) < requests:
        t += rng.expovariate(rate / ((1 + burst) / 2))
        size = rng.randint(1, burst) if burst > 1 else 1  # (one draw fewer: seeds as before)
        times.extend([t] * min(size, requests - len(times)))
    return times


def _judge(pairs: list[tuple[float, float]], tolerance: float) -> tuple[float, float,
                                                                          float, float]:
    """``(within, error p50, error p90, bias)`` of ``(estimated wait, actual wait)`` pairs."""
    errors = sorted(abs(a - e) / e for e, a in pairs)
    signed = [(a - e) / e for e, a in pairs]
    if not errors:
        return 0.0, 0.0, 0.0, 0.0
    within = sum(1 for e in errors if e <= tolerance) / len(errors)
    return (round(within, 3), round(statistics.median(errors), 3),
            round(errors[int(0.9 * (len(errors) - 1))], 3), round(statistics.median(signed), 3))


def run(client: redis.Redis, *, requests: int = 200, seed: int = 1, pools: int = 2,
        limit: int = 4, max_vms: int = 3, load: float = 0.8, clone_min: float = 45.0,
        clone_max: float = 75.0, tolerance: float = 0.3, warmup: int = 10, burst: int = 1,
        users: int = 0) -> Result:
    """Run the load over ``client`` (flushed first) and measure the estimates of the
    requests after the first ``warmup`` (before the pools have published clone times, the
    estimates assume two minutes a clone). ``burst``: requests arrive in bursts of 1 to
    that many at once (the load unchanged); ``users``: the requests belong to that many
    users, drawn at random (0: each request is a user of its own)."""
    client.flushdb()
    config = _config(pools, limit)
    clock = FakeClock()
    sleeper = SimulatedSleep(clock.monotonic)
    context = ProviderContext(name="dummy", settings={},
                              pools={p.name: dict(p.raw) for p in config.pools},
                              global_settings={}, dns_domains={p.name: None for p in config.pools})
    provider = _Varied(context, sleeper=sleeper, low=clone_min, high=clone_max, seed=seed)
    rng = random.Random(seed)
    mean_clone = (clone_min + clone_max) / 2
    rate = load * limit / mean_clone / ((1 + max_vms) / 2)  # requests per second
    arrivals = _arrivals(rng, requests, rate, burst)
    system = PoolerSystem.start(
        config, redis_client=client, clock=clock, scheduler=clock, metrics=NullMetrics(),
        providers={"dummy": provider}, hostnames=HostnameGenerator(rng=random.Random(seed)),
        resolver=lambda _f: False, task_interval=3600.0, consume_commands=False)
    waits = WaitStore(client)
    created: dict[str, float] = {}
    seen: dict[str, list[tuple[float, float]]] = {}  # request -> (read at, ready_at) changes
    ready: dict[str, float] = {}
    heapq.heapify(arrivals)
    try:
        while len(ready) < requests:
            system.wait_idle(parked=lambda: sleeper.sleeping)
            now = clock.monotonic()
            while arrivals and arrivals[0] <= now:
                heapq.heappop(arrivals)
                pool = f"est-{rng.randrange(pools)}"
                user = f"user-{rng.randrange(users)}" if users else None
                rid = system.request_ondemand({pool: rng.randint(1, max_vms)}, user=user)
                created[rid] = clock.now()
            open_ids = [r for r in created if r not in ready]
            if open_ids:
                pipe = client.pipeline(transaction=False)
                for rid in open_ids:
                    pipe.hget(schema.odrequest(rid), "status")
                for rid, status in zip(open_ids, pipe.execute(), strict=True):
                    if status == "ready":
                        ready[rid] = clock.now()
                    elif status is not None:
                        raise RuntimeError(f"request {rid} {status}")
                    elif (w := waits.wait(rid)) is not None:
                        history = seen.setdefault(rid, [])
                        if not history or history[-1][1] != w.ready_at:
                            history.append((clock.now(), w.ready_at))
            steps = [d for d in (clock.next_due(), sleeper.next_wake(),
                                 (arrivals[0] - now) if arrivals else None) if d is not None]
            if not steps:
                raise RuntimeError("nothing left to happen")
            clock.advance(max(min(steps), 0.001) if min(steps) > 0 else 0)
            sleeper.wake()
        simulated = clock.monotonic()
    finally:
        sleeper.stop()
        system.stop()
    first: list[tuple[float, float]] = []
    later: list[tuple[float, float]] = []
    waited: list[float] = []
    warm = sorted(created.values())[min(len(created) - 1, warmup)]
    for rid, at in ready.items():
        history = seen.get(rid)
        if not history or created[rid] < warm:
            continue
        waited.append(at - created[rid])
        first.append((max(1.0, history[0][1] - created[rid]), at - created[rid]))
        halfway = created[rid] + (at - created[rid]) / 2  # the estimate read half-way
        read_at, ready_at = ([h for h in history if h[0] <= halfway] or history)[-1]
        later.append((max(1.0, ready_at - read_at), at - read_at))
    within, p50, p90, bias = _judge(first, tolerance)
    later_within, later_p50, _p90, later_bias = _judge(later, tolerance)
    return Result(requests=requests, measured=len(first), within=within,
                  tolerance=tolerance, error_p50=p50, error_p90=p90, bias=bias,
                  later_within=later_within, later_error_p50=later_p50,
                  later_bias=later_bias, wait_p50=round(statistics.median(waited), 1),
                  simulated_s=round(simulated))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pools", type=int, default=2)
    parser.add_argument("--limit", type=int, default=4, help="ondemand_clone_limit")
    parser.add_argument("--max-vms", type=int, default=3)
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--clone-min", type=float, default=45.0)
    parser.add_argument("--clone-max", type=float, default=75.0)
    parser.add_argument("--tolerance", type=float, default=0.3)
    parser.add_argument("--burst", type=int, default=1,
                        help="requests arrive in bursts of 1 to this many at once")
    parser.add_argument("--users", type=int, default=0,
                        help="the requests' users (0: each request a user of its own)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vmpooler-bench-est-") as data, EmbeddedRedis(
            data_dir=Path(data), persist=False, hardened=False) as server:
        client = connect("127.0.0.1", server.port)
        result = run(client, requests=args.requests, seed=args.seed, pools=args.pools,
                     limit=args.limit, max_vms=args.max_vms, load=args.load,
                     clone_min=args.clone_min, clone_max=args.clone_max,
                     tolerance=args.tolerance, burst=args.burst, users=args.users)
    print(json.dumps(asdict(result), indent=2))
    if args.json:
        args.json.write_text(json.dumps(asdict(result), indent=2))


if __name__ == "__main__":
    main()
