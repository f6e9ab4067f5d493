"""Fixtures of the hostile-client tests: one ``vmpooler run`` and one ``vmpooler api`` (two
workers, with a ``vmpooler manager``) per session, shared by every test that only needs a
service in its default configuration; tests that need another configuration start their own
with :func:`tests.hostile.service.start_service`."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.conftest import TEST_REDIS_SERVER
from tests.hostile.service import Service, start_service
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, find_redis_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def run_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``vmpooler run`` on its embedded Redis, in the hostile tests' default configuration."""
    service = start_service(tmp_path_factory.mktemp("hostile-run"), "run")
    yield service
    service.stop()


@pytest.fixture(scope="session")
def api_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """A redis-server of the ``vmpooler api`` service's own (never flushed by other tests)."""
    server = EmbeddedRedis(data_dir=tmp_path_factory.mktemp("hostile-redis"), persist=False,
                           hardened=False,  # a site's Redis, as configured: no password
                           binary=os.environ.get(TEST_REDIS_SERVER)
                           or find_redis_server(prefer_system=True))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def api_service(tmp_path_factory: pytest.TempPathFactory,
                api_redis: EmbeddedRedis) -> Iterator[Service]:
    """``vmpooler api`` (two workers) and ``vmpooler manager`` on :func:`api_redis`."""
    service = start_service(tmp_path_factory.mktemp("hostile-api"), "api",
                            redis_port=api_redis.port)
    yield service
    service.stop()


@pytest.fixture(params=["run", "api"])
def service(request: pytest.FixtureRequest) -> Service:
    """Each of the two shared services in turn."""
    return request.getfixturevalue(f"{request.param}_service")
