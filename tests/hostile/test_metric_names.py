"""No metric names a user: ``quota.refused`` says what kind of requester was refused
(``token``, ``address``, ``anonymous``), never who, on ``/prometheus`` (which anyone may read)
and on the statsd, graphite and DogStatsD sinks.

Users are named ``zqu<n>victim`` so that any trace of them in a metric is easy to find.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator

import falcon.testing
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.api_harness import api_config, api_pool
from tests.harness import wait_until
from tests.hostile.service import Service, start_service
from tests.metric_sinks import GraphiteSink, StatsdSink
from tests.quota_harness import policy
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.metrics.push import DatadogMetrics, GraphiteMetrics, StatsdMetrics
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.storage import schema, timefmt
from vmpooler.web.api_context import ApiContext
from vmpooler.web.app import create_app

pytestmark = pytest.mark.integration

MARK = "zqu"
USERS = [f"{MARK}{n}victim" for n in range(12)]
QUOTAS = {"default": {"vms_per_request": 1}}


def named(text: str) -> list[str]:
    """The user names ``text`` shows (case-insensitively)."""
    lowered = text.casefold()
    return [user for user in USERS if user in lowered] + (
        [MARK] if MARK in lowered else [])


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``vmpooler run`` with dummy auth, Prometheus and ``vms_per_request: 1``."""
    running = start_service(tmp_path_factory.mktemp("hostile-metric-names"), "run",
                            overrides={":quotas": QUOTAS})
    yield running
    running.stop()


def token_of(service: Service, user: str) -> str:
    raw = base64.b64encode(f"{user}:secret".encode()).decode()
    answer = service.request("POST", "/api/v3/token", headers={"Authorization": f"Basic {raw}"})
    assert answer.status == 200, answer.body
    return str(answer.json["token"])


def test_prometheus_names_no_refused_user(service: Service) -> None:
    for user in USERS:
        refused = service.request("POST", "/api/v3/vm", {"alpha": 2},
                                  headers={"X-AUTH-TOKEN": token_of(service, user)})
        assert refused.status == 429 and refused.json["quota"] == "vms_per_request"
    assert service.request("POST", "/api/v3/vm", {"alpha": 2}).status == 429  # by address
    answer = service.request("GET", "/prometheus")
    assert answer.status == 200
    text = answer.body.decode()
    assert named(text) == []  # before: all 12 names, in quota_refused_total{user=...}
    refused_series = {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text) for sample in family.samples
        if sample.name == "vmpooler_quota_refused_total"}
    assert refused_series == {
        (("quota", "vms_per_request"), ("requester", "token"), ("vmpooler_instance", "hostile")):
            len(USERS),
        (("quota", "vms_per_request"), ("requester", "address"),
         ("vmpooler_instance", "hostile")): 1}


def _backend(kind: str, port: int) -> Metrics:
    if kind == "datadog":
        return DatadogMetrics("127.0.0.1", port)
    if kind == "statsd":
        return StatsdMetrics("127.0.0.1", port)
    return GraphiteMetrics("127.0.0.1", port)


@pytest.mark.parametrize("kind", ["statsd", "graphite", "datadog"])
def test_push_backends_name_no_refused_user(redis_client: redis.Redis, kind: str) -> None:
    """In process: statsd and graphite write tag values into the metric's name, DogStatsD
    into its tags; neither carries a user name."""
    sink = (GraphiteSink() if kind == "graphite" else StatsdSink()).start()
    metrics = _backend(kind, sink.port)
    try:
        config = dataclasses.replace(api_config([api_pool("alpha", 3)], auth=True),
                                     quotas=policy(QUOTAS))
        clock = FakeClock()
        ctx = ApiContext(config=config, redis=redis_client, metrics=metrics, clock=clock)
        client = falcon.testing.TestClient(create_app(ctx))
        for n, user in enumerate(USERS):
            token = f"{n:02d}" + "t" * 30
            redis_client.hset(schema.token(token), mapping={
                "user": user, "created": timefmt.format_epoch(clock.now())})
            assert client.simulate_post("/api/v3/vm", json={"alpha": 2}, headers={
                "X-AUTH-TOKEN": token}).status_code == 429
        metrics.close()
        wait_until(lambda: sum(s.value for s in sink.samples()
                               if "quota.refused" in s.name) >= len(USERS),
                   10, "the refusals to reach the sink")
        samples = sink.samples()
        assert [s.line for s in samples if named(s.line)] == []
        refused = [s for s in samples if "quota.refused" in s.name]
        if kind == "datadog":
            assert {s.tags.get("requester") for s in refused} == {"token"}
        else:
            assert {s.name for s in refused} == {"vmpooler.quota.refused.vms_per_request.token"}
    finally:
        sink.stop()
