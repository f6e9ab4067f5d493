"""One reading of a pool's size override for the manager, /status, /poolstat and /config."""

from __future__ import annotations

import pytest
import redis

from tests.api_harness import api, api_config, api_pool
from vmpooler.actors.config.overrides import effective_size, size_override
from vmpooler.actors.storage import schema

CASES = [("7", 7), (" 7 ", 7), ("+7", 7), ("0x10", 16), ("0b11", 3), ("010", 8), ("1_0", 10),
         ("-3", 0), ("0", 0), ("1.5", None), ("zero?", None), ("", None), ("1__0", None),
         (None, None), (5, 5), (-2, 0), (True, None)]


@pytest.mark.parametrize(("value", "size"), CASES)
def test_size_override(value: object, size: int | None) -> None:
    assert size_override(value) == size
    assert effective_size(4, value) == (4 if size is None else size)


@pytest.mark.parametrize(("value", "size"), [(v, s) for v, s in CASES if isinstance(v, str)])
def test_status_poolstat_and_config_show_the_same_size(redis_client: redis.Redis, value: str,
                                                       size: int | None) -> None:
    a = api(redis_client, api_config([api_pool("p", 4)]))
    redis_client.hset(schema.config_poolsize(), "p", value)
    expected = 4 if size is None else size
    status = a.client.simulate_get("/api/v3/status", params={"view": "pools"}).json
    poolstat = a.client.simulate_get("/api/v3/poolstat", params={"pool": "p"}).json
    config = a.client.simulate_get("/api/v3/config").json
    assert status["pools"]["p"]["max"] == expected
    assert poolstat["pools"]["p"]["max"] == expected
    assert config["pool_configuration"][0]["size"] == expected
