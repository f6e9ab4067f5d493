"""The one rule for metric values of request origin (vmpooler.actors.metrics.bounded) and
the API's use of it, in process: unknown pools, methods, paths and free tag values become
one bounded set, while a well-behaved client's series keep vmpooler's names."""

from __future__ import annotations

from dataclasses import replace

import falcon.testing
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.api_harness import TOKEN, api, api_config, api_pool
from vmpooler.actors.config import MetricsSettings
from vmpooler.actors.config.model import PrometheusSettings
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.metrics.bounded import (
    MAX_VALUE,
    OTHER,
    OTHER_METHOD,
    UNKNOWN,
    BoundedMetrics,
    LabelRule,
)
from vmpooler.actors.metrics.prometheus import PrometheusMetrics
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.web.api_context import ApiContext
from vmpooler.web.app import create_app


def test_pools_outside_the_configuration_are_unknown() -> None:
    rule = LabelRule(["debian", "centos.7", "deb-alias"])
    assert [rule.pool(p) for p in ("debian", "deb-alias", "centos.7", "centos_7")] == [
        "debian", "deb-alias", "centos.7", "centos_7"]  # centos_7: the usage metrics' form
    assert [rule.pool(p) for p in ("nosuch", "", "x" * 4000, None)] == [UNKNOWN] * 4


def test_methods_outside_the_known_ones_are_other() -> None:
    rule = LabelRule([])
    assert [rule.method(m) for m in ("GET", "DELETE", "PATCH", "post")] == [
        "GET", "DELETE", "PATCH", "post"]
    assert [rule.method(m) for m in ("FOO", "PROPFIND", "X" * 20)] == [OTHER_METHOD] * 3


def test_free_values_have_a_budget_per_metric() -> None:
    rule = LabelRule(["debian"], series_per_metric=3)
    seen = [rule.tags("user", {"user": f"u{n}", "operation": "allocate", "pool": "debian"})
            for n in range(6)]
    assert [t["user"] for t in seen] == ["u0", "u1", "u2", OTHER, OTHER, OTHER]
    assert seen[4] == {"user": OTHER, "operation": OTHER, "pool": "debian"}
    # an admitted combination stays admitted; another metric has its own budget
    assert rule.tags("user", {"user": "u1", "operation": "allocate", "pool": "x"}) == {
        "user": "u1", "operation": "allocate", "pool": UNKNOWN}
    assert rule.tags("usage_litmus", {"user": "u5"}) == {"user": "u5"}
    # a value longer than MAX_VALUE never counts against it
    assert rule.tags("usage_litmus", {"user": "v" * (MAX_VALUE + 1)}) == {"user": OTHER}


def test_route_fields_are_filled_only_with_listed_values() -> None:
    rule = LabelRule([], params={"pool": ["debian"], "route": ["boot"]})
    assert rule.template("/x/{route}/{key}", {"route": "boot", "key": "k"}) == "/x/boot/{key}"
    assert rule.template("/p/{pool}", {"pool": "debian"}) == "/p/debian"
    assert rule.template("/p/{pool}", {"pool": "nosuch"}) == "/p/{pool}"
    assert rule.template("/p/{pool:int}", {}) == "/p/{pool}"


def test_bounded_metrics_pass_names_values_and_untagged_calls_through() -> None:
    inner = RecordingMetrics()
    metrics = BoundedMetrics(inner, LabelRule(["debian"]))
    metrics.increment("checkout.invalid", tags={"pool": "zz" * 50}, value=2)
    metrics.gauge("ready", 3, tags={"pool": "debian"})
    metrics.timing("http_request", 0.5, tags={"method": "BREW", "status": "400"})
    metrics.increment("delete.success")
    assert inner.records == [
        ("increment", "checkout.invalid", 2, {"pool": UNKNOWN}),
        ("gauge", "ready", 3, {"pool": "debian"}),
        ("timing", "http_request", 0.5, {"method": OTHER_METHOD, "status": "400"}),
        ("increment", "delete.success", 1, {}),
    ]
    metrics.close()
    assert inner.closed


# -- through the API ---------------------------------------------------------------------------
UNKNOWN_METHODS = pytest.mark.filterwarnings("ignore:Unknown REQUEST_METHOD")
"""The test client's WSGI checker warns of every method it does not know: the point here."""


def _prometheus_api(redis_client: redis.Redis) -> tuple[falcon.testing.TestClient,
                                                         PrometheusMetrics]:
    pools = [api_pool("debian", alias=("deb",)), api_pool("centos")]
    config = replace(api_config(pools, auth=True, experimental_features=True),
                     tagfilter={"url": ".*"},
                     metrics=MetricsSettings(backend="prometheus",
                                             tags=("vmpooler_instance:vmpooler",),
                                             prometheus=PrometheusSettings()))
    backend = PrometheusMetrics("vmpooler", {"vmpooler_instance": "vmpooler"})
    ctx = ApiContext(config=config, redis=redis_client, metrics=backend, clock=FakeClock())
    return falcon.testing.TestClient(create_app(ctx)), backend


def _paths(backend: PrometheusMetrics) -> dict[tuple[str, str], set[str]]:
    """(method, path) label pairs of the request counter, with their codes."""
    body, _ = backend.exposition()
    found: dict[tuple[str, str], set[str]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "vmpooler_http_requests_total":
                key = (sample.labels["method"], sample.labels["path"])
                found.setdefault(key, set()).add(sample.labels["code"])
    return found


#: A well-behaved client's requests and vmpooler's path label for each.
VMPOOLER_LABELS = [
    ("GET", "/api/v3/status", "/api/v3/status"),
    ("GET", "/api/v3/vm", "/api/v3/vm"),
    ("POST", "/api/v3/vm/debian", "/api/v3/vm"),
    ("GET", "/api/v3/vm/abc-def", "/api/v3/vm"),
    ("POST", "/api/v3/vm/abc-def/snapshot", "/api/v3/vm"),
    ("POST", "/api/v3/vm/abc-def/disk/8", "/api/v3/vm"),
    ("GET", "/api/v3/ondemandvm/1234", "/api/v3/ondemandvm"),
    ("DELETE", "/api/v3/token/xyz", "/api/v3/token"),
    ("GET", "/api/v3/summary", "/api/v3/summary"),
    ("GET", "/api/v3/summary/boot", "/api/v3/summary/boot"),
    ("GET", "/api/v3/summary/clone/duration", "/api/v3/summary/clone/duration"),
    ("GET", "/api/v3/summary/tag/url", "/api/v3/summary/tag/url"),  # a :tagfilter: tag
    ("DELETE", "/api/v3/config/poolsize/debian", "/api/v3/config/poolsize/debian"),
    ("DELETE", "/api/v3/config/pooltemplate/centos", "/api/v3/config/pooltemplate/centos"),
    ("GET", "/api/v3/config", "/api/v3/config"),
    ("GET", "/dashboard/static/dashboard.css", "/dashboard/static/dashboard.css"),
]


@pytest.mark.parametrize(("method", "path", "label"), VMPOOLER_LABELS)
def test_a_well_behaved_clients_path_label_is_vmpoolers(
        redis_client: redis.Redis, method: str, path: str, label: str) -> None:
    client, backend = _prometheus_api(redis_client)
    client.simulate_request(method, path, headers={"X-AUTH-TOKEN": TOKEN})
    assert set(_paths(backend)) == {(method.lower(), label)}


@UNKNOWN_METHODS
def test_hostile_paths_and_methods_give_one_label_per_route(redis_client: redis.Redis) -> None:
    client, backend = _prometheus_api(redis_client)
    for n in range(40):
        junk = f"zq{n}" + "x" * (n * 90)
        client.simulate_get(f"/{junk}")
        client.simulate_get(f"/api/v3/{junk}/more")
        client.simulate_get(f"/api/v3/vm/{junk}/a/b")
        client.simulate_get(f"/api/v3/summary/{junk}/{junk}")
        client.simulate_get(f"/api/v3/summary/boot/{junk}")
        client.simulate_delete(f"/api/v3/config/poolsize/{junk}")
        client.simulate_delete("/api/v3/config/pooltemplate/deb")  # an alias is no pool
        client.simulate_get(f"/dashboard/static/{junk}.js")
        client.simulate_request(f"X{n}FOO", "/api/v3/status")
        client.simulate_request(f"X{n}FOO", f"/{junk}")
    assert set(_paths(backend)) == {
        ("get", "unmatched"),
        ("get", "/api/v3/summary/{route}/{key}"),
        ("get", "/api/v3/summary/boot/{key}"),
        ("delete", "/api/v3/config/poolsize/{pool}"),
        ("delete", "/api/v3/config/pooltemplate/{pool}"),
        ("get", "/dashboard/static/{name}"),
        ("other", "/api/v3/status"),
        ("other", "unmatched"),
    }


@UNKNOWN_METHODS
def test_unknown_pools_count_as_unknown_on_every_invalid_metric(
        redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool("pool1", alias=("one",))],
                                     experimental_features=True))
    for n in range(5):
        a.client.simulate_post("/api/v3/vm", json={f"zq{n}": 1, "one": 1})
        a.client.simulate_post(f"/api/v3/vm/zq{n}")
        a.client.simulate_post("/api/v3/ondemandvm", json={f"zq{n}": 1})
        a.client.simulate_post(f"/api/v3/ondemandvm/zq{n}+one")
        a.client.simulate_post("/api/v3/config/poolsize", json={f"zq{n}": 1})
        a.client.simulate_post("/api/v3/config/pooltemplate", json={f"zq{n}": "a/b"})
        a.client.simulate_post("/api/v3/poolreset", json={f"zq{n}": 1})
        a.client.simulate_request(f"X{n}FOO", "/api/v3/status")
    values = {v for _, _, _, tags in a.metrics.records for v in tags.values()}
    assert not [v for v in values if "zq" in v or v.startswith("X")]
    assert a.metrics.counts("checkout.invalid", pool=UNKNOWN) == 10
    assert a.metrics.counts("ondemandrequest_fail.invalid", pool=UNKNOWN) == 10
    assert a.metrics.counts("config.invalid", pool=UNKNOWN) == 10
    assert a.metrics.counts("poolreset.invalid", pool=UNKNOWN) == 5
    assert len(a.metrics.timings("http_request", method=OTHER_METHOD)) == 5


def test_usage_metrics_bound_what_clients_chose(redis_client: redis.Redis) -> None:
    """usage_stats: the user name and the parts of a VM's jenkins_build_url are the
    client's; a value too long to be a name is counted as other."""
    a = api(redis_client, api_config([api_pool("pool1")], usage_stats=True))
    long_user = "u" * 4000
    a.add_token(TOKEN, user=long_user)
    a.add_vm("pool1", "vm1", **{"token:user": long_user,
                                "tag:jenkins_build_url": "https://" + "j" * 500 + "/job/x/"})
    assert a.client.simulate_delete("/api/v3/vm/vm1").status_code == 200
    tags = [t for _, name, _, t in a.metrics.records if name.startswith(("user", "usage"))]
    assert tags and all(len(v) <= MAX_VALUE for t in tags for v in t.values())
    assert a.metrics.counts("user", user=OTHER, pool="pool1") == 1
