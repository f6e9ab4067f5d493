"""Random paths, pool names and methods cannot grow the metrics: the series in ``/prometheus``,
the Prometheus multiprocess directory and what a statsd/DogStatsD/graphite sink sees stay a
bounded set, however many distinct values clients send.

Every request of :func:`hostile_request` carries text of its own (marked ``zqx``) in its path,
its pool names, its body or its method; none of it may appear in any metric. The request
shapes are cycled, so the first thousand requests already show every series a bounded set
can have: the next nine thousand may add none.
"""

from __future__ import annotations

import base64
import http.client
import json
import random
import string
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import falcon.testing
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.api_harness import api_config, api_pool
from tests.harness import wait_until
from tests.hostile.service import Service, start_service
from tests.metric_sinks import GraphiteSink, Sample, StatsdSink
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.metrics.push import DatadogMetrics, GraphiteMetrics, StatsdMetrics
from vmpooler.web.api_context import ApiContext
from vmpooler.web.app import create_app

pytestmark = pytest.mark.integration

MARK = "zqx"
"""Starts every piece of text a request makes up."""
LONG = 3800
"""Length of the long paths and names (a 3.8 KB request line)."""

_ALNUM = string.ascii_lowercase + string.digits


def _junk(rng: random.Random, length: int = 12) -> str:
    return MARK + "".join(rng.choices(_ALNUM, k=max(1, length - len(MARK))))


def _method(rng: random.Random) -> str:
    """A method gunicorn accepts (any upper-case token) that no route knows."""
    return "X" + "".join(rng.choices(string.ascii_uppercase, k=rng.randint(4, 11)))


@dataclass(frozen=True)
class Hostile:
    """One request: method, path, JSON body (or None) and whether it carries the token."""

    method: str
    path: str
    body: Any = None
    token: bool = False


_V3 = "/api/v3"
_SHAPES: list[Callable[[random.Random, str], Hostile]] = [
    lambda r, j: Hostile("GET", f"/{j}"),
    lambda r, j: Hostile("GET", f"{_V3}/{j}/{_junk(r)}"),
    lambda r, j: Hostile("GET", f"{_V3}/vm/{_junk(r)}/{j}/x"),
    lambda r, j: Hostile("POST", f"{_V3}/vm/{_junk(r, 40)}"),
    lambda r, j: Hostile("POST", f"{_V3}/vm", {_junk(r, 40): 1, _junk(r, 30): 2}),
    lambda r, j: Hostile("POST", f"{_V3}/vm", {j: 1}),
    lambda r, j: Hostile("POST", f"{_V3}/ondemandvm/{_junk(r, 40)}", token=True),
    lambda r, j: Hostile("POST", f"{_V3}/ondemandvm", {_junk(r, 40): 1}, token=True),
    lambda r, j: Hostile("GET", f"{_V3}/summary/{j}/{_junk(r)}"),
    lambda r, j: Hostile("GET", f"{_V3}/summary/tag/{j}"),
    lambda r, j: Hostile("GET", f"{_V3}/summary/boot/{_junk(r)}"),
    lambda r, j: Hostile("DELETE", f"{_V3}/config/poolsize/{j}", token=True),
    lambda r, j: Hostile("DELETE", f"{_V3}/config/pooltemplate/{j}", token=True),
    lambda r, j: Hostile("POST", f"{_V3}/config/poolsize", {_junk(r, 40): 1}, token=True),
    lambda r, j: Hostile("POST", f"{_V3}/config/pooltemplate", {_junk(r, 40): "a/b"},
                         token=True),
    lambda r, j: Hostile("POST", f"{_V3}/poolreset", {_junk(r, 40): 1}, token=True),
    lambda r, j: Hostile(_method(r), f"{_V3}/status"),
    lambda r, j: Hostile(_method(r), f"/{j}"),
    lambda r, j: Hostile(_method(r), f"{_V3}/vm/{_junk(r, 40)}"),
    lambda r, j: Hostile("GET", f"{_V3}/vm/{_junk(r, 40)}"),
    lambda r, j: Hostile("PUT", f"{_V3}/vm/{_junk(r, 40)}", {"tags": {_junk(r): _junk(r)}}),
    lambda r, j: Hostile("GET", f"{_V3}/ondemandvm/{_junk(r, 40)}"),
    lambda r, j: Hostile("GET", f"/dashboard/static/{j}.js"),
    lambda r, j: Hostile("GET", f"{_V3}/token/{j}"),
]


def hostile_request(n: int, rng: random.Random) -> Hostile:
    """The ``n``-th request: shapes in turn; every tenth round a 3.8 KB path segment."""
    shape = _SHAPES[n % len(_SHAPES)]
    long = (n // len(_SHAPES)) % 10 == 9
    return shape(rng, _junk(rng, LONG if long else rng.randint(8, 60)))


def sent_requests(count: int, seed: int) -> list[Hostile]:
    rng = random.Random(seed)
    return [hostile_request(n, rng) for n in range(count)]


# -- sending over keep-alive connections -------------------------------------------------------
def _encode(request: Hostile, token: str) -> tuple[str | None, dict[str, str]]:
    headers = {"X-AUTH-TOKEN": token} if request.token else {}
    if request.body is None:
        return None, headers
    return json.dumps(request.body), {**headers, "Content-Type": "application/json"}


def blast(service: Service, requests: list[Hostile], token: str,
          threads: int = 6) -> Counter[int]:
    """Send ``requests`` on ``threads`` keep-alive connections; the count of each status."""
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    failures: list[BaseException] = []

    def run(part: list[Hostile]) -> None:
        connection = http.client.HTTPConnection(service.host, service.port, timeout=30)
        seen: Counter[int] = Counter()
        try:
            for request in part:
                body, headers = _encode(request, token)
                for attempt in (1, 2):  # once more on a fresh connection if the server closed
                    try:
                        connection.request(request.method, request.path, body=body,
                                           headers=headers)
                        response = connection.getresponse()
                        response.read()
                        break
                    except (http.client.HTTPException, ConnectionError):
                        connection.close()
                        connection = http.client.HTTPConnection(service.host, service.port,
                                                                timeout=30)
                        if attempt == 2:
                            raise
                seen[response.status] += 1
                if response.will_close:
                    connection.close()
        except BaseException as exc:  # reported by the caller
            failures.append(exc)
        finally:
            connection.close()
            with lock:
                statuses.update(seen)

    workers = [threading.Thread(target=run, args=(requests[i::threads],))
               for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not failures, failures[:3]
    return statuses


def new_token(service: Service) -> str:
    basic = base64.b64encode(b"cardinality:secret").decode()
    answer = service.request("POST", "/api/v3/token", headers={"Authorization": f"Basic {basic}"})
    assert answer.status == 200, answer.body
    return str(answer.json["token"])


# -- what the metrics show ---------------------------------------------------------------------
Series = tuple[str, frozenset[tuple[str, str]]]

_API_FAMILIES = ("http_", "checkout_", "delete_", "ondemandrequest_", "config_", "poolreset_",
                 "user", "usage_", "api_")
"""Families (after the ``vmpooler_`` namespace) the API writes: request-driven ones."""


def scrape(service: Service) -> set[Series]:
    answer = service.request("GET", "/prometheus", timeout=120)
    assert answer.status == 200
    return {(sample.name, frozenset(sample.labels.items()))
            for family in text_string_to_metric_families(answer.body.decode())
            for sample in family.samples}


def files(service: Service) -> dict[str, int]:
    return {path.name: path.stat().st_size for path in service.prometheus_dir.glob("*.db")}


def _client_text(series: set[Series]) -> list[Series]:
    return [s for s in series if MARK in s[0] or any(MARK in v for _, v in s[1])]


def _from_api(series: Series) -> bool:
    return series[0].removeprefix("vmpooler_").startswith(_API_FAMILIES)


def test_prometheus_series_and_files_stay_flat(service: Service) -> None:
    """1,000 then 9,000 more hostile requests: no series and no file space after the first
    thousand, no client text in any series, no 5xx."""
    wait_until(lambda: all(p["ready"] > 0 for p in
                           service.request("GET", "/api/v3/status").json["pools"].values()),
               30, "the pools to fill")
    token = new_token(service)
    requests = sent_requests(10_000, seed={"run": 1, "api": 2}[service.kind])
    scrape(service)  # the scrape's own series exist from here on

    first = blast(service, requests[:1000], token)
    after_first, files_first = scrape(service), files(service)
    second = blast(service, requests[1000:], token)
    after_second, files_second = scrape(service), files(service)

    assert not [s for s in (first + second) if s >= 500], (first, second)
    assert not _client_text(after_second), _client_text(after_second)[:5]
    grown = after_second - after_first
    assert not [s for s in grown if _from_api(s)], sorted(s for s in grown if _from_api(s))[:10]
    assert len(grown) <= 10, sorted(grown)[:20]  # the manager's own, appearing late
    assert set(files_second) == set(files_first)
    # bounded files: none more than doubled, at most two grew (the manager's late series
    # land in a gauge and a counter file; the series check above keeps the API's flat)
    grew = {name for name in files_second if files_second[name] > files_first[name]}
    assert all(files_second[name] <= 2 * files_first[name] for name in grew), files_second
    assert len(grew) <= 2, (grew, files_second)
    labels = {dict(s[1]).get("path") for s in after_second if s[0].endswith("requests_total")}
    assert "unmatched" in labels and "/api/v3/vm" in labels
    assert ("vmpooler_checkout_invalid_total",
            frozenset({("poolname", "unknown"), ("vmpooler_instance", "hostile")})) \
        in after_second


# -- statsd, DogStatsD and graphite -----------------------------------------------------------
def _names(samples: list[Sample]) -> set[tuple[str, frozenset[tuple[str, str]]]]:
    return {(s.name, frozenset(s.tags.items())) for s in samples}


def _leaks(samples: list[Sample]) -> list[str]:
    return [s.line for s in samples
            if MARK in s.name or any(MARK in k or MARK in v for k, v in s.tags.items())]


@pytest.fixture(scope="module")
def datadog_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service,
                                                                              StatsdSink]]:
    """``vmpooler run`` sending to a DogStatsD sink (no Prometheus)."""
    sink = StatsdSink().start()
    service = start_service(tmp_path_factory.mktemp("cardinality-datadog"), "run", {
        ":prometheus": None,
        ":datadog": {"host": "127.0.0.1", "port": sink.port, "tags": ["env:hostile"]}})
    yield service, sink
    service.stop()
    sink.stop()


def test_dogstatsd_sees_a_bounded_set_through_vmpooler_run(
        datadog_run: tuple[Service, StatsdSink]) -> None:
    service, sink = datadog_run
    token = new_token(service)
    requests = sent_requests(3_000, seed=7)
    blast(service, requests[:600], token)
    wait_until(lambda: any(s.name == "vmpooler.checkout.invalid" for s in sink.samples()), 10,
               "the API's metrics to reach the sink")
    blast(service, requests[600:], token)
    wait_until(lambda: sum(s.name == "vmpooler.ondemandrequest_fail.invalid"
                           for s in sink.samples()) >= 2, 10, "the second batch's metrics")
    samples = sink.samples()
    assert not _leaks(samples), _leaks(samples)[:5]
    contexts = _names(samples)
    api = {c for c in contexts if c[0].removeprefix("vmpooler.").startswith(
        ("checkout.", "ondemandrequest_fail.", "config.", "poolreset.", "http_request"))}
    # a bounded set whatever the number of requests: each name once per pool/method/status
    assert len(api) < 60, sorted(api)
    tags = {dict(c[1]).get("pool") for c in api} - {None}
    assert tags <= {"unknown", "alpha", "beta", "alpha-alias"}, tags
    assert ("vmpooler.checkout.invalid",
            frozenset({("pool", "unknown"), ("env", "hostile")})) in contexts
    assert any(c[0] == "vmpooler.http_request" and ("method", "OTHER") in c[1]
               for c in contexts)


def _backend(kind: str, port: int) -> Metrics:
    if kind == "datadog":
        return DatadogMetrics("127.0.0.1", port)
    if kind == "statsd":
        return StatsdMetrics("127.0.0.1", port)
    return GraphiteMetrics("127.0.0.1", port)


@pytest.mark.filterwarnings("ignore:Unknown REQUEST_METHOD")
@pytest.mark.parametrize("kind", ["statsd", "graphite", "datadog"])
def test_push_backends_get_only_known_names(redis_client: redis.Redis, kind: str) -> None:
    """Through the API in process, the dotted names of statsd and graphite (where a tag value
    becomes part of the name) and DogStatsD's tags carry no client text."""
    sink = (GraphiteSink() if kind == "graphite" else StatsdSink()).start()
    metrics = _backend(kind, sink.port)
    try:
        config = api_config([api_pool("alpha", alias=("alpha-alias",))],
                            experimental_features=True)
        ctx = ApiContext(config=config, redis=redis_client, metrics=metrics)
        client = falcon.testing.TestClient(create_app(ctx))
        for request in sent_requests(len(_SHAPES) * 20, seed=11):
            client.simulate_request(request.method, request.path, json=request.body)
        metrics.close()
        want = ("vmpooler.checkout.invalid" if kind == "datadog"
                else "vmpooler.checkout.invalid.unknown")
        wait_until(lambda: any(s.name == want for s in sink.samples()), 10, want)
        samples = sink.samples()
        assert not _leaks(samples), _leaks(samples)[:5]
        assert len(_names(samples)) < 60, sorted(_names(samples))
        if kind != "datadog":
            assert {"vmpooler.checkout.invalid.unknown", "vmpooler.config.invalid.unknown",
                    "vmpooler.poolreset.invalid.unknown",
                    "vmpooler.ondemandrequest_fail.invalid.unknown"} <= {
                s.name for s in samples}
            assert any(s.name.startswith("vmpooler.http_request.OTHER.") for s in samples)
    finally:
        sink.stop()
