"""The Helm chart's manifests, rendered from vmpooler-deployment's own values file (plus a
pools list, our image and an external Redis), played by ``podman kube play``: one API pod and
two manager pods fill the pools, serve a checkout, share the pools through leases and answer
their probes; a manager pod killed (SIGKILL, then removed) hands its pools to the other.

What podman 4.3 does otherwise than a cluster is made up for here, each said where it
happens: it reads no ``Secret`` (``secretKeyRef`` values are written in), publishes every
``containerPort`` on the host (the ports are left out: three pods listen on 4567), runs no
probes without systemd (the test asks the probe paths itself), and has no cluster DNS or
Service routing (pods and the Redis container share a podman network; the test reaches the
pods by their addresses).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.deploy.podman import Podman
from tests.deploy.test_compose import checkout
from tests.helm.chart import CHART, DUMMY_POOLS, render, their_values
from tests.http_client import eventually, get, pools_full

PORT = 4567


def kube_values(image: str, redis_host: str, secret_name: str) -> dict[str, Any]:
    """vmpooler-deployment's values, with our image, the dummy provider's pools, an external
    Redis whose password is in ``secret_name``, one API and two managers."""
    values = their_values()
    repository, tag = image.rsplit(":", 1)
    values["image"] = {"repository": repository, "tag": tag, "pullPolicy": "Never"}
    values["pools"] = DUMMY_POOLS
    values["baseconfig_extras"] = {":providers": {":dummy": {
        "provider_class": "dummy", "createvm_max_time": 1, "destroyvm_max_time": 1,
        "skip_dns_check_before_creating_vm": True}}}
    values["config"] = {"check_loop_delay_min": 1, "check_loop_delay_max": 5,
                        "manager_heartbeat_interval": 2}  # a dead manager lapses in 6 s
    values["redis"] = {**values.get("redis", {}), "enabled": False, "host": redis_host,
                       "existingSecret": secret_name}
    values["api"] = {**values["api"], "replicaCount": 1, "workers": 1}
    values["manager"] = {**values["manager"], "replicaCount": 2}
    for part in ("api", "manager"):  # this machine has 2 cores and a few GB to spare
        values[part]["resources"] = {}
    return values


def for_podman(docs: list[dict[str, Any]], secret_values: dict[str, dict[str, str]],
               release: str) -> list[dict[str, Any]]:
    """The manifests podman 4.3 can play: every ``secretKeyRef`` replaced by its value
    (podman stores a played Secret as YAML and then fails to read it as JSON), no
    ``ports`` (podman would publish each on the host, where a cluster publishes none), and
    every ConfigMap renamed after ``release`` (podman plays each as a volume of the host,
    named as the ConfigMap: two runs would share it)."""
    renamed = {}
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            old = doc["metadata"]["name"]
            renamed[old] = doc["metadata"]["name"] = f"{release}-{old}"
    for doc in docs:
        if doc["kind"] != "Deployment":
            continue
        for volume in doc["spec"]["template"]["spec"].get("volumes", []):
            if "configMap" in volume:
                name = volume["configMap"]["name"]
                volume["configMap"]["name"] = renamed.get(name, name)
        for c in doc["spec"]["template"]["spec"]["containers"]:
            c.pop("ports", None)
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None:
                    env.pop("valueFrom")
                    env["value"] = secret_values[ref["name"]][ref["key"]]
    return docs


class Cluster:
    """The played manifests and what they run beside: a network and a Redis container, all
    named after a release of their own, so that a run left behind (or running beside) does
    not hold the pod names this one plays."""

    def __init__(self, podman: Podman, suffix: str) -> None:
        self.podman = podman
        self.release = f"vmpooler-{suffix}"
        self.network = f"vmpooler-kube-{suffix}"
        self.redis = f"redis-{suffix}"
        self.manifest: Path | None = None
        self.volumes: list[str] = []

    def pods(self, prefix: str) -> list[str]:
        names = self.podman("pod", "ps", "--format", "{{.Name}}").stdout.split()
        return sorted(n for n in names if n.startswith(prefix))

    def address(self, pod: str) -> str:
        infra = self.podman("pod", "inspect", "--format", "{{.InfraContainerID}}",
                            pod).stdout.strip()
        return self.podman("inspect", "--format",
                           f'{{{{(index .NetworkSettings.Networks "{self.network}").IPAddress}}}}',
                           infra).stdout.strip()

    def logs(self, prefix: str) -> str:
        return "\n".join(f"--- {c}\n{self.podman.logs(c)}" for c in self.containers(prefix))

    def containers(self, prefix: str) -> list[str]:
        names = self.podman("ps", "--all", "--format", "{{.Names}}").stdout.split()
        return [n for n in names if n.startswith(prefix) and not n.endswith("-infra")]

    def teardown(self) -> None:
        if self.manifest is not None:
            self.podman("kube", "down", str(self.manifest), check=False)
            self.podman("volume", "rm", "--force", *self.volumes, check=False)
        self.podman.remove(self.redis)
        self.podman("network", "rm", "--force", self.network, check=False)


@pytest.fixture
def cluster(podman: Podman) -> Iterator[Cluster]:
    played = Cluster(podman, secrets.token_hex(3))
    try:
        yield played
    finally:
        played.teardown()


def test_the_chart_plays_with_two_managers_and_moves_a_killed_managers_pools(
        cluster: Cluster, podman: Podman, vmpooler_image: str, redis_image: str,
        tmp_path: Path) -> None:
    password = secrets.token_hex(16)
    podman("network", "create", cluster.network)
    podman("run", "--detach", "--name", cluster.redis, "--network", cluster.network,
           redis_image, "redis-server", "--requirepass", password)
    with helm_python.Chart.load(str(CHART)) as chart:
        docs = render(chart, kube_values(vmpooler_image, cluster.redis, "site-redis"),
                      release=cluster.release)
    release = cluster.release
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] == "Deployment") == [
        f"{release}-api", f"{release}-manager"]
    cluster.manifest = tmp_path / "manifests.yaml"
    cluster.manifest.write_text(yaml.safe_dump_all(
        for_podman(docs, {"site-redis": {"redis-password": password}}, cluster.release)))
    cluster.volumes = [d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"]
    podman("kube", "play", "--network", cluster.network, str(cluster.manifest), timeout=300)

    api_pod, = cluster.pods(f"{release}-api")
    managers = cluster.pods(f"{release}-manager")
    assert len(managers) == 2, managers
    api = f"http://{cluster.address(api_pod)}:{PORT}"
    everything = lambda: cluster.logs(release)  # noqa: E731
    eventually(lambda: pools_full(api), 120, "every pool full", everything)

    # The probes of both Deployments, as the chart declares them.
    assert get(f"{api}/healthcheck") == (200, {"ok": True})
    eventually(lambda: get(f"{api}/api/v3/readiness")[0] == 200, 60, "API ready", everything)
    for pod in managers:
        manager = f"http://{cluster.address(pod)}:{PORT}"
        assert get(f"{manager}/healthcheck")[0] == 200
        _, ready = eventually(lambda m=manager: (r := get(f"{m}/ready"))[0] == 200 and r,
                                   60, f"{pod} ready", everything)
        assert ready["ok"] is True
        metrics = get(f"{manager}/prometheus")
        assert metrics[0] == 200 and "vmpooler_ready" in metrics[1]

    def leases() -> dict[str, Any]:
        status, body = get(f"{api}/api/v3/readiness")
        return body["managers"] if status == 200 else {}

    shared = eventually(lambda: (m := leases()).get("live") == 2 and m["unheld_pools"] == 0
                        and all(member["pools"] >= 1 for member in m["members"]) and m,
                        60, "both managers holding pools", everything)
    assert sum(member["pools"] for member in shared["members"]) == len(DUMMY_POOLS)
    assert checkout(api, DUMMY_POOLS[0]["name"])["ok"] is True

    # A manager pod killed outright: its leases lapse and the other manager takes its pools.
    podman("pod", "rm", "--force", "--time", "0", managers[1])
    taken = eventually(lambda: (m := leases()).get("live") == 1 and m["unheld_pools"] == 0
                       and m["members"][0]["pools"] == len(DUMMY_POOLS) and m, 90,
                       "the other manager holding every pool", everything)
    assert taken["members"][0]["pools"] == len(DUMMY_POOLS)
    eventually(lambda: pools_full(api), 60, "every pool full again", everything)
    assert checkout(api, DUMMY_POOLS[1]["name"])["ok"] is True
