"""The standby tier's metrics: in the catalogue, and exposed by the Prometheus backend.

A standby pool runs on the fake clock over real Redis with the dummy provider; every
``standby*`` call its actor made is then looked up in the catalogue and replayed, as made,
into a Prometheus backend whose exposition is parsed.
"""

from __future__ import annotations

import pytest
import redis

from tests.harness import make_config, pool, started
from tests.test_metrics_prometheus import metrics, samples, value  # noqa: F401
from tests.test_pool_standby import full, settle, tiers
from vmpooler.actors.config.model import StandbyTier
from vmpooler.actors.metrics.backends import Record
from vmpooler.actors.metrics.catalog import find, plain_unit
from vmpooler.actors.metrics.prometheus import PrometheusMetrics
from vmpooler.actors.metrics.prometheus_families import RESUME_BUCKETS, resolve

KINDS = {"increment": "c", "gauge": "g", "timing": "ms"}


def dotted(name: str, tags: dict[str, str]) -> str:
    """The statsd/graphite form: the tag values appended, ``pool`` last."""
    values = [v for k, v in tags.items() if k != "pool"] + ([tags["pool"]] if "pool" in tags
                                                             else [])
    return ".".join([name, *values])


def replay(records: list[Record], backend: PrometheusMetrics) -> None:
    for kind, name, amount, tags in records:
        if kind == "increment":
            backend.increment(name, tags=tags, value=int(amount))
        elif kind == "gauge":
            backend.gauge(name, amount, tags=tags)
        else:
            backend.timing(name, amount, tags=tags)


@pytest.fixture
def emitted(redis_client: redis.Redis) -> list[Record]:
    """The ``standby*`` calls of a pool of 2 with 3 standby VMs: filled, both ready VMs
    checked out and replaced by resumes."""
    config = make_config([pool("alpha", 2, standby=StandbyTier(count=3))])
    with started(redis_client, config) as h:
        settle(h, lambda: full(h, 2, 3), "2 ready and 3 suspended")
        for vm in list(tiers(h)["ready"]):
            h.checkout("alpha", vm)
        h.system.notify("alpha", "checkout")
        settle(h, lambda: h.metrics.counts("standby.resume", result="success") == 2,
               "two resumes", step=1)
        return [r for r in h.metrics.records if r[1].startswith("standby")]


def test_every_standby_call_is_in_the_catalogue(emitted: list[Record]) -> None:
    assert {r[1] for r in emitted} == {"standby", "standby.suspend", "standby.resume",
                                       "standby.resume_duration"}
    for kind, name, _, tags in emitted:
        for spec in (find(name, tags), find(dotted(name, tags), None)):
            assert spec is not None, (name, tags)
            assert (spec.name, spec.kind, set(spec.tags)) == (name, kind, set(tags))
            assert not spec.reference  # ours, not vmpooler's
    assert plain_unit("standby.resume_duration") == "s"


def test_the_pool_actors_calls_are_exposed(emitted: list[Record],
                                           metrics: PrometheusMetrics,
                                           caplog: pytest.LogCaptureFixture) -> None:
    replay(emitted, metrics)
    assert not [r for r in caplog.records if "dropped" in r.getMessage()]
    last = [v for k, n, v, _ in emitted if k == "gauge"][-1]
    assert value(metrics, "vmpooler_standby", poolname="alpha") == last
    assert value(metrics, "vmpooler_standby_suspend_total", poolname="alpha",
                 result="success") == sum(1 for r in emitted if r[1] == "standby.suspend")
    assert value(metrics, "vmpooler_standby_resume_total", poolname="alpha",
                 result="success") == 2
    durations = [v for _, n, v, _ in emitted if n == "standby.resume_duration"]
    assert len(durations) == 2
    assert value(metrics, "vmpooler_standby_resume_duration_count", poolname="alpha") == 2
    assert value(metrics, "vmpooler_standby_resume_duration_sum",
                 poolname="alpha") == pytest.approx(sum(durations))


def test_failures_and_the_resume_histograms_buckets(
        metrics: PrometheusMetrics) -> None:
    for step in ("suspend", "resume"):
        metrics.increment(f"standby.{step}", tags={"pool": "alpha", "result": "failure"})
    metrics.timing("standby.resume_duration", 4.0, tags={"pool": "alpha"})
    metrics.timing("standby.resume_duration", 40.0, tags={"pool": "alpha"})
    assert value(metrics, "vmpooler_standby_suspend_total", poolname="alpha",
                 result="failure") == 1
    assert value(metrics, "vmpooler_standby_resume_total", poolname="alpha",
                 result="failure") == 1
    bounds = sorted(float(dict(labels)["le"]) for (name, labels) in samples(metrics)
                    if name == "vmpooler_standby_resume_duration_bucket")
    assert bounds == [*RESUME_BUCKETS, float("inf")]
    for le, count in (("2.0", 0), ("5.0", 1), ("30.0", 1), ("45.0", 2), ("+Inf", 2)):
        assert value(metrics, "vmpooler_standby_resume_duration_bucket", poolname="alpha",
                     le=le) == count, le


@pytest.mark.parametrize(("name", "tags", "exposed", "labels"), [
    ("standby", {"pool": "alpha"}, "standby", ("alpha",)),
    ("standby.suspend", {"pool": "alpha", "result": "success"}, "standby_suspend",
     ("alpha", "success")),
    ("standby.resume", {"pool": "alpha", "result": "failure"}, "standby_resume",
     ("alpha", "failure")),
    ("standby.resume_duration", {"pool": "alpha"}, "standby_resume_duration", ("alpha",)),
])
def test_resolve_names_the_families(name: str, tags: dict[str, str], exposed: str,
                                    labels: tuple[str, ...]) -> None:
    found = resolve(name, tags)
    assert found is not None
    assert (found.name, found.labels) == (exposed, labels)
