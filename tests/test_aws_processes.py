"""``vmpooler run`` with an aws pool on the moto server, as a real process.

The configuration is vmpooler-provider-ec2's own example (``tests/data``), pointed at moto.
The pool fills from EC2 (an earlier run's instance of a pool no longer configured is
purged at start), serves a vmfloaty-style checkout and an on-demand request over HTTP,
destroys the returned VM, and ends with every instance in EC2 known to Redis and every VM
in Redis an instance in EC2. Behind the fault proxy, the same pool rides out capacity
refusals, a refusal of its credentials and 30 % throttling. Readiness is EC2's status
checks: nothing connects to the 10.x addresses moto hands out.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests import moto_ec2
from tests.ec2_faults import FaultProxy, Faults
from tests.harness import wait_until
from tests.moto_ec2 import moto  # noqa: F401 (a fixture)
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).parent / "data" / "vmpooler-provider-ec2.example.yaml"
POOL = "almalinux-x86_64"  # the gem's example pool
SIZE = 2


def http(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    if method == "POST" and data is None:
        data = b""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=data)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def in_redis(client: redis.Redis) -> set[str]:
    """Every VM Redis holds for the pool, in any queue a live VM can be in."""
    return set().union(*(client.smembers(key(POOL)) for key in (
        schema.pending, schema.ready, schema.running)))


@contextlib.contextmanager
def running(tmp_path: Path, redis_port: int, endpoint: str, *,
            config: Mapping[str, Any] | None = None,
            provider: Mapping[str, Any] | None = None) -> Iterator[int]:
    """``vmpooler run`` on the gem's own example, pointed at ``endpoint``: a region, zone
    and AMI moto knows, short loops, a pool of ``SIZE``, EC2's status checks; ``config``
    and ``provider`` add to ``:config:`` and the aws provider's section. Yields the API's
    port; its output goes to ``run.out``, its log to ``vmpooler.log``."""
    document = yaml.safe_load(EXAMPLE.read_text())
    document[":config"] = {"check_loop_delay_min": 1, "check_loop_delay_max": 1,
                           "task_limit": 4, "vm_checktime": 1,
                           "logfile": str(tmp_path / "vmpooler.log"), **(config or {})}
    document[":redis"] = {"server": "127.0.0.1", "port": redis_port}
    document[":providers"][":aws"].update({
        "region": moto_ec2.REGION, "zone": moto_ec2.ZONE, "endpoint_url": endpoint,
        "state_poll_interval": 0.2, "vm_ready_check": "instance_status",
        "skip_dns_check_before_creating_vm": True, **(provider or {})})
    (pool,) = document[":pools"]
    assert pool["name"] == POOL and pool["provider"] == "aws"
    pool.update({"template": moto_ec2.AMI, "zone": moto_ec2.ZONE, "size": SIZE})
    path = tmp_path / "vmpooler.yaml"
    path.write_text(yaml.safe_dump(document))
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **moto_ec2.CREDENTIALS}
    with open(tmp_path / "run.out", "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "vmpooler.web.cli", "run", "--config", str(path),
             "--bind", f"127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT,
            text=True, env=env)
        try:
            yield port
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def in_sync_with(client: redis.Redis, ec2: Any) -> bool:
    """The pool full, nothing pending, every live instance in EC2 a VM Redis holds and the
    other way round, no name on two instances."""
    names = moto_ec2.vm_names(ec2, POOL)
    return (client.scard(schema.ready(POOL)) == SIZE and not client.scard(schema.pending(POOL))
            and len(names) == len(set(names)) and set(names) == in_redis(client))


@pytest.fixture
def manager(tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
            moto: moto_ec2.MotoServer,
            ) -> Iterator[tuple[int, Path]]:
    moto.client().run_instances(
        ImageId=moto_ec2.AMI, MinCount=1, MaxCount=1, InstanceType="t3.micro",
        Placement={"AvailabilityZone": moto_ec2.ZONE},
        TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": "pool", "Value": "retired-pool"}, {"Key": "vm_name", "Value": "leftover1"}]}])
    with running(tmp_path, redis_server.port, moto.url, provider={
            "purge_unconfigured_resources": True, "instance_tags": {"team": "ci"}}) as port:
        yield port, tmp_path


def test_an_aws_pool_fills_serves_and_stays_in_sync_with_ec2(
        manager: tuple[int, Path], redis_client: redis.Redis,
        moto: moto_ec2.MotoServer) -> None:
    port, tmp_path = manager
    ec2 = moto.client()

    def explain() -> str:
        return (tmp_path / "run.out").read_text()[-3000:]

    def in_sync() -> bool:
        return in_sync_with(redis_client, ec2)

    wait_until(in_sync, 40, "the aws pool full and in sync with EC2", explain=explain)
    wait_until(lambda: not moto_ec2.live_instances(ec2, pool="retired-pool"), 10,
               "the retired pool's instance purged at start", explain=explain)
    instance = moto_ec2.live_instances(ec2, pool=POOL)[0]
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags["team"] == "ci" and instance["InstanceType"] == "a1.large"  # the pool's
    assert tags["Name"].endswith(".subdomain.example.com")  # the provider's domain
    root = instance["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]
    assert ec2.describe_volumes(VolumeIds=[root])["Volumes"][0]["Size"] == 20  # '20' GB

    status, body = http(port, "POST", "/api/v3/vm/almalinux-64")
    assert status == 200, body
    name = body["almalinux-64"]["hostname"].split(".")[0]
    status, body = http(port, "GET", f"/api/v3/vm/{name}")
    assert status == 200 and body[name]["state"] == "running"

    status, body = http(port, "POST", "/api/v3/ondemandvm", {POOL: 1})
    assert status == 201, body
    request_id = body["request_id"]
    answer = wait_until(lambda: (lambda b: b if b.get("ready") else None)(
        http(port, "GET", f"/api/v3/ondemandvm/{request_id}")[1]), 30,
        "the on-demand request ready", explain=explain)
    assert len(answer[POOL]["hostname"]) == 1

    status, _ = http(port, "DELETE", f"/api/v3/vm/{name}")
    assert status == 200
    wait_until(lambda: name not in moto_ec2.vm_names(ec2, POOL), 30,
               "the returned VM terminated", explain=explain)
    wait_until(in_sync, 40, "the pool refilled, EC2 and Redis agreeing", explain=explain)
    status, body = http(port, "GET", "/api/v3/status?view=providers")
    assert status == 200 and body["providers"]["aws"]["circuit_breaker"] == "closed"
    assert body["providers"]["aws"]["connections"]["size"] >= 10


def test_an_aws_pool_rides_out_capacity_refusals_and_throttling(
        tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
        moto: moto_ec2.MotoServer) -> None:
    """No capacity: the clones fail, transient, and are tried again after the pool's
    back-off. Refused (``UnauthorizedOperation``): the pool enters its configuration-error
    state. Then, under 30 % throttling, it fills: EC2 and Redis agree, no VM made twice."""
    proxy = FaultProxy(moto.port, Faults(capacity=1.0)).start()
    ec2 = moto.client()
    log = tmp_path / "vmpooler.log"

    def explain() -> str:
        return log.read_text()[-3000:] if log.exists() else "(no log yet)"

    try:
        with running(tmp_path, redis_server.port, proxy.url,
                     config={"config_error_retry_interval": 1,
                             "circuit_breaker_failure_threshold": 50},
                     provider={"retry_mode": "standard"}):
            wait_until(lambda: proxy.injected["capacity"] >= 3, 30,
                       "capacity refusals tried again", explain=explain)
            assert moto_ec2.live_instances(ec2) == []
            assert "configuration error" not in log.read_text()
            proxy.set_faults(Faults(refuse="UnauthorizedOperation"))
            wait_until(lambda: "configuration error: clone of" in log.read_text(), 30,
                       "the pool's configuration-error state", explain=explain)
            assert "UnauthorizedOperation" in log.read_text()
            proxy.set_faults(Faults(throttle=0.3, seed=11))
            wait_until(lambda: in_sync_with(redis_client, ec2), 40,
                       "the pool full under throttling", explain=explain)
            assert proxy.injected["throttle"] >= 1
            assert "configuration error cleared" in log.read_text()
    finally:
        proxy.stop()
