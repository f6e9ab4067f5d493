"""The metric catalogue and the per-metric units on the graphite wire (a real TCP sink)."""

from __future__ import annotations

from tests.harness import wait_until
from tests.metric_sinks import GraphiteSink
from vmpooler.actors.metrics.catalog import CATALOG, find, plain_unit
from vmpooler.actors.metrics.push import GraphiteMetrics


def test_graphite_writes_each_timing_in_vmpoolers_unit() -> None:
    sink = GraphiteSink().start()
    metrics = GraphiteMetrics("127.0.0.1", sink.port, prefix="vmpooler")
    try:
        metrics.timing("connection_waited", 0.0125,
                       tags={"type": "provider_connection_pool", "provider": "vsphere"})
        metrics.timing("time_to_ready_state", 2.5, tags={"pool": "debian"})
        wait_until(lambda: len(sink.samples()) == 2, 5, "both samples")
    finally:
        metrics.close()
        sink.stop()
    got = {s.name: s.value for s in sink.samples()}
    assert got == {"vmpooler.connection_waited.provider_connection_pool.vsphere": 12,
                   "vmpooler.time_to_ready_state.debian": 2.5}


def test_catalogue_lookup() -> None:
    assert plain_unit("connection_waited") == "ms"
    assert plain_unit("time_to_ready_state") == plain_unit("not_a_metric") == "s"
    spec = find("vmpooler_dlq.clone.count", {"pool": "a"})
    assert spec is not None and spec.name == "vmpooler_dlq.<queue>.count"
    assert find("user.bob.allocate.debian", None) is not None
    assert find("ready", {"pool": "a", "extra": "b"}) is None
    assert all(spec.kind != "timing" or spec.unit == "s" for spec in CATALOG)
