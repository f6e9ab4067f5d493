"""The image built from the shipped ``Dockerfile``: ``run`` with a read-only root filesystem
as UID 1001, its health check, a clean stop on SIGTERM, the other commands, and its size."""

from __future__ import annotations

import socket
import time

from tests.deploy.podman import BASE_IMAGE, Podman, image_size
from tests.http_client import eventually, get, pools_full, request


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_run_serves_on_a_read_only_root_and_stops_cleanly(podman: Podman,
                                                          vmpooler_image: str) -> None:
    name = f"vmpooler-run-{free_port()}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    podman("run", "--detach", "--name", name, "--read-only", "-p", f"127.0.0.1:{port}:4567",
           vmpooler_image)  # the default command: run (API, manager, embedded Redis)
    try:
        pools = eventually(lambda: pools_full(base), 60, "every pool full",
                           lambda: podman.logs(name))
        print(f"podman run to full pools: {time.monotonic() - started:.1f} s ({pools})")
        status, vm = request("POST", f"{base}/api/v3/vm/debian-12-x86_64")
        assert status == 200 and vm["ok"] is True, vm
        assert vm["debian-12-x86_64"]["hostname"]
        assert podman("exec", name, "id", "-u").stdout.strip() == "1001"
        denied = podman("exec", name, "touch", "/opt/vmpooler/x", check=False)
        assert denied.returncode != 0 and "Read-only file system" in denied.stderr
        assert podman("healthcheck", "run", name, check=False).returncode == 0
        assert get(f"{base}/healthcheck") == (200, {"ok": True})

        stopping = time.monotonic()
        podman("stop", "--time", "30", name)
        assert time.monotonic() - stopping < 15, "SIGTERM did not stop it within 15 s"
        state = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        assert state == "0", podman.logs(name)
        assert "[manager] stopped" in podman.logs(name)
    finally:
        podman.remove(name)


def test_commands_as_vmpooler_image_takes_them(podman: Podman, vmpooler_image: str) -> None:
    checked = podman("run", "--rm", "--read-only", vmpooler_image, "check-config")
    assert checked.stdout.startswith("# source: ") and ":pools:" in checked.stdout
    version = podman("run", "--rm", vmpooler_image, "--version")
    assert version.stdout.startswith("vmpooler ")
    wrong = podman("run", "--rm", vmpooler_image, "serve-everything", check=False)
    assert wrong.returncode == 2 and "invalid choice" in wrong.stderr
    bad = podman("run", "--rm", "-e", "VMPOOLER_CONFIG=:config: [", vmpooler_image,
                 "check-config", check=False)
    assert bad.returncode == 1 and "configuration is invalid" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_the_image_adds_little_to_its_base(podman: Podman, vmpooler_image: str) -> None:
    added = image_size(podman, vmpooler_image) - image_size(podman, BASE_IMAGE)
    print(f"image: {image_size(podman, vmpooler_image) / 1e6:.0f} MB, "
          f"{added / 1e6:.0f} MB over {BASE_IMAGE}")
    assert added < 100e6, f"the image adds {added / 1e6:.0f} MB to its base"
    config = podman("image", "inspect", "--format",
                    "{{.Config.User}} {{.Config.Entrypoint}} {{.Config.Cmd}} "
                    "{{.Config.ExposedPorts}} {{.Config.Volumes}}", vmpooler_image).stdout
    assert config.split()[0] == "1001:1001"
    assert "[vmpooler]" in config and "[run]" in config
    assert "4567/tcp" in config and "/var/lib/vmpooler" in config
