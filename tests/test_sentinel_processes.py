"""Redis Sentinel with real processes: a master, one replica (``--replicaof``) and two
sentinels (``redis-server <conf> --sentinel``), a ``vmpooler manager`` and a two-worker
``vmpooler api`` configured with ``:redis: sentinels``; then ``SENTINEL FAILOVER``. The API
answers 503 at most briefly and then 200 from the new master, and the manager keeps filling
its pools there."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml

from tests.harness import wait_until
from tests.test_manager_process import VMPOOLER, full, spawn, write_config
from tests.test_redis_faults_processes import call, processes, status_code
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.connection import connect_sentinel
from vmpooler.actors.storage.dlq_store import DeadLetter
from vmpooler.actors.storage.embedded_redis import find_redis_server, free_port

pytestmark = [pytest.mark.integration, pytest.mark.solo]  # a failover timed in seconds

__all__ = ["processes"]  # the fixture, imported for its name

MASTER = "vmpooler"


class Servers:
    """redis-server processes (master, replica, sentinels) in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.binary = find_redis_server(prefer_system=True)
        self.children: list[subprocess.Popen[bytes]] = []
        self.master_port, self.replica_port = free_port(), free_port()
        self.sentinel_ports: list[int] = []

    def _run(self, name: str, *args: str) -> None:
        folder = self.directory / name
        folder.mkdir()
        log = open(folder / "log", "ab")  # noqa: SIM115 - closed by the child
        self.children.append(subprocess.Popen([self.binary, *args], cwd=folder, stdout=log,
                                              stderr=subprocess.STDOUT))

    def start(self, sentinels: int = 2) -> Servers:
        common = ("--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
        self._run("master", "--port", str(self.master_port), *common)
        self._run("replica", "--port", str(self.replica_port), *common,
                  "--replicaof", "127.0.0.1", str(self.master_port))
        wait_until(lambda: self.replicating(self.replica_port), 20, "the replica to sync")
        for n in range(sentinels):
            port = free_port()
            self.sentinel_ports.append(port)
            conf = self.directory / f"sentinel{n}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.directory}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.master_port} 1\n"
                f"sentinel down-after-milliseconds {MASTER} 1000\n"
                f"sentinel failover-timeout {MASTER} 10000\n")
            self._run(f"sentinel{n}", str(conf), "--sentinel")
        wait_until(self._sentinels_see_the_replica, 30, "the sentinels to see the replica")
        return self

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, decode_responses=True,
                           socket_timeout=2, socket_connect_timeout=2)

    def replicating(self, port: int) -> bool:
        """Whether the server on ``port`` is a replica in sync with its master."""
        try:
            info = self.client(port).info("replication")
        except redis.RedisError:
            return False
        return info.get("role") == "slave" and info.get("master_link_status") == "up"

    def _sentinels_see_the_replica(self) -> bool:
        try:
            for port in self.sentinel_ports:
                replicas = self.client(port).sentinel_slaves(MASTER)
                if not any(r["port"] == self.replica_port and not r["is_sdown"]
                           for r in replicas):
                    return False
            return True
        except redis.RedisError:
            return False

    def master_address(self) -> tuple[str, int]:
        host, port = self.client(self.sentinel_ports[0]).sentinel_get_master_addr_by_name(
            MASTER)
        return host, int(port)

    def stop(self) -> None:
        for child in self.children:
            child.terminate()
        for child in self.children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(timeout=10)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    started = Servers(tmp_path / "redis")
    started.directory.mkdir()
    try:
        yield started.start()
    finally:
        started.stop()


@pytest.mark.parametrize("how", ["failover", "kill"])
def test_api_and_manager_follow_a_sentinel_failover(
    tmp_path: Path, servers: Servers, processes: list[subprocess.Popen[str]], how: str,
) -> None:
    """``failover``: ``SENTINEL FAILOVER``; ``kill``: the master is killed (SIGKILL) and the
    sentinels promote the replica once they see it down."""
    pools = {"alpha": 3}
    path = write_config(tmp_path / "f.yaml", redis_port=1, pools=pools, dummy={})
    document = yaml.safe_load(path.read_text())
    document[":redis"] = {"sentinels": [f"127.0.0.1:{p}" for p in servers.sentinel_ports],
                          "sentinel_master": MASTER, "reconnect_attempts": 3}
    path.write_text(yaml.safe_dump(document))
    client = connect_sentinel(tuple(("127.0.0.1", p) for p in servers.sentinel_ports), MASTER,
                              pool_size=4, pool_timeout=1, reconnect_attempts=3)
    manager = spawn(processes, "manager", "--config", str(path), log=tmp_path / "m.log")
    port = free_port()
    api = spawn(processes, "api", "--config", str(path), "--bind", f"127.0.0.1:{port}",
                "--workers", "2", log=tmp_path / "api.log")
    base = f"http://127.0.0.1:{port}/api/v3"
    wait_until(lambda: status_code(f"{base}/status") == 200, 30, "the API to answer")
    wait_until(lambda: full(client, pools), 60, "alpha to fill on the first master")
    assert servers.master_address()[1] == servers.master_port

    if how == "kill":
        servers.children[0].kill()
        servers.children[0].wait(timeout=10)
    else:
        servers.client(servers.sentinel_ports[0]).execute_command("SENTINEL", "FAILOVER",
                                                                  MASTER)
    codes: list[int] = []
    unavailable = 0.0

    def on_new_master() -> bool:
        started = time.monotonic()
        code = status_code(f"{base}/status")
        codes.append(code)
        nonlocal unavailable
        if code != 200:
            unavailable += time.monotonic() - started
        return servers.master_address()[1] == servers.replica_port and code == 200

    wait_until(on_new_master, 60, "the failover and the API answering from the new master")
    assert set(codes) <= {200, 503}, codes
    # writes the old master took between the promotion and its own demotion are lost with
    # its resync (asynchronous replication); the failover is over once it replicates
    if how == "failover":
        wait_until(lambda: servers.replicating(servers.master_port), 30,
                   "the old master to follow")
    # the new master takes writes: the API checks a VM out of it, the manager refills
    code, _, body = call("POST", f"{base}/vm", {"alpha": 1})
    assert code == 200, body
    taken = body["alpha"]["hostname"].split(".")[0]
    new_master = servers.client(servers.replica_port)
    assert new_master.sismember(schema.running("alpha"), taken)
    wait_until(lambda: full(new_master, pools), 60, "alpha to refill on the new master")
    # the readiness probe's own pool follows the sentinels too
    wait_until(lambda: status_code(f"{base}/readiness") == 200, 30, "readiness on the new master")
    later = [status_code(f"{base}/status") for _ in range(10)]
    assert later == [200] * 10
    letter = DeadLetter.now(vm="lost-vm", pool="alpha", queue="clone", error_class="Timeout",
                            error_message="failed", epoch=1_700_000_000)
    new_master.zadd(schema.dlq("clone"), {letter.member(): 1_700_000_000})
    listed = subprocess.run([*VMPOOLER, "dlq", "list", "--config", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "lost-vm" in listed.stdout  # the CLI found the new master too
    del document[":pools"]  # check-config reads the published pools through the sentinels
    bare = tmp_path / "nopools.yaml"
    bare.write_text(yaml.safe_dump(document))
    checked = subprocess.run([*VMPOOLER, "check-config", "--config", str(bare)],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    assert f"pools read from redis sentinel master {MASTER}" in checked.stdout, checked.stdout
    assert "name: alpha" in checked.stdout
    assert manager.poll() is None and api.poll() is None
    client.close()
    for log in ("m.log", "api.log"):
        assert "Traceback" not in (tmp_path / log).read_text(), log
    assert unavailable < 30, f"the API answered 503 for {unavailable:.1f} s"
