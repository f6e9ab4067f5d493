"""``vmpooler run`` with an aws pool on the moto server, as a real process.

The configuration is vmpooler-provider-ec2's own example (``tests/data``), pointed at moto.
The pool fills from EC2 (an earlier run's instance of a pool no longer configured is
purged at start), serves a vmfloaty-style checkout and an on-demand request over HTTP,
destroys the returned VM, and ends with every instance in EC2 known to Redis and every VM
in Redis an instance in EC2. Readiness is EC2's status checks: nothing connects to the
10.x addresses moto hands out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests import moto_ec2
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


@pytest.fixture
def manager(tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
            moto: moto_ec2.MotoServer,
            ) -> Iterator[tuple[int, Path]]:
    ec2 = moto.client()
    ec2.run_instances(ImageId=moto_ec2.AMI, MinCount=1, MaxCount=1, InstanceType="t3.micro",
                      Placement={"AvailabilityZone": moto_ec2.ZONE},
                      TagSpecifications=[{"ResourceType": "instance", "Tags": [
                          {"Key": "pool", "Value": "retired-pool"},
                          {"Key": "vm_name", "Value": "leftover1"}]}])
    # The gem's own example, with what a moto server needs: a region and zone it knows,
    # one of its AMIs, its endpoint; and short loops, a small pool, EC2's status checks.
    document = yaml.safe_load(EXAMPLE.read_text())
    document[":config"] = {"check_loop_delay_min": 1, "check_loop_delay_max": 1,
                           "task_limit": 4, "vm_checktime": 1,
                           "logfile": str(tmp_path / "vmpooler.log")}
    document[":redis"] = {"server": "127.0.0.1", "port": redis_server.port}
    document[":providers"][":aws"].update({
        "region": moto_ec2.REGION, "zone": moto_ec2.ZONE, "endpoint_url": moto.url,
        "state_poll_interval": 0.2, "vm_ready_check": "instance_status",
        "purge_unconfigured_resources": True, "skip_dns_check_before_creating_vm": True,
        "instance_tags": {"team": "ci"}})
    (pool,) = document[":pools"]
    assert pool["name"] == POOL and pool["provider"] == "aws"
    pool.update({"template": moto_ec2.AMI, "zone": moto_ec2.ZONE, "size": SIZE})
    config = tmp_path / "vmpooler.yaml"
    config.write_text(yaml.safe_dump(document))
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **moto_ec2.CREDENTIALS}
    with open(tmp_path / "run.out", "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "vmpooler.web.cli", "run", "--config", str(config),
             "--bind", f"127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT,
            text=True, env=env)
        try:
            yield port, tmp_path
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def test_an_aws_pool_fills_serves_and_stays_in_sync_with_ec2(
        manager: tuple[int, Path], redis_client: redis.Redis,
        moto: moto_ec2.MotoServer) -> None:
    port, tmp_path = manager
    ec2 = moto.client()

    def explain() -> str:
        return (tmp_path / "run.out").read_text()[-3000:]

    def in_sync() -> bool:
        names = moto_ec2.vm_names(ec2, POOL)
        return (redis_client.scard(schema.ready(POOL)) == SIZE
                and not redis_client.scard(schema.pending(POOL))
                and len(names) == len(set(names)) and set(names) == in_redis(redis_client))

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
