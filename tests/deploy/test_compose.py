"""``compose.yaml`` through podman-compose: Redis with a password, two API services and two
manager replicas sharing the pools; a checkout; a stopped manager's pools taken over.

Prometheus is left out of ``up`` (its image cannot be pulled here); its configuration's
targets are checked by scraping them the way it would, by service name from the network.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator

import pytest
import yaml

from tests.deploy.podman import REPO, Podman, quiet
from tests.deploy.test_image import free_port
from tests.http_client import eventually, get, pools_full, request

COMPOSE = REPO / "compose.yaml"
SCRAPE = ("import sys, urllib.request as r; "
          "print(r.urlopen(sys.argv[1], timeout=5).read().decode())")


class Compose:
    """podman-compose on ``compose.yaml`` as one project."""

    def __init__(self, podman: Podman, project: str, env: dict[str, str]) -> None:
        self.podman = podman
        self.project = project
        self.env = {**podman.env, **env}

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "podman_compose", "--project-name", self.project,
             "--file", str(COMPOSE), *args],
            env=self.env, cwd=REPO, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            pytest.fail(f"podman-compose {' '.join(args)} exited {done.returncode}:\n"
                        f"{quiet(done.stderr)}\n{done.stdout[-2000:]}")
        return done

    def container(self, service: str, index: int = 1) -> str:
        return f"{self.project}_{service}_{index}"


@pytest.fixture
def compose(podman: Podman, vmpooler_image: str, redis_image: str) -> Iterator[Compose]:
    project = f"vmptest{secrets.token_hex(3)}"
    ports = {"VMPOOLER_PORT": str(free_port()), "VMPOOLER_PORT_2": str(free_port())}
    stack = Compose(podman, project, {"VMPOOLER_IMAGE": vmpooler_image,
                                      "REDIS_IMAGE": redis_image,
                                      "REDIS_PASSWORD": secrets.token_hex(12), **ports})
    try:
        yield stack
    finally:
        subprocess.run([sys.executable, "-m", "podman_compose", "--project-name", project,
                        "--file", str(COMPOSE), "down", "--volumes", "--timeout", "5"],
                       env=stack.env, cwd=REPO, capture_output=True, timeout=300)


@pytest.mark.timeout(240)  # waits up to 90 s for the pools to fill, then for the handover
def test_compose_runs_two_apis_and_two_managers_sharing_the_pools(compose: Compose) -> None:
    compose("up", "--detach", "redis", "api", "api-2", "manager")
    api = f"http://127.0.0.1:{compose.env['VMPOOLER_PORT']}"
    api_2 = f"http://127.0.0.1:{compose.env['VMPOOLER_PORT_2']}"
    logs = lambda: "\n".join(compose.podman.logs(compose.container(s))  # noqa: E731
                             for s in ("api", "manager"))
    eventually(lambda: pools_full(api), 90, "every pool full", logs)

    def managers() -> dict[str, object]:
        status, body = get(f"{api_2}/api/v3/readiness")
        return body["managers"] if status == 200 else {}

    shared = eventually(lambda: (m := managers()).get("live") == 2
                        and all(member["pools"] >= 1 for member in m["members"])
                        and m["unheld_pools"] == 0 and m, 60,
                        "both managers holding pools", logs)
    assert sum(member["pools"] for member in shared["members"]) == 4

    vm = checkout(api_2, "centos-9-x86_64")
    hostname = vm["centos-9-x86_64"]["hostname"]
    assert get(f"{api}/api/v3/vm/{hostname}")[0] == 200

    # Prometheus's targets, as conf/compose/prometheus.yml finds them by DNS.
    scrape = yaml.safe_load((REPO / "conf/compose/prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    for job in jobs.values():
        for name in job["dns_sd_configs"][0]["names"]:
            assert name in services
            text = compose.podman("exec", compose.container("api"), "python3", "-c", SCRAPE,
                                  f"http://{name}:4567{job['metrics_path']}").stdout
            assert "vmpooler_" in text, f"{name}: {text[:300]}"

    compose.podman("stop", "--time", "20", compose.container("manager", 2))
    taken = eventually(lambda: (m := managers()).get("live") == 1 and m["unheld_pools"] == 0
                       and m["members"][0]["pools"] == 4 and m, 60,
                       "the remaining manager holding all four pools", logs)
    assert taken["members"][0]["pools"] == 4
    assert checkout(api, "debian-12-x86_64")["ok"] is True


def checkout(base_url: str, pool: str) -> dict[str, object]:
    """A VM of ``pool``, asked for again while the pool is empty (503), as clients do."""
    def attempt() -> dict[str, object] | None:
        status, body = request("POST", f"{base_url}/api/v3/vm/{pool}")
        assert status in (200, 503), (status, body)
        return body if status == 200 else None

    return eventually(attempt, 30, f"a VM of {pool}")


def test_compose_file_keeps_its_password_out_of_the_images_and_runs_read_only() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    for name in ("api", "api-2", "manager"):
        service = services[name]
        assert service["read_only"] is True and service["tmpfs"] == ["/tmp"]
        assert service["environment"]["REDIS_PASSWORD"].startswith("${REDIS_PASSWORD")
    assert services["manager"]["deploy"] == {"mode": "replicated", "replicas": 2}
    assert "--requirepass" in services["redis"]["command"]
    assert json.dumps(services).count("${REDIS_PASSWORD") == 4 and os.sep == "/"
