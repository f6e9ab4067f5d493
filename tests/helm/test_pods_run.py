"""The pods the Helm chart in conf/helm/vmpooler renders, run here: the built-in Redis's command
line, and the API's and manager's arguments and environment, on loopback, with their exec
probes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import helm_python
import pytest
import redis

from tests.api_manager import spawn, stopped_after
from tests.harness import wait_until
from tests.helm.chart import container, environ_of, render, write_configmaps
from vmpooler.actors.storage.embedded_redis import find_redis_server, free_port

pytestmark = pytest.mark.integration  # the rendered pods' commands, run as processes

# The rendered pods run ------------------------------------------------------------------------

@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[Any]]]:
    with stopped_after() as started:
        yield started


def probe_passes(c: Mapping[str, Any], kind: str, environ: Mapping[str, str]) -> bool:
    command = c[kind]["exec"]["command"]
    if command[0] == "python3":
        command = [sys.executable, *command[1:]]
    return subprocess.run(command, env=environ, capture_output=True, timeout=10).returncode == 0


@pytest.mark.integration
def test_the_rendered_pods_run(chart: helm_python.Chart, tmp_path: Path,
                               processes: list[subprocess.Popen[Any]]) -> None:
    """The built-in Redis's command line, and the API's and manager's arguments and
    environment, run here on loopback (Services become 127.0.0.1; each pod its own /tmp), and
    their exec probes pass."""
    redis_port, api_port = free_port(), free_port()
    docs = render(chart, {
        "probeHandler": "exec", "service": {"port": api_port},
        "redis": {"port": redis_port, "master": {"extraFlags": ["--bind", "127.0.0.1"]}},
        "pools": [{"name": "debian-12-x86_64", "size": 1, "provider": "dummy"}],
    })
    etc = tmp_path / "etc" / "vmpooler"
    write_configmaps(docs, etc)
    binaries = str(Path(find_redis_server(prefer_system=True)).parent)

    store = container(docs, "vmpooler-redis-master")
    data = tmp_path / "data"
    data.mkdir()
    store_env = {**environ_of(docs, store, etc, tmp_path),
                 "PATH": f"{binaries}{os.pathsep}{os.environ['PATH']}"}
    args = [str(data) if arg == "/data" else arg for arg in store["args"]]
    processes.append(subprocess.Popen([*store["command"], *args], env=store_env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
    wait_until(lambda: probe_passes(store, "readinessProbe", store_env), 20,
               "the Redis pod's readiness probe")
    assert probe_passes(store, "livenessProbe", store_env)
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=redis_port).ping()
    assert redis.Redis(port=redis_port, password=store_env["REDIS_PASSWORD"]).ping()

    pods = {}
    for deployment in ("vmpooler-manager", "vmpooler-api"):
        c = container(docs, deployment)
        pod_tmp = tmp_path / deployment
        pod_tmp.mkdir()
        environ = {**os.environ, **environ_of(docs, c, etc, pod_tmp),
                   "REDIS_SERVER": "127.0.0.1", "HOME": str(pod_tmp)}
        environ["VMPOOLER_MANAGER_BIND"] = f"127.0.0.1:{free_port()}"
        args = [arg.replace("0.0.0.0:", "127.0.0.1:") for arg in c["args"]]
        spawn(processes, *args, cwd=pod_tmp, log=tmp_path / f"{deployment}.log", env=environ)
        pods[deployment] = (c, environ)
    api, api_env = pods["vmpooler-api"]
    wait_until(lambda: probe_passes(api, "readinessProbe", api_env), 40,
               "the API's readiness probe (a manager's heartbeat)")
    assert probe_passes(api, "livenessProbe", api_env)
    with urllib.request.urlopen(f"http://127.0.0.1:{api_port}/api/v3/vm", timeout=10) as answer:
        assert json.load(answer) == ["debian-12-x86_64"]
