"""A running EC2 API for tests: moto in server mode (``moto_server``) on a free loopback
port, one per test session, with the fault-injecting proxy of :mod:`tests.ec2_faults` in
front of it when a test wants faults; and an aws provider's context pointing at either.

moto validates AMI ids here (``MOTO_ENABLE_AMI_VALIDATION``) so a missing template fails as
on EC2. The addresses it gives instances (10.x) are no hosts of this machine: nothing here
connects to them (readiness is ``instance_status``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from vmpooler.actors.storage.embedded_redis import free_port
from vmpooler.providers.base import ProviderContext

REGION = "us-west-2"
ZONE = "us-west-2b"
AMI = "ami-03cf127a"  # one of moto's default images (an EBS root at /dev/sda1)
CREDENTIALS = {"ABS_AWS_ACCESS_KEY": "testing", "ABS_AWS_SECRET_KEY": "testing"}


@dataclass
class MotoServer:
    """A running ``moto_server``; ``url`` is its EC2 endpoint."""

    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        """Forget every resource (moto's own reset endpoint)."""
        request = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def client(self, endpoint: str | None = None) -> Any:
        """A boto3 EC2 client of the test's own (never the provider's)."""
        return boto3.client("ec2", region_name=REGION, endpoint_url=endpoint or self.url,
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def _binary() -> str:
    found = Path(sys.executable).with_name("moto_server")
    return str(found) if found.exists() else (shutil.which("moto_server") or "moto_server")


def start(deadline: float = 30.0) -> MotoServer:
    """Start ``moto_server -H 127.0.0.1 -p <free port>`` and wait (up to ``deadline``
    seconds) until it answers."""
    port = free_port()
    env = {**os.environ, "MOTO_ENABLE_AMI_VALIDATION": "true"}
    process = subprocess.Popen([_binary(), "-H", "127.0.0.1", "-p", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = MotoServer(process, port)
    until = time.monotonic() + deadline
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"moto_server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return server
        except OSError:
            if time.monotonic() > until:
                server.stop()
                raise RuntimeError(f"moto_server not listening after {deadline} s") from None
            # the server's own start-up: nothing to synchronise on but its port
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(0.05)


_SHARED: list[MotoServer] = []


def shared() -> MotoServer:
    """This session's server, started at the first use and killed when the session ends
    (by tests/conftest.py; at the process's exit otherwise)."""
    if not _SHARED or _SHARED[0].process.poll() is not None:
        _SHARED[:] = [start()]
        atexit.register(_SHARED[0].stop)
    return _SHARED[0]


def stop_shared() -> None:
    """Kill this session's server, if it runs (tests/conftest.py, at the session's end)."""
    for server in _SHARED:
        server.stop()
    _SHARED.clear()


@pytest.fixture
def moto() -> Iterator[MotoServer]:
    """The session's moto server, emptied for this test."""
    server = shared()
    server.reset()
    yield server


def context(endpoint: str, pools: Mapping[str, Mapping[str, Any]], *,
            settings: Mapping[str, Any] | None = None, name: str = "aws",
            dns_domains: Mapping[str, str | None] | None = None) -> ProviderContext:
    """An aws provider's context against ``endpoint``: short polls and waits for tests."""
    return ProviderContext(
        name=name,
        settings={"provider_class": "aws", "region": REGION, "zone": ZONE,
                  "amisize": "t3.micro", "endpoint_url": endpoint,
                  "state_poll_interval": 0.05, "state_wait_timeout": 20,
                  "visibility_grace": 5, "api_timeout": 5, "vm_ready_check": "instance_status",
                  "retry_mode": "standard", **CREDENTIALS, **(settings or {})},
        pools=pools, global_settings={}, dns_domains=dns_domains or {})


def live_instances(client: Any, **tags: str) -> list[dict[str, Any]]:
    """Every instance not terminated (nor shutting down), with these tag values."""
    filters = [{"Name": "instance-state-name",
                "Values": ["pending", "running", "stopping", "stopped"]}]
    filters += [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
    reservations = client.describe_instances(Filters=filters)["Reservations"]
    return [i for r in reservations for i in r["Instances"]]


def vm_names(client: Any, pool: str) -> list[str]:
    """The ``vm_name`` tags of the pool's live instances, one entry per instance (a name
    twice means a VM made twice)."""
    return sorted(t["Value"] for i in live_instances(client, pool=pool)
                  for t in i.get("Tags", ()) if t["Key"] == "vm_name")
