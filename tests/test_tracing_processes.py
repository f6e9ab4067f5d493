"""Traces through ``vmpooler api`` + ``vmpooler manager`` as processes, received by a real
OTLP/HTTP receiver: one on-demand request is one connected trace from the API's span to
the provider's clone (docs/tracing.md), sent when the processes stop (SIGTERM)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
import yaml

from tests.api_manager import api_and_manager_stack, http
from tests.harness import wait_until
from tests.otlp_receiver import ReceivedSpan, otlp_receiver
from tests.test_manager_process import write_config
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis

pytestmark = pytest.mark.integration

# ms between the exporter's batches: none is due while the test runs, so every span arrives
# through the flush of a process stopped by SIGTERM
AT_STOP_ONLY = {"OTEL_BSP_SCHEDULE_DELAY": "600000"}


def _one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def test_an_ondemand_request_is_one_trace_from_the_api_to_the_provider_clone(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
) -> None:
    with otlp_receiver() as receiver:
        config = write_config(tmp_path / "traced.yaml", redis_port=redis_server.port,
                              pools={"alpha": 0}, dummy={})
        document = yaml.safe_load(config.read_text())
        # vmpooler's key, given a URL that already is an OTLP one: used as given
        document[":tracing"] = {"enabled": "true", "jaeger_host": receiver.url}
        config.write_text(yaml.safe_dump(document))
        with api_and_manager_stack(tmp_path, config, debug=False, env=AT_STOP_ONLY) as stack:
            status, body = http("POST", f"{stack.url}/ondemandvm", {"alpha": 1})
            assert status == 201, body
            request_id = body["request_id"]
            wait_until(lambda: http("GET", f"{stack.url}/ondemandvm/{request_id}")[1]
                       .get("ready"), 60, "the request to be ready")
            assert receiver.all() == []  # nothing sent before the processes stop
        # both stopped (SIGTERM, waited for): what they had is in the receiver
        assert (stack.api.returncode, stack.manager.returncode) == (0, 0)
        api_spans = receiver.named("POST /api/v3/ondemandvm")
        assert len(api_spans) == 1, sorted({s.name for s in receiver.all()})
        trace = [s for s in receiver.all() if s.trace_id == api_spans[0].trace_id]
        api = _one(trace, "POST /api/v3/ondemandvm")
        request = _one(trace, "ondemand.request")
        pool = _one(trace, "pool.clone")
        clone = _one(trace, "provider.clone")
        # one trace, and each span the child of the one before: not only the same trace id
        assert api.parent == ""
        assert (request.parent, pool.parent, clone.parent) == (
            api.span_id, request.span_id, pool.span_id)
        assert (api.service, request.service, pool.service, clone.service) == (
            "vmpooler-api", "vmpooler-manager", "vmpooler-manager", "vmpooler-manager")
        assert api.attributes["http.response.status_code"] == 201
        assert api.attributes["http.route"] == "/api/v3/ondemandvm"
        assert request.attributes["vmpooler.request_id"] == request_id
        assert request.attributes["vmpooler.status"] == "ready"
        assert pool.attributes["vmpooler.outcome"] == "ready"
        assert "cloned" in pool.events
        assert clone.attributes["vmpooler.pool"] == "alpha"
        # the polls are spans of their route's template: the request id is in no name
        polls = receiver.named("GET /api/v3/ondemandvm/{requestid}")
        assert polls, sorted({s.name for s in receiver.all()})
        assert not [s.name for s in receiver.all() if request_id in s.name]
