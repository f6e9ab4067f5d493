"""A bounded chaos run over real processes: one redis-server (AOF on), three ``vmpooler
manager`` processes sharing one dummy inventory (``filename``), and a two-worker ``vmpooler api``.

Client threads check VMs out (``POST /api/v3/vm/<pool>`` and batch ``POST /api/v3/vm``),
return them (``DELETE /api/v3/vm/<name>``) and make on-demand requests (``POST
/api/v3/ondemandvm``, polled with ``GET``, some deleted) while the main thread applies a
fault schedule: API workers SIGKILLed (gunicorn starts new ones), managers SIGKILLed and
started again after a short random pause, and exactly one Redis restart (clean shutdown,
same port, same data). The client load is best-effort: a 503 ``redis unavailable`` while
Redis is away and connection resets when a worker dies are expected and counted; every
other 5xx, any such error outside its window, and every traceback in a process log fails.

Once the faults are over and the load has stopped, the system gets a deadline to settle
(pools full, nothing pending, completed or discovered, the inventory matching Redis, every
request finished); then:

1. no VM is in two queues (ready/pending/running/completed/discovered of every pool; the
   ``migrating`` side set only holds running VMs), sampled all along the run and at the
   end; and ready + pending pool VMs (the clones in flight; a request's VMs are not the
   pool's) never exceed a pool's size;
2. the provider's inventory and Redis agree: each pool's inventory is its ready and running
   VMs, and every ready or running VM exists in the provider;
3. every on-demand request ever created (also those whose answer a killed worker lost) is
   ``ready`` with exactly the VMs it asked for per alias and pool (running, checked out,
   in the provider), ``failed`` with a reason, or ``deleted`` when a client deleted it;
   none is left in ``provisioning__request``/``__processing``, and a finished request's
   VMs are not left ready or running;
4. no VM was handed out twice: names are never reused while a VM's hash exists (the clone
   reservation refuses them; a destroyed VM's hash is kept for ``data_ttl``), so every
   successful checkout's VM is distinct, and none is a request's VM;
5. the managers' logs show no VM name cloned twice;

and no HTTP answer is an error outside its fault's window, every process stops cleanly
with no traceback in its log, and no clone slot is left taken once nothing is cloning (a
killed manager's slots are given back by the others' heartbeats). One run serves the
module; each test reads one family of its findings.

Randomness: everything is drawn from one seed, printed at the start and in every failure
message; the fault schedule (offset, action, target) is drawn from it before anything
starts. Without ``VMPOOLER_CHAOS_SEED`` each run draws a new seed; to replay one::

    VMPOOLER_CHAOS_SEED=1234 .venv/bin/pytest tests/test_chaos.py -s

which applies the same faults at the same offsets (the client load draws from the same seed
too, but its timing follows the answers, so it is not repeated exactly). ``-s`` shows the
summary of a passing run.
"""

from __future__ import annotations

import collections
import http.client
import json
import os
import random
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.test_manager_process import spawn
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, find_redis_server, free_port
from vmpooler.providers.dummy_store import read_inventory

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

SEED_ENV = "VMPOOLER_CHAOS_SEED"
CHAOS_SECONDS = 40.0
SETTLE_SECONDS = 150.0  # a clone cut off by a SIGKILL stays pending until `timeout` (1 min)
MANAGERS = 3
WORKERS = 2
BEAT = 1.0  # manager_heartbeat_interval: pool leases last three of them
POOLS = {"alpha": 4, "beta": 3, "gamma": 0}  # gamma: on-demand requests only
ALIAS = "ab"  # over alpha and beta
ALIASED = ("alpha", "beta")
DOMAIN = "example.test"
QUEUES = ("ready", "pending", "running", "completed", "discovered")
CLONED = re.compile(r"\[\*\] \[(\S+)\] '([^']+)' is being cloned")
CRASHED = re.compile(r"\[supervisor\] '[^']+' crashed")
WORKER_GRACE = 5.0  # seconds after a worker kill its lost connections may still surface
REDIS_GRACE = 10.0  # seconds after Redis is back that a 503 'redis unavailable' may come
CLIENT_TIMEOUT = 20.0

# -- the fault schedule -------------------------------------------------------------------
@dataclass(frozen=True)
class Fault:
    """One scheduled fault: ``at`` seconds after the chaos starts. ``target`` is the
    manager's slot, or (``kill-worker``) an index into the live workers, taken modulo
    their number."""

    at: float
    action: str  # kill-worker | kill-manager | start-manager | stop-redis | start-redis
    target: int = 0

    def __str__(self) -> str:
        return f"{self.at:6.2f}s {self.action} {self.target}"


def fault_schedule(rng: random.Random, duration: float = CHAOS_SECONDS,
                   managers: int = MANAGERS) -> list[Fault]:
    """The run's faults, drawn up front: one Redis restart (down 1-5 s), 3-5 worker kills,
    and a manager kill every 2.5-6.5 s (never the last live one), each started again after
    0.5-5 s; everything is over before ``duration``."""
    faults: list[Fault] = []
    stop_at = rng.uniform(0.25, 0.6) * duration
    faults += [Fault(stop_at, "stop-redis"),
               Fault(stop_at + rng.uniform(1.0, 5.0), "start-redis")]
    for _ in range(rng.randint(3, 5)):
        faults.append(Fault(rng.uniform(2.0, duration - 2.0), "kill-worker",
                            rng.randrange(WORKERS)))
    up_at = [0.0] * managers
    at = rng.uniform(3.0, 10.0)
    while at < duration - 8.0:
        live = [slot for slot in range(managers) if up_at[slot] <= at]
        if len(live) > 1:
            slot = rng.choice(live)
            back = at + rng.uniform(0.5, 5.0)
            faults += [Fault(at, "kill-manager", slot), Fault(back, "start-manager", slot)]
            up_at[slot] = back
        at += rng.uniform(2.5, 6.5)
    return sorted(faults, key=lambda fault: fault.at)


def chaos_seed() -> int:
    """``VMPOOLER_CHAOS_SEED`` if set, else a fresh one."""
    value = os.environ.get(SEED_ENV)
    return int(value) if value else random.SystemRandom().randrange(1, 10**6)


# -- HTTP ---------------------------------------------------------------------------------
def http_call(method: str, url: str, body: Any = None) -> tuple[int | None, Any, str | None]:
    """``(status, JSON body, None)``, or ``(None, None, kind)`` when no answer came:
    ``timeout`` or ``conn:<exception>``."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=CLIENT_TIMEOUT) as answer:
            return answer.status, _json(answer.read()), None
    except urllib.error.HTTPError as error:
        try:
            return error.code, _json(error.read()), None
        except (OSError, http.client.HTTPException) as cut:
            return None, None, f"conn:{type(cut).__name__}"
    except urllib.error.URLError as error:
        reason = error.reason
        if isinstance(reason, TimeoutError):
            return None, None, "timeout"
        return None, None, f"conn:{type(reason).__name__}"
    except TimeoutError:
        return None, None, "timeout"
    except (OSError, http.client.HTTPException) as error:
        return None, None, f"conn:{type(error).__name__}"


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def hostnames(body: Any) -> list[str]:
    """The short VM names of a checkout's answer (``hostname`` is a string or a list)."""
    names: list[str] = []
    for key, value in body.items():
        if key == "ok":
            continue
        found = value["hostname"]
        names += [h.split(".")[0] for h in ([found] if isinstance(found, str) else found)]
    return names


@dataclass
class Answer:
    """One HTTP call's outcome, ``at`` seconds after the chaos started."""

    at: float
    route: str
    kind: str  # ok | empty | redis-503 | timeout | conn:<exception> | http-<status>
    detail: str = ""


class Ledger:
    """What the clients did and saw, shared by their threads."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.lock = threading.Lock()
        self.answers: list[Answer] = []
        self.checkouts: list[tuple[str, str, float]] = []  # (vm, client, at)
        self.returns = 0
        self.requests: dict[str, Request] = {}

    def now(self) -> float:
        return time.monotonic() - self.started

    def record(self, route: str, status: int | None, body: Any, error: str | None,
               normal: tuple[int, ...]) -> str:
        """Classify and keep one answer; returns its kind."""
        if error is not None:
            kind, detail = error, ""
        elif status in normal:
            kind, detail = "ok", ""
        elif status == 503 and isinstance(body, dict) and body.get("error") == "redis unavailable":
            kind, detail = "redis-503", ""
        elif status == 503 and route == "POST /vm" and body == {"ok": False}:
            kind, detail = "empty", ""
        else:
            kind, detail = f"http-{status}", str(body)[:300]
        with self.lock:
            self.answers.append(Answer(self.now(), route, kind, detail))
        return kind


# -- the client load ----------------------------------------------------------------------
class Checkouts(threading.Thread):
    """Checks VMs out, holds each for a moment and returns it; gives every VM back when
    the load stops."""

    def __init__(self, name: str, base: str, ledger: Ledger, rng: random.Random,
                 stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.base, self.ledger, self.rng, self.stop_load = base, ledger, rng, stop
        self.held: list[tuple[float, str]] = []  # (return at, vm)

    def run(self) -> None:
        pace = threading.Event()
        while not self.stop_load.is_set():
            now = time.monotonic()
            for item in [h for h in self.held if h[0] <= now]:
                self.held.remove(item)
                if not self.give_back(item[1]):
                    self.held.append((now + 0.5, item[1]))
            if len(self.held) < 3:
                for vm in self.checkout():
                    self.held.append((now + self.rng.uniform(0.2, 3.0), vm))
            pace.wait(self.rng.uniform(0.05, 0.4))
        deadline = time.monotonic() + 60
        while self.held and time.monotonic() < deadline:
            _, vm = self.held.pop(0)
            if not self.give_back(vm):
                self.held.append((0.0, vm))
                pace.wait(0.5)

    def checkout(self) -> list[str]:
        if self.rng.random() < 0.2:
            status, body, error = http_call("POST", f"{self.base}/vm", {"alpha": 1, "beta": 1})
        else:
            name = self.rng.choice(["alpha", "beta", ALIAS])
            status, body, error = http_call("POST", f"{self.base}/vm/{name}")
        if self.ledger.record("POST /vm", status, body, error, (200,)) != "ok":
            return []
        names = hostnames(body)
        with self.ledger.lock:
            self.ledger.checkouts += [(vm, self.name, self.ledger.now()) for vm in names]
        return names

    def give_back(self, vm: str) -> bool:
        status, body, error = http_call("DELETE", f"{self.base}/vm/{vm}.{DOMAIN}")
        if self.ledger.record("DELETE /vm", status, body, error, (200,)) != "ok":
            return False
        with self.ledger.lock:
            self.ledger.returns += 1
        return True


@dataclass
class Request:
    """An on-demand request a client made: its order, when to delete it (None: never),
    whether a DELETE answered 200, and the finished state a GET showed first."""

    order: dict[str, int]
    created: float
    delete_at: float | None
    deleted: bool = False
    seen: str | None = None


class OnDemand(threading.Thread):
    """Makes on-demand requests (at most four unfinished at once), polls them, and deletes
    about a quarter of them a moment after creating them."""

    ORDERS: tuple[Callable[[int], dict[str, int]], ...] = (
        lambda n: {"gamma": n}, lambda n: {ALIAS: n}, lambda n: {"beta": n},
        lambda n: {"alpha": 1, "gamma": n},
    )

    def __init__(self, base: str, ledger: Ledger, rng: random.Random,
                 stop: threading.Event) -> None:
        super().__init__(name="ondemand", daemon=True)
        self.base, self.ledger, self.rng, self.stop_load = base, ledger, rng, stop
        self.mine: dict[str, Request] = {}

    def run(self) -> None:
        pace = threading.Event()
        while not self.stop_load.is_set():
            unfinished = [r for r in self.mine.values() if r.seen is None]
            if len(unfinished) < 4 and self.rng.random() < 0.5:
                self.create()
            for request_id, request in list(self.mine.items()):
                if request.seen is None:
                    self.poll(request_id, request)
                if (request.delete_at is not None and not request.deleted
                        and self.ledger.now() >= request.delete_at):
                    self.delete(request_id, request)
            pace.wait(self.rng.uniform(0.2, 0.5))

    def create(self) -> None:
        order = self.rng.choice(self.ORDERS)(self.rng.randint(1, 3))
        status, body, error = http_call("POST", f"{self.base}/ondemandvm", order)
        if self.ledger.record("POST /ondemandvm", status, body, error, (201,)) != "ok":
            return
        now = self.ledger.now()
        doomed = self.rng.random() < 0.25
        request = Request(order, now, now + self.rng.uniform(0.3, 4.0) if doomed else None)
        self.mine[str(body["request_id"])] = request
        with self.ledger.lock:
            self.ledger.requests[str(body["request_id"])] = request

    def poll(self, request_id: str, request: Request) -> None:
        status, body, error = http_call("GET", f"{self.base}/ondemandvm/{request_id}")
        if self.ledger.record("GET /ondemandvm", status, body, error, (200, 202)) != "ok":
            return
        if status == 200:
            message = str(body.get("message", ""))
            request.seen = ("ready" if body.get("ready") is True
                            else "deleted" if "deleted" in message else "failed")

    def delete(self, request_id: str, request: Request) -> None:
        status, body, error = http_call("DELETE", f"{self.base}/ondemandvm/{request_id}")
        if self.ledger.record("DELETE /ondemandvm", status, body, error, (200,)) == "ok":
            request.deleted = True


# -- reading the state --------------------------------------------------------------------
@dataclass
class Snapshot:
    """Every pool's queues read in one MULTI, and which pending VMs belong to a request."""

    queues: dict[str, dict[str, set[str]]]
    migrating: dict[str, set[str]]
    requested: set[str]  # pending VMs cloned for an on-demand request

    def where(self) -> dict[str, list[str]]:
        """VM -> every ``pool/queue`` it is in."""
        found: dict[str, list[str]] = collections.defaultdict(list)
        for pool, queues in self.queues.items():
            for queue, members in queues.items():
                for vm in members:
                    found[vm].append(f"{pool}/{queue}")
        return found

    def doubles(self) -> list[str]:
        """Every VM in two queues."""
        return [f"{vm} is in {', '.join(places)}"
                for vm, places in self.where().items() if len(places) > 1]

    def oversized(self) -> list[str]:
        """Every pool whose ready + pending pool VMs are above its size."""
        found = []
        for pool, size in POOLS.items():
            queues = self.queues[pool]
            pooled = queues["pending"] - self.requested
            if len(queues["ready"]) + len(pooled) > size:
                found.append(f"{pool}: {len(queues['ready'])} ready + {len(pooled)} pending "
                             f"pool VMs, above its size {size}: ready "
                             f"{sorted(queues['ready'])}, pending {sorted(pooled)}")
        return found


def snapshot(client: redis.Redis) -> Snapshot:
    pipe = client.pipeline(transaction=True)
    for pool in POOLS:
        for queue in (*QUEUES, "migrating"):
            pipe.smembers(getattr(schema, queue)(pool))
    values = iter(pipe.execute())
    queues: dict[str, dict[str, set[str]]] = {}
    migrating: dict[str, set[str]] = {}
    for pool in POOLS:
        queues[pool] = {queue: set(next(values)) for queue in QUEUES}
        migrating[pool] = set(next(values))
    pending = sorted(set().union(*(q["pending"] for q in queues.values())))
    pipe = client.pipeline(transaction=False)
    for vm in pending:
        pipe.hget(schema.vm(vm), "request_id")
    owners = pipe.execute() if pending else []
    return Snapshot(queues, migrating, {vm for vm, owner in zip(pending, owners, strict=True)
                                        if owner})


def inventory(path: Path) -> dict[str, set[str]]:
    """pool -> VM names, as the dummy provider's shared inventory holds them."""
    document = read_inventory(path)
    return {pool: {vm["name"] for vm in vms or []}
            for pool, vms in (document.get("pool") or {}).items()}


def parse_requested(requested: str) -> list[tuple[str, str, int]]:
    """``(alias, pool, count)`` entries of a request's ``requested`` field."""
    entries = []
    for part in filter(None, requested.split(",")):
        alias, pool, count = part.split(":")
        entries.append((alias, pool, int(count)))
    return entries


def requests_in_redis(client: redis.Redis) -> dict[str, dict[str, str]]:
    """Every on-demand request's hash, by id."""
    prefix = schema.odrequest("")
    return {key.removeprefix(prefix): client.hgetall(key)
            for key in client.scan_iter(match=schema.odrequest("*"), count=1000)}


def vms_by_request(client: redis.Redis) -> dict[str, set[str]]:
    """request id -> every VM cloned for it whose hash is still there."""
    owners: dict[str, set[str]] = collections.defaultdict(set)
    prefix = schema.vm("")
    for key in client.scan_iter(match=schema.vm("*"), count=1000):
        owner = client.hget(key, "request_id")
        if owner:
            owners[owner].add(key.removeprefix(prefix))
    return owners


class Watch(threading.Thread):
    """Samples the queues all along the run and keeps the first violations of each kind."""

    def __init__(self, client: redis.Redis, clock: Callable[[], float]) -> None:
        super().__init__(name="watch", daemon=True)
        self.client, self.clock = client, clock
        self.done = threading.Event()
        self.samples = 0
        self.doubles: list[str] = []
        self.oversized: list[str] = []

    def run(self) -> None:
        while not self.done.wait(0.25):
            try:
                snap = snapshot(self.client)
            except redis.RedisError:  # Redis is being restarted
                continue
            self.samples += 1
            at = self.clock()
            for found, seen in ((self.doubles, snap.doubles()),
                                (self.oversized, snap.oversized())):
                found += [f"at {at:.2f}s: {problem}" for problem in seen]
                del found[20:]


# -- processes ----------------------------------------------------------------------------
def write_config(path: Path, *, redis_port: int, inventory_file: Path) -> Path:
    document = {
        ":config": {
            # limits above the load: the run is about faults, not about waiting for slots
            "check_loop_delay_min": 1, "check_loop_delay_max": 1, "task_limit": 40,
            "ondemand_clone_limit": 40, "timeout": 1, "manager_heartbeat_interval": BEAT,
            "ondemand_request_ttl": 1,
        },
        ":redis": {"server": "127.0.0.1", "port": redis_port},
        ":providers": {":dummy": {"provider_class": "dummy", "filename": str(inventory_file),
                                    "createvm_max_time": 0.8,
                                    "skip_dns_check_before_creating_vm": True}},
        ":dns_configs": {":local": {"dns_class": "dynamic-dns", "domain": DOMAIN}},
        ":pools": [{"name": name, "size": size, "provider": "dummy", "dns_plugin": "local",
                    **({"alias": [ALIAS]} if name in ALIASED else {})}
                   for name, size in POOLS.items()],
    }
    path.write_text(yaml.safe_dump(document))
    return path


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (the gunicorn master's workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.append(int(entry.name))
    return sorted(found)


def tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class Chaos:
    """The run: its processes, the faults applied to them, the load, and the checks."""

    def __init__(self, tmp_path: Path, server: EmbeddedRedis,
                 started: list[subprocess.Popen[str]], seed: int, faults: list[Fault],
                 rng: random.Random) -> None:
        self.tmp, self.server, self.started = tmp_path, server, started
        self.seed, self.faults, self.rng = seed, faults, rng
        self.inventory_file = tmp_path / "dummy.yaml"
        self.config = write_config(tmp_path / "chaos.yaml", redis_port=server.port,
                                   inventory_file=self.inventory_file)
        self.manager_logs = [tmp_path / f"manager{slot}.log" for slot in range(MANAGERS)]
        self.api_log = tmp_path / "api.log"
        self.managers: list[subprocess.Popen[str] | None] = [None] * MANAGERS
        self.api: subprocess.Popen[str] | None = None
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}/api/v3"
        self.client = redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True,
                                  socket_timeout=10)
        self.t0 = time.monotonic()
        self.ledger = Ledger(self.t0)
        self.watch = Watch(self.client, self.ledger.now)
        self.applied: list[str] = []
        self.windows: list[tuple[float, float, str]] = []  # (from, to, worker | redis)
        self.problems: list[str] = []
        self.timings: dict[str, float] = {}
        self.findings: dict[str, list[str]] = {}

    # -- processes --------------------------------------------------------------------------
    def start_manager(self, slot: int) -> subprocess.Popen[str]:
        manager = spawn(self.started, "manager", "--config", str(self.config),
                        log=self.manager_logs[slot])
        self.managers[slot] = manager
        return manager

    def start(self) -> None:
        for slot in range(MANAGERS):
            self.start_manager(slot)
        self.api = spawn(self.started, "api", "--config", str(self.config), "--bind",
                         f"127.0.0.1:{self.port}", "--workers", str(WORKERS), log=self.api_log)
        self.wait(lambda: http_call("GET", f"{self.base}/vm")[0] == 200, 60,
                  "the API to answer")
        self.wait(lambda: all(self.client.scard(schema.ready(p)) == n
                              for p, n in POOLS.items()), 90, "the pools to fill")

    def wait(self, condition: Callable[[], Any], timeout: float, what: str,
             every: float = 0.1) -> Any:
        """``condition()``'s first truthy value within ``timeout`` s (checked every
        ``every`` s), else AssertionError (with the load average: the machine is shared)."""
        deadline = time.monotonic() + timeout
        pause = threading.Event()
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                load = Path("/proc/loadavg").read_text().strip()
                raise AssertionError(f"timed out after {timeout}s waiting for {what} "
                                     f"(load average {load})")
            pause.wait(every)

    # -- the faults -------------------------------------------------------------------------
    def apply(self, fault: Fault) -> None:
        at = self.ledger.now()
        note = ""
        if fault.action == "kill-worker":
            assert self.api is not None
            workers = children(self.api.pid)
            if workers:
                victim = workers[fault.target % len(workers)]
                self.windows.append((at, at + WORKER_GRACE, "worker"))
                os.kill(victim, signal.SIGKILL)
                note = f"worker {victim} of {workers}"
            else:
                note = "no live worker (gunicorn was still starting one)"
        elif fault.action == "kill-manager":
            manager = self.managers[fault.target]
            assert manager is not None
            if manager.poll() is not None:
                self.problems.append(f"manager {fault.target} (pid {manager.pid}) had exited "
                                     f"with {manager.returncode} before its kill at {at:.2f}s")
            manager.kill()
            manager.wait(timeout=10)
            self.managers[fault.target] = None
            note = f"pid {manager.pid}"
        elif fault.action == "start-manager":
            note = f"pid {self.start_manager(fault.target).pid}"
        elif fault.action == "stop-redis":
            self.windows.append((at, float("inf"), "redis"))
            self.server.stop()
        elif fault.action == "start-redis":
            self.server.start()  # same port, same data directory (AOF)
            begun = next(a for a, b, kind in self.windows if kind == "redis" and b == float("inf"))
            self.windows.remove((begun, float("inf"), "redis"))
            self.windows.append((begun, self.ledger.now() + REDIS_GRACE, "redis"))
        self.applied.append(f"{at:6.2f}s (planned {fault.at:6.2f}s) {fault.action} "
                            f"{fault.target} {note}".rstrip())

    def run_faults(self) -> None:
        pause = threading.Event()
        for fault in self.faults:
            pause.wait(max(0.0, fault.at - self.ledger.now()))
            self.apply(fault)
        pause.wait(max(0.0, CHAOS_SECONDS - self.ledger.now()))

    # -- the run ----------------------------------------------------------------------------
    def execute(self) -> None:
        began = time.monotonic()
        self.start()
        self.timings["start"] = time.monotonic() - began
        stop = threading.Event()
        clients: list[threading.Thread] = [
            Checkouts(f"checkout{n}", self.base, self.ledger,
                      random.Random(self.rng.randrange(2**32)), stop) for n in range(2)]
        clients.append(OnDemand(self.base, self.ledger, random.Random(self.rng.randrange(2**32)),
                                stop))
        self.t0 = self.ledger.started = time.monotonic()
        self.watch.start()
        for client in clients:
            client.start()
        try:
            self.run_faults()
        finally:
            stop.set()
            for client in clients:
                client.join(timeout=90)
        self.timings["chaos"] = self.ledger.now()
        assert not any(c.is_alive() for c in clients), "a client thread did not stop"
        began = time.monotonic()
        self.everything_up()
        self.settle()
        self.timings["settle"] = time.monotonic() - began
        self.watch.done.set()
        self.watch.join(timeout=10)

    def everything_up(self) -> None:
        """Every manager and the API master running, gunicorn back to its workers."""
        for slot, manager in enumerate(self.managers):
            if manager is None or manager.poll() is not None:
                self.problems.append(f"manager {slot} is not running after the chaos "
                                     f"({None if manager is None else manager.returncode})")
                self.start_manager(slot)
        assert self.api is not None
        assert self.api.poll() is None, f"the API master exited ({self.api.returncode})"
        self.wait(lambda: len(children(self.api.pid)) == WORKERS, 30,  # type: ignore[union-attr]
                  f"gunicorn to run {WORKERS} workers again")

    def unsettled(self) -> list[str]:
        """What keeps the system from having settled (empty when it has)."""
        reasons: list[str] = []
        snap = snapshot(self.client)
        held = inventory(self.inventory_file)
        for pool, size in POOLS.items():
            queues = snap.queues[pool]
            for queue in ("pending", "completed", "discovered"):
                if queues[queue]:
                    reasons.append(f"{pool} {queue}: {sorted(queues[queue])}")
            if len(queues["ready"]) != size:
                reasons.append(f"{pool}: {len(queues['ready'])} ready of {size}")
            there = held.get(pool, set())
            if there != queues["ready"] | queues["running"]:
                reasons.append(
                    f"{pool}: inventory and Redis differ: only in the provider "
                    f"{sorted(there - queues['ready'] - queues['running'])}, only in Redis "
                    f"{sorted((queues['ready'] | queues['running']) - there)}")
        for key in (schema.provisioning_request(), schema.provisioning_processing()):
            if self.client.zcard(key):
                reasons.append(f"{key}: {self.client.zrange(key, 0, -1)}")
        unfinished = {rid: fields for rid, fields in requests_in_redis(self.client).items()
                      if fields.get("status") not in ("ready", "failed", "deleted")}
        if unfinished:
            reasons.append(f"unfinished requests: {unfinished}")
        return reasons

    def settle(self) -> None:
        last: list[list[str]] = [[]]

        def settled() -> bool:
            last[0] = self.unsettled()
            return not last[0]

        try:
            self.wait(settled, SETTLE_SECONDS, "the system to settle", every=0.5)
        except AssertionError as error:
            raise AssertionError(f"{error}; still: {last[0]}") from None

    # -- the checks -------------------------------------------------------------------------
    def verify(self) -> None:
        """Run every check on the settled state into :attr:`findings`, then stop the
        processes and read their logs."""
        snap = snapshot(self.client)
        queues = [f"during the run: {v}" for v in self.watch.doubles] + snap.doubles()
        for pool in POOLS:
            stray = snap.migrating[pool] - snap.queues[pool]["running"]
            if stray:
                queues.append(f"{pool}: migrating VMs not running: {sorted(stray)}")
        self.findings = {
            "queues": queues,
            "sizes": [f"during the run: {v}" for v in self.watch.oversized] + snap.oversized(),
            "provider": self.verify_provider(snap),
            "requests": self.verify_requests(snap),
            "handout": self.verify_handout(),
            "clones": self.verify_clones(),
            "answers": self.verify_answers(),
            "slots": self.verify_slots(),
        }
        self.findings["processes"] = self.problems + self.stop()
        self.findings["logs"] = self.verify_logs()

    def verify_provider(self, snap: Snapshot) -> list[str]:
        problems = []
        held = inventory(self.inventory_file)
        for pool in held.keys() - POOLS.keys():
            problems.append(f"provider pool {pool} is not configured: {sorted(held[pool])}")
        for pool in POOLS:
            there = held.get(pool, set())
            live = snap.queues[pool]["ready"] | snap.queues[pool]["running"]
            if there - live:
                problems.append(f"{pool}: in the provider but not ready or running: "
                                f"{sorted(there - live)}")
            if live - there:
                problems.append(f"{pool}: ready or running but not in the provider: "
                                f"{sorted(live - there)}")
        return problems

    def verify_requests(self, snap: Snapshot) -> list[str]:
        problems = []
        held = inventory(self.inventory_file)
        found = requests_in_redis(self.client)
        owners = vms_by_request(self.client)
        delivered: dict[str, str] = {}
        for request_id, request in self.ledger.requests.items():
            if request_id not in found:
                problems.append(f"request {request_id} ({request.order}) is not in Redis")
        for request_id, fields in sorted(found.items()):
            status = fields.get("status")
            mine = self.ledger.requests.get(request_id)
            if mine is not None and mine.deleted and status != "deleted":
                problems.append(f"request {request_id} was deleted (200) but is {status}")
            if (mine is not None and mine.seen is not None and status != mine.seen
                    and not (mine.deleted and status == "deleted")):
                problems.append(f"request {request_id} was seen {mine.seen}, is now {status}")
            entries = parse_requested(fields.get("requested", ""))
            if mine is not None:
                asked = collections.Counter[str]()
                for alias, _pool, count in entries:
                    asked[alias] += count
                if dict(asked) != mine.order:
                    problems.append(f"request {request_id}: asked for {mine.order}, "
                                    f"recorded {fields.get('requested')}")
            if status == "ready":
                for alias, pool, count in entries:
                    vms = self.client.smembers(schema.request_vms(request_id, alias, pool))
                    if len(vms) != count:
                        problems.append(f"ready request {request_id}: {len(vms)} VMs of "
                                        f"{alias}:{pool}, asked {count}: {sorted(vms)}")
                    for vm in vms:
                        if vm in delivered:
                            problems.append(f"{vm} delivered to {delivered[vm]} and "
                                            f"{request_id}")
                        delivered[vm] = request_id
                        where = ("running" if vm in snap.queues[pool]["running"]
                                 else "not running")
                        if (where != "running" or vm not in held.get(pool, set())
                                or self.client.hget(schema.active(pool), vm) is None
                                or self.client.hget(schema.vm(vm), "checkout") is None):
                            problems.append(
                                f"ready request {request_id}: {vm} of {pool} is {where}, "
                                f"{'in' if vm in held.get(pool, set()) else 'not in'} the "
                                f"provider, vm hash {self.client.hgetall(schema.vm(vm))}")
            elif status == "failed":
                if not fields.get("failure_reason"):
                    problems.append(f"failed request {request_id} has no failure_reason: "
                                    f"{fields}")
            elif status != "deleted":
                problems.append(f"request {request_id} is not finished: {fields}")
            elif mine is not None and not mine.deleted:
                problems.append(f"request {request_id} is deleted, no client deleted it")
            if status in ("failed", "deleted"):
                live = {vm for pool in POOLS for vm in owners.get(request_id, set())
                        if vm in snap.queues[pool]["ready"] | snap.queues[pool]["running"]}
                if live:
                    problems.append(f"{status} request {request_id} left VMs live: "
                                    f"{sorted(live)}")
        return problems

    def verify_handout(self) -> list[str]:
        problems = []
        handed: dict[str, tuple[str, float]] = {}
        for vm, client, at in self.ledger.checkouts:
            if vm in handed:
                problems.append(f"{vm} checked out by {handed[vm][0]} at {handed[vm][1]:.2f}s "
                                f"and by {client} at {at:.2f}s")
            handed[vm] = (client, at)
        for request_id, vms in vms_by_request(self.client).items():
            if vms & handed.keys():
                problems.append(f"checked out VMs of request {request_id}: "
                                f"{sorted(vms & handed.keys())}")
        return problems

    def verify_clones(self) -> list[str]:
        clones = collections.Counter(vm for log in self.manager_logs if log.exists()
                                     for _pool, vm in CLONED.findall(log.read_text()))
        return [f"{vm} cloned {n} times" for vm, n in sorted(clones.items()) if n > 1]

    def verify_slots(self) -> list[str]:
        """Nothing is pending any more: no clone slot may still be taken, by a live manager
        or by one that was killed (its slots are given back by the others)."""
        problems = [f"{key} = {taken} with no clone in flight"
                    for key in (schema.tasks_clone(), schema.tasks_ondemandclone())
                    if (taken := int(self.client.get(key) or 0))]
        for owner in self.client.hkeys(schema.tasks_slot_owners()):
            for key in (schema.tasks_clone_slots(owner), schema.tasks_ondemandclone_slots(owner)):
                if held := self.client.smembers(key):
                    problems.append(f"{key} still holds {sorted(held)}")
        return problems

    def verify_answers(self) -> list[str]:
        problems = []
        for answer in self.ledger.answers:
            if answer.kind in ("ok", "empty"):
                continue
            window = ("redis" if answer.kind == "redis-503"
                      else "worker" if answer.kind.startswith("conn:") else None)
            if window and any(a <= answer.at <= b and kind == window
                              for a, b, kind in self.windows):
                continue
            problems.append(f"at {answer.at:.2f}s {answer.route}: {answer.kind} "
                            f"{answer.detail}".rstrip())
        return problems[:30]

    def verify_logs(self) -> list[str]:
        problems = []
        for log in (*self.manager_logs, self.api_log):
            text = log.read_text(errors="replace") if log.exists() else ""
            for needle in ("Traceback", "WORKER TIMEOUT"):
                if needle in text:
                    problems.append(f"{log.name}: {needle}")
            if CRASHED.search(text):
                problems.append(f"{log.name}: an actor crashed")
        return problems

    def stop(self) -> list[str]:
        """SIGTERM every process; each must exit 0."""
        problems = []
        live = [p for p in (*self.managers, self.api) if p is not None and p.poll() is None]
        for process in live:
            process.terminate()
        for process in live:
            try:
                code = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait(timeout=10)
            if code != 0:
                problems.append(f"{process.args[3]} (pid {process.pid}) exited with {code}")
        return problems

    # -- the report -------------------------------------------------------------------------
    def summary(self) -> str:
        kinds = collections.Counter((a.route, a.kind) for a in self.ledger.answers)
        statuses = collections.Counter(
            fields.get("status") for fields in requests_in_redis(self.client).values())
        lines = [f"chaos seed {self.seed} (replay: {SEED_ENV}={self.seed})",
                 f"timings: {', '.join(f'{k} {v:.1f}s' for k, v in self.timings.items())}",
                 f"watch samples: {self.watch.samples}", "faults applied:",
                 *(f"  {line}" for line in self.applied),
                 f"checkouts: {len(self.ledger.checkouts)} VMs, returns: {self.ledger.returns}",
                 f"on-demand requests: {len(self.ledger.requests)} made by the client, "
                 f"{sum(r.deleted for r in self.ledger.requests.values())} deleted; "
                 f"in Redis: {dict(statuses)}",
                 "answers by route and kind:",
                 *(f"  {route} {kind}: {n}" for (route, kind), n in sorted(kinds.items()))]
        return "\n".join(lines)

    def report(self, failure: str) -> str:
        parts = [failure, self.summary(), "schedule:", *(f"  {f}" for f in self.faults)]
        for log in (*self.manager_logs, self.api_log, self.tmp / "redis" / "redis.log"):
            parts += [f"--- tail of {log.name} ---", tail(log)]
        return "\n".join(parts)


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chaos]:
    """One chaos run for the module, settled and checked; its tests read its findings.

    The redis-server is started here, on the main thread, which outlives it (the server
    dies with the thread that started it) and which applies the faults, Redis restart
    included."""
    seed = chaos_seed()
    rng = random.Random(seed)
    faults = fault_schedule(rng)
    print(f"\nchaos seed {seed} (replay: {SEED_ENV}={seed}); schedule:")
    for fault in faults:
        print(f"  {fault}")
    tmp_path = tmp_path_factory.mktemp("chaos")
    server = EmbeddedRedis(data_dir=tmp_path / "redis", persist=True, hardened=False,
                           binary=find_redis_server(prefer_system=True))
    server.start()
    started: list[subprocess.Popen[str]] = []
    run = Chaos(tmp_path, server, started, seed, faults, rng)
    try:
        try:
            run.execute()
            run.verify()
        except AssertionError as error:
            raise AssertionError(run.report(f"seed {seed}: {error}")) from None
        print(run.summary())
        yield run
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        run.client.close()
        server.stop()


def check(run: Chaos, group: str) -> None:
    problems = run.findings[group]
    assert not problems, run.report(f"seed {run.seed}, {group}:\n" + "\n".join(problems))


def test_no_vm_in_two_queues(chaos: Chaos) -> None:
    check(chaos, "queues")


def test_no_pool_above_its_size(chaos: Chaos) -> None:
    check(chaos, "sizes")


def test_provider_and_redis_agree(chaos: Chaos) -> None:
    check(chaos, "provider")


def test_every_request_is_finished_and_correct(chaos: Chaos) -> None:
    check(chaos, "requests")


def test_no_vm_handed_out_twice(chaos: Chaos) -> None:
    check(chaos, "handout")


def test_no_vm_cloned_twice(chaos: Chaos) -> None:
    check(chaos, "clones")


def test_no_error_answer_outside_its_fault(chaos: Chaos) -> None:
    check(chaos, "answers")


def test_processes_ran_and_stopped_cleanly_with_no_traceback(chaos: Chaos) -> None:
    check(chaos, "processes")
    check(chaos, "logs")


def test_no_clone_slot_left_taken(chaos: Chaos) -> None:
    check(chaos, "slots")
