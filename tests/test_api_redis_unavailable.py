"""Requests that fail because Redis cannot be reached: which errors count, the log pace and
the counter (the answers themselves are checked per operation in tests/test_openapi.py)."""

from __future__ import annotations

import logging

import pytest
import redis
from redis.exceptions import MasterDownError

from tests.api_harness import api, api_config, api_pool
from vmpooler.actors.storage.connection import connect
from vmpooler.actors.storage.embedded_redis import free_port
from vmpooler.web.api_errors import UNAVAILABLE_METRIC, redis_unavailable

STATUS = "/api/v3/status"


@pytest.mark.parametrize("error", [
    redis.ConnectionError("refused"), redis.TimeoutError("slow"),
    redis.BusyLoadingError("Redis is loading the dataset in memory"),
    redis.ReadOnlyError("You can't write against a read only replica."),
    MasterDownError("MASTERDOWN Link with MASTER is down"),
    redis.ResponseError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is no"),
])
def test_outage_errors_are_recognised(error: Exception) -> None:
    assert redis_unavailable(error)
    wrapped = RuntimeError("store failed")
    wrapped.__cause__ = error
    assert redis_unavailable(wrapped)


@pytest.mark.parametrize("error", [
    redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
    redis.DataError("bad"), ValueError("x"),
])
def test_other_errors_are_not_an_outage(error: Exception) -> None:
    assert not redis_unavailable(error)


def test_refusals_are_logged_once_per_five_seconds_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dead = connect("127.0.0.1", free_port(), pool_size=2, pool_timeout=1, reconnect_attempts=0)
    a = api(dead, api_config([api_pool("pool1")]))
    with caplog.at_level(logging.WARNING, logger="vmpooler.web.api_errors"):
        codes = [a.client.simulate_get(STATUS).status_code for _ in range(20)]
        a.clock.advance(4.9)
        codes.append(a.client.simulate_get(STATUS).status_code)
        a.clock.advance(0.2)
        codes.append(a.client.simulate_get(STATUS).status_code)
    assert codes == [503] * 22
    lines = [r.getMessage() for r in caplog.records if "answering 503" in r.getMessage()]
    assert len(lines) == 2, lines
    assert "ConnectionError" in lines[0] and "GET /api/v3/status" in lines[0]
    assert "20 more refused since the last line" in lines[1]
    assert a.metrics.counts(UNAVAILABLE_METRIC) == 22
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    dead.close()


def test_other_redis_errors_stay_a_json_500(redis_client: redis.Redis,
                                            caplog: pytest.LogCaptureFixture) -> None:
    a = api(redis_client, api_config([api_pool("pool1")]))
    redis_client.set("vmpooler__ready__pool1", "not a set")  # WRONGTYPE for the status script
    try:
        with caplog.at_level(logging.CRITICAL):
            resp = a.client.simulate_get(STATUS)
    finally:
        redis_client.delete("vmpooler__ready__pool1")
    assert resp.status_code == 500
    assert resp.json == {"ok": False, "error": "internal error"}
    assert a.metrics.counts(UNAVAILABLE_METRIC) == 0
