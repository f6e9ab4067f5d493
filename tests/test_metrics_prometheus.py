"""The Prometheus backend's mapping onto vmpooler's families (reference §6), in process."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import falcon.testing
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.api_harness import api_config, api_pool
from vmpooler.actors.config import MetricsSettings, load_config
from vmpooler.actors.config.model import PrometheusSettings
from vmpooler.actors.metrics.factory import create_metrics
from vmpooler.actors.metrics.prometheus import PrometheusMetrics
from vmpooler.actors.metrics.prometheus_families import resolve
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.web import api_prometheus
from vmpooler.web.api_context import ApiContext
from vmpooler.web.app import create_app

INSTANCE = {"vmpooler_instance": "vmpooler"}


def samples(metrics: PrometheusMetrics) -> dict[tuple[str, frozenset], float]:
    body, _ = metrics.exposition()
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(metrics: PrometheusMetrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, frozenset({**INSTANCE, **labels}.items())))


@pytest.fixture
def metrics() -> PrometheusMetrics:
    backend = create_metrics("prometheus", None, None, "vmpooler",
                             ("vmpooler_instance:vmpooler",))
    assert isinstance(backend, PrometheusMetrics)
    return backend


@pytest.mark.parametrize(("name", "tags", "exposed", "labels"), [
    ("checkout.success", {"pool": "debian"}, "checkout_success", ("debian",)),
    ("checkout.invalid", {"pool": "unknown"}, "checkout_invalid", ("unknown",)),
    ("delete.success", None, "delete_success", ()),
    ("ready", {"pool": "debian"}, "ready", ("debian",)),
    ("vmpooler_errors.markedasfailed", {"pool": "debian"}, "vmpooler_errors",
     ("markedasfailed.debian",)),
    ("migrate_from", {"host": "esx1.example.test"}, "migrate_from", ("esx1.example.test",)),
    ("user", {"user": "jo", "operation": "allocate", "pool": "debian"}, "user",
     ("jo", "allocate", "debian")),
    ("http_requests_vm_total", {"method": "post", "subpath": "vm", "operation": "checkout"},
     "http_requests_vm_total", ("post", "vm", "checkout")),
    ("connection_available", {"type": "provider_connection_pool", "provider": "vc"},
     "connection_available", ("provider_connection_pool", "vc")),
    ("clone.outcome", {"pool": "debian", "provider": "dummy", "result": "success"},
     "clone_outcome", ("debian", "dummy", "success")),
    ("vm.lost", {"reason": "abandoned", "pool": "debian"}, "vm_lost", ("debian", "abandoned")),
    ("clone.queue_wait", {"pool": "debian", "kind": "pool"}, "clone_queue_wait",
     ("debian", "pool")),
    ("ondemand.time_to_ready", None, "ondemand_time_to_ready", ()),
])
def test_resolve_follows_vmpoolers_rule(name: str, tags: dict | None, exposed: str,
                                        labels: tuple[str, ...]) -> None:
    found = resolve(name, tags)
    assert found is not None
    assert (found.name, found.labels) == (exposed, labels)


@pytest.mark.parametrize("name", ["nonsense", "checkout.bogus", "delete"])
def test_unknown_names_and_suffixes_resolve_to_nothing(name: str) -> None:
    assert resolve(name, {"pool": "p"}) is None


def test_counters_gauges_histograms_carry_the_instance_label(
        metrics: PrometheusMetrics) -> None:
    metrics.increment("checkout.success", tags={"pool": "debian"})
    metrics.increment("checkout.success", tags={"pool": "debian"}, value=2)
    metrics.gauge("ready", 3, tags={"pool": "debian"})
    metrics.gauge("vmpooler_performance.check_pool", 0.25, tags={"pool": "debian"})
    metrics.timing("time_to_ready_state", 45.0, tags={"pool": "debian"})
    assert value(metrics, "vmpooler_checkout_success_total", poolname="debian") == 3
    assert value(metrics, "vmpooler_ready", poolname="debian") == 3
    # not truncated to an integer (vmpooler reported 0 here)
    assert value(metrics, "vmpooler_vmpooler_performance",
                 metric_path="check_pool.debian") == 0.25
    assert value(metrics, "vmpooler_time_to_ready_state_count", poolname="debian") == 1
    assert value(metrics, "vmpooler_time_to_ready_state_bucket", poolname="debian",
                 le="30.0") == 0
    assert value(metrics, "vmpooler_time_to_ready_state_bucket", poolname="debian",
                 le="60.0") == 1


def test_the_clone_gauge_also_feeds_the_clone_histogram(metrics: PrometheusMetrics) -> None:
    metrics.gauge("vmpooler_clone", 12.5, tags={"pool": "debian"})
    assert value(metrics, "vmpooler_vmpooler_clone", poolname="debian") == 12.5
    assert value(metrics, "vmpooler_clone_count", poolname="debian") == 1
    assert value(metrics, "vmpooler_clone_sum", poolname="debian") == 12.5


def test_every_gauge_a_pool_cycle_sends_has_a_family(
        metrics: PrometheusMetrics, caplog: pytest.LogCaptureFixture) -> None:
    for name, count in (("ready", 2), ("running", 1), ("pending", 3), ("size", 5)):
        metrics.gauge(name, count, tags={"pool": "debian"})
    assert value(metrics, "vmpooler_pending", poolname="debian") == 3
    assert value(metrics, "vmpooler_size", poolname="debian") == 5
    assert not [r for r in caplog.records if "dropped" in r.getMessage()]


def test_increments_on_gauge_families_add_up(metrics: PrometheusMetrics) -> None:
    metrics.increment("vmpooler_purge.orphaned.count")
    metrics.increment("vmpooler_purge.orphaned.count")
    assert value(metrics, "vmpooler_vmpooler_purge", metric_path="orphaned.count") == 2


def test_unknown_and_mismatched_calls_are_dropped_and_logged_once(
        metrics: PrometheusMetrics, caplog: pytest.LogCaptureFixture) -> None:
    metrics.increment("nonsense")
    metrics.increment("nonsense")
    metrics.timing("checkout.success", 1.0, tags={"pool": "p"})
    metrics.timing("http_request", 0.1, tags={"method": "GET", "status": "200"})
    messages = [r.getMessage() for r in caplog.records if "prometheus" in r.getMessage()]
    assert len([m for m in messages if "nonsense" in m]) == 1
    assert any("checkout.success" in m for m in messages)
    assert not any("http_request " in m for m in messages)


def test_closed_backend_drops_calls(metrics: PrometheusMetrics) -> None:
    metrics.close()
    metrics.increment("delete.success")
    assert value(metrics, "vmpooler_delete_success_total") is None


def test_path_collapsing_matches_vmpooler() -> None:
    assert api_prometheus.collapse_path("/api/v3/vm/abc-def") == "/api/v3/vm"
    assert api_prometheus.collapse_path("/api/v3/ondemandvm/1234") == "/api/v3/ondemandvm"
    assert api_prometheus.collapse_path("/api/v3/token/xyz") == "/api/v3/token"
    assert api_prometheus.collapse_path("/api/v3/status") == "/api/v3/status"


def test_config_selects_prometheus_with_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(":prometheus:\n  prefix: east\n  prometheus_prefix: vmp\n"
                    "  prometheus_endpoint: /metrics\n")
    config = load_config(str(path), environ={})
    m = config.metrics
    assert (m.backend, m.prefix, m.tags) == ("prometheus", "vmp", ("vmpooler_instance:east",))
    assert m.prometheus is not None and m.prometheus.endpoint == "/metrics"
    assert m.prometheus.multiprocess_dir.endswith("prometheus")
    assert not any("prometheus" in note for note in config.notes)


def test_api_serves_the_endpoint_and_the_http_families(redis_client: redis.Redis) -> None:
    config = replace(api_config([api_pool("debian")]), metrics=MetricsSettings(
        backend="prometheus", tags=("vmpooler_instance:vmpooler",),
        prometheus=PrometheusSettings(endpoint="/metrics")))
    backend = PrometheusMetrics("vmpooler", {"vmpooler_instance": "vmpooler"})
    ctx = ApiContext(config=config, redis=redis_client, metrics=backend, clock=FakeClock())
    client = falcon.testing.TestClient(create_app(ctx))
    client.simulate_get("/api/v3/vm/some-host")
    client.simulate_post("/api/v3/vm/debian")  # empty pool: 503
    answer = client.simulate_get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert value(backend, "vmpooler_http_requests_total", code="404", method="get",
                 path="/api/v3/vm") == 1
    assert value(backend, "vmpooler_http_requests_total", code="503", method="post",
                 path="/api/v3/vm") == 1
    assert value(backend, "vmpooler_http_request_duration_seconds_count", method="get",
                 path="/api/v3/vm") == 1
    assert value(backend, "vmpooler_checkout_empty_total", poolname="debian") == 1
