"""The container image: its size, and the time from ``podman run`` to every pool full.

Builds the image from the repository's ``Dockerfile`` on the local base image of the
deployment tests (``.ci/podman-base`` makes it), then starts ``vmpooler run`` on a
read-only root ``--runs`` times, each from a new container, and reports the median, the
fastest and the slowest time to full pools (the bundled configuration: 3 pools, 5 VMs) and to
``GET /healthcheck``, and the time ``podman stop`` takes (SIGTERM to exit).

    .venv/bin/python bench/container.py --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.deploy.podman import (
    BASE_IMAGE,
    build_vmpooler_image,
    image_size,
    podman_or_skip,
)
from tests.deploy.test_image import free_port
from tests.http_client import eventually, get, pools_full


def one_start(podman: object, image: str) -> tuple[float, float, float]:
    """Seconds to /healthcheck, to full pools, and for ``podman stop``."""
    name = f"vmpooler-bench-{uuid.uuid4().hex[:8]}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    podman("run", "--detach", "--name", name, "--read-only",  # type: ignore[operator]
           "-p", f"127.0.0.1:{port}:4567", image)
    try:
        eventually(lambda: get(f"{base}/healthcheck", timeout=1)[0] == 200, 60, "healthcheck")
        healthy = time.monotonic() - started
        eventually(lambda: pools_full(base), 60, "full pools")
        full = time.monotonic() - started
        stopping = time.monotonic()
        podman("stop", "--time", "30", name)  # type: ignore[operator]
        return healthy, full, time.monotonic() - stopping
    finally:
        podman.remove(name)  # type: ignore[attr-defined]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    podman = podman_or_skip()
    tag = f"localhost/vmpooler:bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as context:
        built = time.monotonic()
        build_vmpooler_image(podman, Path(context), tag)
        build_seconds = time.monotonic() - built
    try:
        size, base = image_size(podman, tag), image_size(podman, BASE_IMAGE)
        print(f"image {size / 1e6:.0f} MB: {base / 1e6:.0f} MB base + "
              f"{(size - base) / 1e6:.0f} MB vmpooler; built in {build_seconds:.0f} s "
              "(wheels and image, base cached)")
        runs = [one_start(podman, tag) for _ in range(args.runs)]
        for label, values in zip(("healthcheck", "full pools", "podman stop"),
                                 zip(*runs, strict=True), strict=True):
            print(f"{label:>12}: median {statistics.median(values):.2f} s, "
                  f"min {min(values):.2f}, max {max(values):.2f} ({len(values)} runs)")
    finally:
        podman("rmi", "--force", tag, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
