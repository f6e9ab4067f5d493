"""``vmpooler api`` (2 gunicorn workers) and ``vmpooler manager`` writing to one Prometheus
multiprocess directory; the API's ``/prometheus`` scrape, parsed by ``prometheus_client``,
reports both."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.api_manager import Stack, api_and_manager_stack, http
from tests.harness import wait_until
from tests.test_manager_process import full, write_config
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis

pytestmark = pytest.mark.integration

Running = tuple[Stack, Path]
"""The manager and the API, and their multiprocess directory."""
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(root: str) -> Samples:
    with urllib.request.urlopen(f"{root}/prometheus", timeout=10) as answer:
        text = answer.read().decode()
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def get(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset({"vmpooler_instance": "east", **labels}.items())))


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every series of ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in samples.items()
               if n == name and set(labels.items()) <= set(ls))


@pytest.fixture
def stack(tmp_path: Path, redis_server: EmbeddedRedis,
          redis_client: redis.Redis) -> Iterator[Running]:
    config = write_config(tmp_path / "f.yaml", redis_port=redis_server.port,
                          pools={"alpha": 3, "beta": 2}, dummy={})
    document = yaml.safe_load(config.read_text())
    document[":prometheus"] = {"prefix": "east",
                               "multiprocess_dir": str(tmp_path / "prometheus")}
    config.write_text(yaml.safe_dump(document))
    with api_and_manager_stack(tmp_path, config, debug=False) as running:
        yield running, tmp_path / "prometheus"
    assert "Traceback" not in (tmp_path / "api.log").read_text()
    assert "Traceback" not in (tmp_path / "manager.log").read_text()


def test_one_scrape_reports_every_worker_and_the_manager(
    stack: Running, redis_client: redis.Redis,
) -> None:
    running, directory = stack
    root, base = running.root, running.url
    manager_pid = running.manager.pid

    def both_workers_counted() -> bool:
        assert http("GET", f"{base}/vm")[0] == 200
        pids = {int(f.stem.split("_")[-1]) for f in directory.glob("counter_*.db")}
        return len(pids - {manager_pid}) >= 2

    wait_until(both_workers_counted, 30, "requests served by both API workers")
    wait_until(lambda: full(redis_client, {"alpha": 3, "beta": 2}), 30, "the pools to fill")
    hosts = []
    for _ in range(3):
        status, body = http("POST", f"{base}/vm/alpha")
        assert status == 200, body
        hosts.append(body["alpha"]["hostname"].split(".")[0])
    assert http("POST", f"{base}/vm/nosuchpool")[0] == 404
    for vm in hosts:
        assert http("DELETE", f"{base}/vm/{vm}")[0] == 200
    wait_until(lambda: full(redis_client, {"alpha": 3}), 30, "alpha to refill")

    def reported() -> bool:
        samples = scrape(root)
        return (get(samples, "vmpooler_ready", poolname="alpha") == 3
                and get(samples, "vmpooler_running", poolname="alpha") == 0
                and get(samples, "vmpooler_ready", poolname="beta") == 2
                and (get(samples, "vmpooler_clone_count", poolname="alpha") or 0) >= 6)

    wait_until(reported, 30, "the manager's gauges after the refill")
    samples = scrape(root)
    assert get(samples, "vmpooler_checkout_success_total", poolname="alpha") == 3
    assert get(samples, "vmpooler_checkout_invalid_total", poolname="unknown") == 1  # nosuchpool
    assert get(samples, "vmpooler_delete_success_total") == 3
    # vmpooler counts POST /vm/:template as get.vm.template
    assert get(samples, "vmpooler_http_requests_vm_total", method="get", subpath="vm",
               operation="template") == 4
    assert get(samples, "vmpooler_http_requests_total", code="200", method="delete",
               path="/api/v3/vm") == 3
    assert get(samples, "vmpooler_http_request_duration_seconds_count", method="post",
               path="/api/v3/vm") == 4
    assert get(samples, "vmpooler_checkout_duration_count", poolname="alpha") == 3
    assert get(samples, "vmpooler_time_to_ready_state_count", poolname="beta") == 2
    assert total(samples, "vmpooler_clone_outcome_total", poolname="alpha",
                 result="success") >= 6
    assert get(samples, "vmpooler_clone_count", poolname="beta") == 2
