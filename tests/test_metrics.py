"""Metrics backends put exactly vmpooler's bytes on real sockets and never raise."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from vmpooler.actors.metrics.backends import Metrics, NullMetrics, RecordingMetrics, dotted_name
from vmpooler.actors.metrics.factory import create_metrics
from vmpooler.actors.metrics.push import DatadogMetrics, GraphiteMetrics, StatsdMetrics

WAIT = 5.0
DD_ENV = ("DD_ENV", "DD_SERVICE", "DD_VERSION", "DD_ENTITY_ID", "DATADOG_TAGS", "DD_EXTERNAL_ENV")


@pytest.fixture
def udp() -> Iterator[socket.socket]:
    """A UDP socket bound on loopback; read with ``receive``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(WAIT)
    yield sock
    sock.close()


@pytest.fixture(autouse=True)
def _no_datadog_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in DD_ENV:
        monkeypatch.delenv(var, raising=False)


def receive(sock: socket.socket, count: int) -> list[str]:
    """``count`` samples, in order, however they were packed into datagrams (the backends
    batch several per datagram, newline-separated)."""
    lines: list[str] = []
    while len(lines) < count:
        lines += [line for line in sock.recv(65536).decode().split("\n") if line]
    return lines


def free_port() -> int:
    """A loopback port that nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_datadog_datagrams(udp: socket.socket) -> None:
    metrics = DatadogMetrics("127.0.0.1", udp.getsockname()[1])
    metrics.gauge("ready", 3, tags={"pool": "debian"})
    metrics.increment("vmpooler_errors.markedasfailed", tags={"pool": "centos"})
    metrics.increment("delete.success", value=2)
    metrics.timing("time_to_ready_state", 1.5, tags={"pool": "debian"})
    metrics.gauge("circuit_breaker.state", 0.5, tags={"provider": "vsphere"})
    metrics.gauge("vmpooler_clone", 12.0, tags={"pool": "debian"})
    # counts and gauges are aggregated per flush and sent apart from timings: order differs
    assert sorted(receive(udp, 6)) == sorted([
        "vmpooler.ready:3|g|#pool:debian",
        "vmpooler.vmpooler_errors.markedasfailed:1|c|#pool:centos",
        "vmpooler.delete.success:2|c",
        "vmpooler.time_to_ready_state:1500|ms|#pool:debian",
        "vmpooler.circuit_breaker.state:0.5|g|#provider:vsphere",
        "vmpooler.vmpooler_clone:12|g|#pool:debian",
    ])
    metrics.close()
    metrics.close()
    metrics.gauge("ready", 1, tags={"pool": "debian"})  # dropped, no error


def test_datadog_constant_tags_and_namespace(udp: socket.socket) -> None:
    metrics = DatadogMetrics(
        "127.0.0.1", udp.getsockname()[1], namespace="pooler", constant_tags=("env:ci", "dc:x")
    )
    metrics.increment("checkout.success", tags={"pool": "debian"})
    metrics.gauge("running", 0)
    assert sorted(receive(udp, 2)) == [
        "pooler.checkout.success:1|c|#pool:debian,env:ci,dc:x",
        "pooler.running:0|g|#env:ci,dc:x",
    ]
    metrics.close()


def test_statsd_datagrams(udp: socket.socket) -> None:
    metrics = StatsdMetrics("127.0.0.1", udp.getsockname()[1])
    metrics.gauge("ready", 3, tags={"pool": "debian"})
    metrics.increment("vmpooler_errors.staledns", tags={"pool": "centos"})
    metrics.increment("delete.failed", value=4)
    metrics.timing("time_to_ready_state", 0.25, tags={"pool": "debian"})
    metrics.increment("user", tags={"pool": "debian", "user": "jdoe", "operation": "checkout"})
    metrics.gauge("connection_available", 7.0, tags={"type": "redis", "provider": "manager"})
    metrics.gauge("circuit_breaker.state", 0.5, tags={"provider": "vsphere"})
    assert receive(udp, 7) == [
        "vmpooler.ready.debian:3|g",
        "vmpooler.vmpooler_errors.staledns.centos:1|c",
        "vmpooler.delete.failed:4|c",
        "vmpooler.time_to_ready_state.debian:250|ms",
        "vmpooler.user.jdoe.checkout.debian:1|c",
        "vmpooler.connection_available.redis.manager:7|g",
        "vmpooler.circuit_breaker.state.vsphere:0.5|g",
    ]
    metrics.close()
    metrics.close()
    metrics.increment("delete.failed")  # dropped, no error


def test_dotted_name() -> None:
    assert dotted_name("vmpooler", "ready", {"pool": "debian"}) == "vmpooler.ready.debian"
    assert dotted_name("", "ready", None) == "ready"
    assert dotted_name("p", "x", {"a": "b c", "d": "e:f|g"}) == "p.x.b_c.e_f_g"


def test_udp_backends_to_closed_port_never_raise() -> None:
    port = free_port()
    for metrics in (DatadogMetrics("127.0.0.1", port), StatsdMetrics("127.0.0.1", port)):
        for _ in range(5):  # ICMP port-unreachable surfaces on the following sends
            metrics.increment("delete.success")
            metrics.gauge("ready", 1, tags={"pool": "a"})
            metrics.timing("time_to_ready_state", 1.0, tags={"pool": "a"})
        metrics.close()


def test_unresolvable_host_never_raises() -> None:
    for metrics in (
        DatadogMetrics("no-such-host.invalid", 8125),
        StatsdMetrics("no-such-host.invalid", 8125),
        GraphiteMetrics("no-such-host.invalid", 2003),
    ):
        metrics.increment("delete.success")
        metrics.close()


def test_graphite_lines_on_one_connection() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(WAIT)
        metrics = GraphiteMetrics("127.0.0.1", server.getsockname()[1], clock=lambda: 1714568531.9)
        metrics.gauge("ready", 3, tags={"pool": "debian"})
        metrics.increment("vmpooler_errors.markedasfailed", tags={"pool": "centos"})
        metrics.timing("time_to_ready_state", 42.5, tags={"pool": "debian"})
        conn, _ = server.accept()
        with conn:
            conn.settimeout(WAIT)
            expected = (
                "vmpooler.ready.debian 3 1714568531\n"
                "vmpooler.vmpooler_errors.markedasfailed.centos 1 1714568531\n"
                "vmpooler.time_to_ready_state.debian 42.5 1714568531\n"
            )
            data = b""
            while len(data) < len(expected):
                chunk = conn.recv(4096)
                assert chunk, "connection closed early"
                data += chunk
            assert data.decode() == expected
            metrics.close()
            assert conn.recv(4096) == b""  # closed by the client, no second connection
        server.settimeout(0.2)
        with pytest.raises(TimeoutError):
            server.accept()


def test_graphite_closed_port_drops_and_backs_off() -> None:
    now = [100.0]
    attempts: list[float] = []
    metrics = GraphiteMetrics(
        "127.0.0.1", free_port(), retry_interval=5.0, monotonic=lambda: now[0]
    )
    original = socket.create_connection

    def counting(*args: object, **kwargs: object) -> socket.socket:
        attempts.append(now[0])
        return original(*args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket, "create_connection", counting)
        metrics.gauge("ready", 1, tags={"pool": "a"})
        metrics.flush()
        metrics.gauge("ready", 2, tags={"pool": "a"})
        metrics.flush()  # within retry_interval: not retried
        now[0] += 5.0
        metrics.gauge("ready", 3, tags={"pool": "a"})
        metrics.flush()
    assert attempts == [100.0, 105.0]
    metrics.close()


def test_graphite_reconnects_after_server_restart() -> None:
    now = [0.0]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(2)
        server.settimeout(WAIT)
        port = server.getsockname()[1]
        metrics = GraphiteMetrics(
            "127.0.0.1", port, clock=lambda: 7.0, monotonic=lambda: now[0], retry_interval=1.0
        )
        metrics.gauge("running", 1, tags={"pool": "a"})
        first, _ = server.accept()
        first.settimeout(WAIT)
        assert first.recv(4096) == b"vmpooler.running.a 1 7\n"
        first.close()
        # The peer is gone: writes fail at some point, get dropped, and the sender reconnects.
        for step in range(1, 50):
            now[0] = float(step * 2)
            metrics.gauge("running", step, tags={"pool": "a"})
            metrics.flush()
            server.settimeout(0.05)
            try:
                second, _ = server.accept()
                break
            except TimeoutError:
                continue
        else:
            pytest.fail("no reconnection")
        with second:
            second.settimeout(WAIT)
            metrics.gauge("running", 99, tags={"pool": "a"})
            metrics.flush()
            data = b""
            while b"vmpooler.running.a 99 7\n" not in data:
                chunk = second.recv(4096)
                assert chunk, f"connection closed before the new sample: {data!r}"
                data += chunk
        metrics.close()


def test_recording_metrics_helpers() -> None:
    metrics = RecordingMetrics()
    metrics.increment("vmpooler_errors.staledns", tags={"pool": "a"})
    metrics.increment("vmpooler_errors.staledns", tags={"pool": "a"}, value=2)
    metrics.increment("vmpooler_errors.staledns", tags={"pool": "b"})
    metrics.gauge("ready", 3, tags={"pool": "a"})
    metrics.gauge("ready", 5, tags={"pool": "a"})
    metrics.gauge("ready", 9, tags={"pool": "b"})
    metrics.timing("time_to_ready_state", 1.25, tags={"pool": "a"})
    assert metrics.counts("vmpooler_errors.staledns") == 4
    assert metrics.counts("vmpooler_errors.staledns", pool="a") == 3
    assert metrics.counts("vmpooler_errors.staledns", pool="zzz") == 0
    assert metrics.counts("ready") == 0
    assert metrics.last_gauge("ready", pool="a") == 5
    assert metrics.last_gauge("ready") == 9
    assert metrics.last_gauge("running") is None
    assert metrics.timings("time_to_ready_state", pool="a") == [1.25]
    assert metrics.records[0] == ("increment", "vmpooler_errors.staledns", 1, {"pool": "a"})
    snapshot = metrics.records
    snapshot.clear()
    assert len(metrics.records) == 7
    metrics.clear()
    assert metrics.records == []
    metrics.close()
    assert metrics.closed


def test_recording_metrics_is_thread_safe() -> None:
    metrics = RecordingMetrics()

    def work() -> None:
        for _ in range(1000):
            metrics.increment("hits", tags={"pool": "a"})

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert metrics.counts("hits", pool="a") == 8000


def test_null_metrics() -> None:
    metrics = NullMetrics()
    metrics.increment("a", tags={"pool": "x"})
    metrics.gauge("b", 1.0)
    metrics.timing("c", 2.0)
    metrics.close()


def test_create_metrics() -> None:
    assert isinstance(create_metrics("none", None, None, "vmpooler", ()), NullMetrics)
    made = [
        create_metrics("datadog", "127.0.0.1", 8125, "vmpooler", ["env:ci"]),
        create_metrics("StatsD", None, None, "vmpooler", ()),
        create_metrics("graphite", "127.0.0.1", None, "vmpooler", ()),
    ]
    assert [type(m) for m in made] == [DatadogMetrics, StatsdMetrics, GraphiteMetrics]
    for metrics in made:
        assert isinstance(metrics, Metrics)
        metrics.close()
    with pytest.raises(ValueError, match="prometheus"):
        create_metrics("influxdb", None, None, "vmpooler", ())


def test_create_metrics_statsd_defaults_reach_socket(udp: socket.socket) -> None:
    metrics = create_metrics("statsd", "127.0.0.1", udp.getsockname()[1], "pfx", ())
    metrics.gauge("ready", 1, tags={"pool": "p"})
    assert receive(udp, 1) == ["pfx.ready.p:1|g"]
    metrics.close()


def test_samples_are_packed_into_datagrams_and_leave_within_the_flush_interval(
        udp: socket.socket) -> None:
    """Many samples, few datagrams, none larger than one Ethernet payload; the last partial
    batch is sent by the flushing thread without any further call."""
    metrics = StatsdMetrics("127.0.0.1", udp.getsockname()[1])
    for n in range(200):
        metrics.increment("checkout.success", tags={"pool": f"pool-{n:03d}"})
    datagrams: list[bytes] = []
    lines: list[str] = []
    while len(lines) < 200:
        datagrams.append(udp.recv(65536))
        lines += datagrams[-1].decode().split("\n")
    assert lines == [f"vmpooler.checkout.success.pool-{n:03d}:1|c" for n in range(200)]
    assert len(datagrams) < 20
    assert max(map(len, datagrams)) <= 1432
    metrics.close()


def test_close_sends_what_is_batched(udp: socket.socket) -> None:
    for backend in (StatsdMetrics("127.0.0.1", udp.getsockname()[1]),
                    DatadogMetrics("127.0.0.1", udp.getsockname()[1])):
        backend.gauge("ready", 4, tags={"pool": "p"})
        backend.close()
        assert receive(udp, 1)[0].startswith("vmpooler.ready")


def test_datadog_sums_counts_and_keeps_the_last_gauge_per_flush(udp: socket.socket) -> None:
    metrics = DatadogMetrics("127.0.0.1", udp.getsockname()[1])
    for _ in range(5):
        metrics.increment("checkout.success", tags={"pool": "a"})
    metrics.gauge("ready", 1, tags={"pool": "a"})
    metrics.gauge("ready", 7, tags={"pool": "a"})
    metrics.flush()
    assert sorted(receive(udp, 2)) == ["vmpooler.checkout.success:5|c|#pool:a",
                                       "vmpooler.ready:7|g|#pool:a"]
    metrics.close()
