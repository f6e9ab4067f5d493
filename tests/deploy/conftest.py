"""Fixtures of the deployment tests: the image built once per session from the shipped
``Dockerfile``, and a Redis image, both on a local base (no registry is reachable)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.deploy.podman import Podman, build_redis_image, build_vmpooler_image, podman_or_skip


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every deployment test builds images and runs containers: mark it ``integration`` and
    ``solo`` (it wants the machine to itself; a ``pytestmark`` in a conftest marks
    nothing)."""
    here = str(__file__).rsplit("/", 1)[0] + "/"
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.solo)


@pytest.fixture(scope="session")
def podman() -> Podman:
    """The podman command (skips, or fails under ``VMPOOLER_REQUIRE_PODMAN=1``, without it)."""
    return podman_or_skip()


@pytest.fixture(scope="session")
def session_tag() -> str:
    """A tag unique to this test session, so that parallel runs do not share images."""
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def vmpooler_image(podman: Podman, session_tag: str,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The image built from this checkout's ``Dockerfile``."""
    tag = f"localhost/vmpooler:test-{session_tag}"
    build_vmpooler_image(podman, tmp_path_factory.mktemp("image-context"), tag)
    yield tag
    podman("rmi", "--force", tag, check=False)


@pytest.fixture(scope="session")
def redis_image(podman: Podman, session_tag: str,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis image (redis-server on PATH)."""
    tag = f"localhost/redis:test-{session_tag}"
    build_redis_image(podman, tmp_path_factory.mktemp("redis-context"), tag)
    yield tag
    podman("rmi", "--force", tag, check=False)
