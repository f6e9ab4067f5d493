"""``vmpooler api`` listening on every address with experimental features and no ``:auth:``:
anonymous pool changes are refused unless the operator opted in, which the start logs."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml

from tests.conftest import TEST_REDIS_SERVER
from tests.harness import wait_until
from tests.test_manager_process import processes, spawn, write_config  # noqa: F401
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, find_redis_server, free_port

pytestmark = pytest.mark.integration

CHANGES = [("POST", "/api/v3/config/poolsize", {"a": 10000}),
           ("POST", "/api/v3/config/pooltemplate", {"a": "templates/evil"}),
           ("POST", "/api/v3/config/clonetarget", {"a": "elsewhere"}),
           ("POST", "/api/v3/poolreset", {"a": "1"}),
           ("DELETE", "/api/v3/config/poolsize/a", None)]


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(data_dir=tmp_path / "redis", persist=False, hardened=False,
                           binary=os.environ.get(TEST_REDIS_SERVER)
                           or find_redis_server(prefer_system=True))
    server.start()
    yield server
    server.stop()


def call(port: int, method: str, path: str, body: object = None) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=None if body is None else json.dumps(body))
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read() or b"null")
    except (OSError, http.client.HTTPException):
        return 0, {}
    finally:
        connection.close()


def start_api(tmp_path: Path, redis_port: int, processes: list[subprocess.Popen[str]],
              **settings: object) -> tuple[int, Path]:
    config = write_config(tmp_path / "c.yaml", redis_port=redis_port, pools={"a": 1},
                          dummy={})
    document = yaml.safe_load(config.read_text())
    document[":config"].update({"experimental_features": True, **settings})
    config.write_text(yaml.safe_dump(document))
    port = free_port()
    log = tmp_path / "api.log"
    spawn(processes, "api", "--config", str(config), "--bind", f"0.0.0.0:{port}", log=log)
    wait_until(lambda: call(port, "GET", "/api/v3/status")[0] == 200, 40, "the API to answer",
               explain=log.read_text)
    return port, log


def test_anonymous_pool_changes_are_refused_on_every_address(
    tmp_path: Path, own_redis: EmbeddedRedis, processes: list[subprocess.Popen[str]],
) -> None:
    port, log = start_api(tmp_path, own_redis.port, processes)
    for method, path, body in CHANGES:
        status, answer = call(port, method, path, body)
        assert status == 403, (method, path, status, answer)
        assert answer["ok"] is False
        assert "experimental_features_without_auth" in answer["error"]
    client = redis.Redis(port=own_redis.port, decode_responses=True)
    assert client.hgetall(schema.config_poolsize()) == {}
    assert client.hgetall(schema.config_template()) == {}
    assert not client.exists(schema.poolreset())
    assert call(port, "GET", "/api/v3/config")[0] == 200  # reading stays open
    text = log.read_text()
    assert "[!] [api] pool changes (/config/*, /poolreset) are refused with 403 on 0.0.0.0:" \
        in text
    assert "Traceback" not in text
    client.close()


def test_the_opt_in_opens_them_and_says_so_at_start(
    tmp_path: Path, own_redis: EmbeddedRedis, processes: list[subprocess.Popen[str]],
) -> None:
    port, log = start_api(tmp_path, own_redis.port, processes,
                          experimental_features_without_auth=True)
    assert call(port, "POST", "/api/v3/config/poolsize", {"a": 3})[0] == 201
    assert f"[!] [api] anyone who reaches 0.0.0.0:{port} may change the pools" in log.read_text()
