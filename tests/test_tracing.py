"""Tracing's configuration, its cost when off, and the API's spans, against a real OTLP/HTTP
receiver (:mod:`tests.otlp_receiver`); the whole way through processes is
tests/test_tracing_processes.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
import redis

from tests.api_harness import api_config, api_pool
from tests.harness import wait_until
from tests.otlp_receiver import OtlpReceiver, otlp_receiver
from vmpooler.actors.cluster.relay import decode, encode
from vmpooler.actors.config import ConfigError, load_config
from vmpooler.actors.config._tracing import otlp_traces_url
from vmpooler.actors.config.model import TracingSettings
from vmpooler.actors.messages import CloneForRequest, Command, CommandKind
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.service.command_stream import CommandConsumer, StreamOptions
from vmpooler.actors.storage import schema
from vmpooler.actors.tracing import ExportPlan, TracingError, plan, service_name
from vmpooler.web.api_context import ApiContext
from vmpooler.web.app import create_app
from vmpooler.web.commands import StreamCommands

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as running:
        yield running


def otel_tracer(endpoint: str, sampler: str = "parentbased_always_on",
                ratio: float | None = None) -> Any:
    from vmpooler.actors.tracing.otel import OtelTracer
    return OtelTracer(ExportPlan(endpoint, "test", sampler, ratio), "vmpooler-api")


# -- configuration -------------------------------------------------------------------------------
@pytest.mark.parametrize(("given", "sent"), [
    ("http://jaeger:14268/api/traces", "http://jaeger:4318/v1/traces"),  # vmpooler's default
    ("https://j.example:14268/api/traces", "https://j.example:4318/v1/traces"),
    ("http://[::1]:14268/api/traces", "http://[::1]:4318/v1/traces"),
    ("http://collector:4318/v1/traces", "http://collector:4318/v1/traces"),  # OTLP already
    ("http://collector:8080/otlp/v1/traces", "http://collector:8080/otlp/v1/traces"),
])
def test_jaeger_host_is_sent_to_the_same_hosts_otlp_receiver(given: str, sent: str) -> None:
    assert otlp_traces_url(given)[0] == sent


def test_the_standard_variables_win_over_the_file_and_say_which_sampler() -> None:
    settings = TracingSettings(enabled=True, jaeger_host="http://j:14268/api/traces",
                               endpoint="http://j:4318/v1/traces", sample_ratio=0.25)
    assert plan(settings, {}) == ExportPlan("http://j:4318/v1/traces", "tracing.jaeger_host",
                                            "parentbased_traceidratio", 0.25)
    both = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:9999/traces"}
    assert plan(settings, both).endpoint == "http://t:9999/traces"
    del both["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    assert plan(settings, both).endpoint == "http://c:4318/v1/traces"
    env = {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"}
    assert (plan(settings, env).sampler, plan(settings, env).ratio) == ("traceidratio", 0.5)
    assert plan(TracingSettings(), {}).sampler == "parentbased_always_on"
    for bad, variable in (({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"),
                          ({**env, "OTEL_TRACES_SAMPLER_ARG": "1.5"}, "OTEL_TRACES_SAMPLER_ARG"),
                          ({"OTEL_EXPORTER_OTLP_ENDPOINT": "c:4318"},
                           "OTEL_EXPORTER_OTLP_ENDPOINT")):
        with pytest.raises(TracingError, match=f"^{variable}: "):
            plan(settings, bad)
    assert service_name("api", "") == "vmpooler-api"
    assert service_name("manager", "ci") == "vmpooler-manager-ci"
    assert service_name("run", "") == "vmpooler"


def test_bad_tracing_values_name_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent("""\
        :tracing:
          enabled: 'maybe'
          jaeger_host: 'jaeger:14268'
          sample_ratio: 1.5
        :pools: []
        """))
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    text = str(raised.value)
    for line, key in ((2, "enabled"), (3, "jaeger_host"), (4, "sample_ratio")):
        assert f"{path}:{line}: tracing.{key}: " in text, text
    config = load_config(path, environ={"VMPOOLER_TRACING_ENABLED": "true",
                                        "VMPOOLER_TRACING_JAEGER_HOST": "http://j:14268/api/traces",
                                        "VMPOOLER_TRACING_SAMPLE_RATIO": "0.1"})
    assert config.tracing == TracingSettings(
        enabled=True, jaeger_host="http://j:14268/api/traces",
        endpoint="http://j:4318/v1/traces", mapped=True, sample_ratio=0.1)


def test_off_imports_no_opentelemetry_and_on_without_the_extra_is_one_line(
        tmp_path: Path) -> None:
    """Where OpenTelemetry is not installed (a finder answers every import of it so), the
    API answers a request and the manager's modules load with tracing off, and no module of
    vmpooler asked for it; ``vmpooler manager`` with tracing on says in one line what to
    install. (redis-py 8 looks for OpenTelemetry by itself, for its own metrics: that is
    not counted.)"""
    code = textwrap.dedent("""\
        import contextlib, io, sys, traceback
        ROOTS = sys.argv[3:]
        asked = []
        class Absent:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    callers = [f.filename for f in traceback.extract_stack()]
                    asked.extend(c for c in callers if any(c.startswith(r) for r in ROOTS))
                    raise ImportError(name, name=name)
                return None
        sys.meta_path.insert(0, Absent())
        import falcon.testing, redis
        from vmpooler.actors.config import load_config
        from vmpooler.actors.tracing import build_tracer, check_tracing
        import vmpooler.actors.system, vmpooler.web.cli.serve, vmpooler.web.cli.command
        from vmpooler.web.api_context import ApiContext
        from vmpooler.web.app import create_app
        config = load_config(sys.argv[1], environ={})
        assert check_tracing(config, "api") is None
        tracer = build_tracer(config, "api")
        ctx = ApiContext(config=config, redis=redis.Redis(port=1), tracer=tracer)
        falcon.testing.TestClient(create_app(ctx)).simulate_get("/api/v3/openapi.json")
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        assert not loaded and not asked, (loaded, asked)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = vmpooler.web.cli.command.main(["manager", "--config", sys.argv[2]])
        print(code, err.getvalue(), end="")
        """)
    off, on = tmp_path / "off.yaml", tmp_path / "on.yaml"
    off.write_text(":tracing:\n  enabled: 'false'\n:pools: []\n")
    on.write_text(":tracing:\n  enabled: 'true'\n:pools: []\n")
    repo = Path(__file__).resolve().parent.parent
    roots = [str(repo / folder) for folder in ("actors", "web", "providers")]
    result = subprocess.run([sys.executable, "-c", code, str(off), str(on), *roots],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    status, _, said = result.stdout.partition(" ")
    assert status == "1" and said.count("\n") == 1, result.stdout
    assert said.startswith("vmpooler: tracing is enabled but OpenTelemetry is not installed")
    assert "pip install 'vmpooler[tracing]'" in said and "Traceback" not in said


# -- what crosses processes -----------------------------------------------------------------------
def test_the_trace_context_rides_beside_the_message_fields_old_readers_know() -> None:
    command = Command(CommandKind.REQUEST_CHANGED, "r1", "created", traceparent=PARENT)
    fields = command.to_fields()
    assert fields["traceparent"] == PARENT
    assert Command.from_fields(fields) == command
    untraced = Command(CommandKind.REQUEST_CHANGED, "r1", "created")
    assert set(untraced.to_fields()) == {"id", "kind", "pool", "reason"}  # as before
    grant = CloneForRequest("r1", "alpha", "alpha", grant=3, traceparent=PARENT)
    wire = encode("pool:alpha", grant)
    assert wire["traceparent"] == PARENT and "traceparent" not in wire["body"]
    assert decode(wire)[1] == grant
    assert "traceparent" not in encode("pool:alpha", CloneForRequest("r1", "a", "a"))


# -- spans ---------------------------------------------------------------------------------------
def test_sampling_zero_exports_nothing_and_one_exports_every_span(
        receiver: OtlpReceiver) -> None:
    for ratio, expected in ((0.0, 0), (1.0, 3)):
        tracer = otel_tracer(receiver.url, "parentbased_traceidratio", ratio)
        with tracer.start("root") as root:
            tracer.start("child").end()
            root.child("task", start=1.0, end=2.0)
        tracer.shutdown()
        assert len(receiver.all()) == expected


def test_the_exporters_own_variables_reach_the_receiver(
        receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """Headers (an API key, say) come from ``OTEL_EXPORTER_OTLP_TRACES_HEADERS``, read by
    the exporter itself; the endpoint from the plan."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-api-key=s3cret")
    tracer = otel_tracer(receiver.url)
    tracer.start("one").end()
    tracer.shutdown()
    assert receiver.posts == 1 and receiver.headers[0]["x-api-key"] == "s3cret"
    assert receiver.headers[0]["content-type"] == "application/x-protobuf"


def test_a_request_span_is_named_after_its_route_and_holds_its_script_spans(
        receiver: OtlpReceiver, redis_client: redis.Redis) -> None:
    tracer = otel_tracer(receiver.url)
    ctx = ApiContext(config=api_config([api_pool("pool1")]), redis=redis_client,
                     tracer=tracer)
    redis_client.sadd(schema.ready("pool1"), "secretvm1")
    redis_client.hset(schema.vm("secretvm1"), mapping={"template": "pool1"})
    client = falcon.testing.TestClient(create_app(ctx))
    assert client.simulate_get("/api/v3/vm/secretvm2").status_code == 404
    assert client.simulate_post("/api/v3/vm/pool1").status_code == 200
    assert client.simulate_get("/api/v3/status").status_code == 200
    assert client.simulate_get("/nowhere/secretvm3").status_code == 404
    assert client.simulate_request("SECRETVM4", "/api/v3/status").status_code == 400
    tracer.shutdown()
    spans = {span.name: span for span in receiver.all()}
    assert set(spans) == {"GET /api/v3/vm/{hostname}", "POST /api/v3/vm/{hostname}",
                          "redis checkout", "GET /api/v3/status", "redis status", "GET",
                          "_OTHER /api/v3/status"}
    assert spans["redis checkout"].parent == spans["POST /api/v3/vm/{hostname}"].span_id
    assert spans["redis status"].parent == spans["GET /api/v3/status"].span_id
    get = spans["GET /api/v3/vm/{hostname}"]
    assert get.attributes == {"http.request.method": "GET", "http.route":
                              "/api/v3/vm/{hostname}", "http.response.status_code": 404}
    assert get.parent == "" and get.kind == 2  # a server span, a trace of its own
    # no value from the path (a VM's name here; a token in /token/{token}) reaches a span
    assert "secretvm" not in repr(receiver.all())


def test_the_command_stream_carries_the_api_requests_trace_to_the_manager(
        receiver: OtlpReceiver, redis_client: redis.Redis) -> None:
    """``StreamCommands`` (the API) writes the current span's context with the request's
    command; the manager's ``CommandConsumer`` reads it and hands it on with the request."""
    told: list[tuple[str, str, str]] = []
    ref = CommandConsumer.start(
        client=redis_client, notify=lambda pool, reason: True, notify_tasks=lambda: True,
        notify_request=lambda request_id, reason, traceparent="": told.append(
            (request_id, reason, traceparent)) is None,
        options=StreamOptions(block_ms=50), clock=FakeClock())
    tracer = otel_tracer(receiver.url)
    try:
        commands = StreamCommands(redis_client)
        with tracer.start("POST /api/v3/ondemandvm", kind="server") as span:
            commands.request_changed("r1", "created")
        commands.request_changed("r2", "deleted")  # outside any span: no trace
        wait_until(lambda: len(told) == 2, 10, "both commands dispatched")
    finally:
        ref.stop(block=True, timeout=10)
        tracer.shutdown()
    assert told == [("r1", "created", span.traceparent), ("r2", "deleted", "")]
    assert span.traceparent.startswith("00-") and int(span.traceparent[-2:], 16) & 1  # sampled
