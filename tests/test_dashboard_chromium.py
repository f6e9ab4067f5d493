"""``/dashboard/`` in Debian's headless Chromium against a running ``vmpooler run``.

Chromium is driven through its DevTools protocol (``--remote-debugging-port``) by the small
websocket client below: no browser library. The page must load with no console error, no
uncaught exception and no failed load; show every configured pool with the counts Redis
holds; show a checkout within 2 s; and draw history. The process's clock cannot be faked, so
``vmpooler run`` gets ``VMPOOLER_HISTORY_INTERVAL=1`` (one point a second instead of a
minute). Screenshots at 1280x800 and 390x844 go to ``$VMPOOLER_TEST_ARTIFACTS`` (default: the
test's tmp_path); their paths are printed.

Without a ``chromium`` executable the test skips, unless ``VMPOOLER_REQUIRE_CHROMIUM=1``
(CI), where it fails.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.api_harness import TOKEN
from tests.harness import wait_until
from tests.test_api_processes import call
from tests.test_manager_process import full, processes, spawn, write_config  # noqa: F401
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.dlq_store import DeadLetter
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port

pytestmark = pytest.mark.integration

POOLS = {"alpha": 2, "beta": 1, "gamma-x": 1}
STANDBY = {"gamma-x": 2}
"""Pools with a standby tier (``standby: n``, suspended VMs), shown under their ready count."""
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--mute-audio"]


class Cdp:
    """A minimal DevTools-protocol client over one websocket (RFC 6455, text frames only)."""

    def __init__(self, url: str, timeout: float = 15.0) -> None:
        host_port, _, path = url.removeprefix("ws://").partition("/")
        host, _, port = host_port.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("websocket handshake: connection closed")
            head += chunk
        assert head.startswith(b"HTTP/1.1 101"), head
        self.buffer = head.split(b"\r\n\r\n", 1)[1]
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("websocket closed")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def _frame(self) -> dict[str, Any]:
        message = b""
        while True:
            first, second = self._exact(2)
            length = second & 0x7F
            if length == 126:
                (length,) = struct.unpack(">H", self._exact(2))
            elif length == 127:
                (length,) = struct.unpack(">Q", self._exact(8))
            message += self._exact(length)
            if first & 0x80:  # FIN
                return json.loads(message)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Call ``method`` and return its ``result``; events read meanwhile are kept."""
        self.next_id += 1
        payload = json.dumps({"id": self.next_id, "method": method, "params": params}).encode()
        mask = os.urandom(4)
        n = len(payload)
        header = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                  bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                  bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        while True:
            message = self._frame()
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def js(self, expression: str) -> Any:
        """The value of ``expression`` in the page (JSON-serialisable)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads seen so far."""
        out = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append(f"console: {params.get('args')}")
            elif method == "Runtime.exceptionThrown":
                out.append(f"exception: {params.get('exceptionDetails')}")
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                out.append(f"log: {params['entry'].get('text')} {params['entry'].get('url')}")
            elif method == "Network.loadingFailed":
                out.append(f"load failed: {params.get('errorText')}")
        return out

    def close(self) -> None:
        self.sock.close()


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("VMPOOLER_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is not installed (VMPOOLER_REQUIRE_CHROMIUM=1)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return path


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Cdp]:
    """A fresh headless Chromium (own profile) and a CDP session on its blank page."""
    profile = tmp_path / "chromium-profile"
    process = subprocess.Popen(
        [chromium(), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "--window-size=1280,800", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "chromium.log", "w"))  # noqa: SIM115
    cdp = None
    try:
        port_file = profile / "DevToolsActivePort"
        wait_until(lambda: port_file.exists() and len(port_file.read_text().split()) >= 2, 30,
                   "Chromium's DevTools port")
        port = port_file.read_text().split()[0]

        def page_target() -> str | None:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                targets = json.load(r)
            pages = [t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page"]
            return pages[0] if pages else None

        cdp = Cdp(wait_until(page_target, 15, "Chromium's page target"))
        for domain in ("Runtime", "Log", "Page", "Network"):
            cdp.send(f"{domain}.enable")
        yield cdp
    finally:
        if cdp is not None:
            cdp.close()
        process.kill()
        process.wait(timeout=10)


def page_pools(cdp: Cdp) -> dict[str, tuple[str, str, str]]:
    """``{pool: (ready / size, pending, running)}`` as the page's pool table shows them."""
    rows = cdp.js("""[...document.querySelectorAll('#pool-rows tr')].filter(r => r.cells.length > 2)
        .map(r => [r.querySelector('.pool-name').textContent, r.querySelector('.nums').textContent,
                   r.cells[2].textContent, r.cells[3].textContent])""")
    return {name: (nums, pending, running) for name, nums, pending, running in rows}


def page_standby(cdp: Cdp) -> dict[str, str]:
    """``{pool: its standby note}`` of the rows that show one."""
    rows = cdp.js("""[...document.querySelectorAll('#pool-rows tr')]
        .filter(r => r.querySelector('.standby'))
        .map(r => [r.querySelector('.pool-name').textContent,
                   r.querySelector('.standby').textContent])""")
    return dict(rows)


def suspended(client: redis.Redis, pool: str) -> int:
    return sum(client.hget(schema.vm(vm), "standby") == "suspended"
               for vm in client.smembers(schema.standby(pool)))


def redis_pools(client: redis.Redis) -> dict[str, tuple[str, str, str]]:
    return {pool: (f"{client.scard(schema.ready(pool))} / {size}",
                   str(client.scard(schema.pending(pool))),
                   str(client.scard(schema.running(pool))))
            for pool, size in POOLS.items()}


def screenshot(cdp: Cdp, width: int, height: int, path: Path) -> None:
    cdp.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
             deviceScaleFactor=1, mobile=width < 600)
    wait_until(lambda: cdp.js("window.innerWidth") == width, 10, f"the {width} px viewport")
    data = cdp.send("Page.captureScreenshot", format="png")["data"]
    path.write_bytes(base64.b64decode(data))
    print(f"dashboard screenshot: {path}")


def clipped(cdp: Cdp) -> list[str]:
    """What the activity row (requests, providers, users, errors) cuts off: a table wider
    than its panel, or a cell whose text does not fit it (the narrow layout's visually hidden
    header row aside: its labels are on the cells)."""
    return cdp.js("""[...document.querySelectorAll('.activity .panel:not([hidden])')]
        .flatMap(panel => {
          const title = panel.querySelector('h2').textContent.trim();
          const out = [];
          const wrap = panel.querySelector('.table-wrap');
          if (wrap && wrap.scrollWidth > wrap.clientWidth + 1) {
            out.push(`${title}: table ${wrap.scrollWidth} px wide in ${wrap.clientWidth}`);
          }
          panel.querySelectorAll('th, td').forEach(cell => {
            const head = cell.closest('thead');
            if (head && getComputedStyle(head).clipPath !== 'none') { return; }
            if (cell.scrollWidth > cell.clientWidth + 1) {
              out.push(`${title}: "${cell.textContent}" ${cell.scrollWidth} px in `
                       + cell.clientWidth);
            }
          });
          if (panel.getBoundingClientRect().right > window.innerWidth + 1) {
            out.push(`${title}: panel ends past the window`);
          }
          return out;
        })""")


def test_dashboard_in_headless_chromium(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
    processes: list[subprocess.Popen[str]], browser: Cdp,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    artifacts = Path(os.environ.get("VMPOOLER_TEST_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    failed = DeadLetter.now(vm="beta-lost", pool="beta", queue="clone",
                            error_class="RuntimeError", error_message="clone refused",
                            epoch=time.time() - 30)
    redis_client.zadd(schema.dlq("clone"), {failed.member(): failed.epoch})
    config = write_config(tmp_path / "f.yaml", redis_port=redis_server.port, pools=POOLS,
                          dummy={})
    # auth configured, and on-demand requests that stay in flight (no clone slot for them)
    document = yaml.safe_load(config.read_text())
    document[":auth"] = {"provider": "dummy"}
    document[":config"]["ondemand_clone_limit"] = 0
    # quotas: the page's Users panel is shown (its table is among those that must not clip)
    document[":quotas"] = {"default": {"vms_held": 20, "ondemand_in_flight": 5}}
    for entry in document[":pools"]:
        if entry["name"] in STANDBY:
            entry["standby"] = STANDBY[entry["name"]]
    config.write_text(yaml.safe_dump(document))
    redis_client.hset(schema.token(TOKEN), mapping={"user": "alice", "created": "now"})
    monkeypatch.setenv("VMPOOLER_DEBUG", "1")  # dummy auth
    monkeypatch.setenv("VMPOOLER_HISTORY_INTERVAL", "1")
    port = free_port()
    spawn(processes, "run", "--config", str(config), "--bind", f"127.0.0.1:{port}",
          log=tmp_path / "run.log")
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: full(redis_client, POOLS), 60, "the pools to fill")

    request = urllib.request.Request(f"{base}/api/v3/ondemandvm", method="POST",
                                     data=json.dumps({"beta": 1}).encode(),
                                     headers={"X-AUTH-TOKEN": TOKEN})
    with urllib.request.urlopen(request, timeout=10) as answer:
        request_id = json.load(answer)["request_id"]
    browser.send("Page.navigate", url=f"{base}/dashboard/")
    wait_until(lambda: (shown := page_pools(browser)) and shown == redis_pools(redis_client),
               20, "the page to show every pool as Redis holds it")
    assert set(page_pools(browser)) == set(POOLS)
    wait_until(lambda: all(suspended(redis_client, pool) == n for pool, n in STANDBY.items()),
               30, "the standby tier suspended")
    wait_until(lambda: page_standby(browser) == {
        pool: f"+{n} / {n} suspended" for pool, n in STANDBY.items()}, 10,
        "the standby tier on the page, and only for the pools that keep one")

    running_before = redis_client.scard(schema.running("alpha"))
    status, body = call("POST", f"{base}/api/v3/vm/alpha")
    checked_out = time.monotonic()
    assert status == 200 and body["ok"], body
    wait_until(lambda: page_pools(browser)["alpha"][2] == str(running_before + 1), 2,
               "the checkout on the page")
    print(f"checkout shown after {time.monotonic() - checked_out:.2f} s")

    wait_until(lambda: browser.js(
        "document.querySelectorAll('#chart-vms polyline').length") == 3, 20,
        "the history chart")
    label = browser.js("document.getElementById('chart-vms').getAttribute('aria-label')")
    assert label.split()[1] == "points" and int(label.split()[0]) >= 2, label
    wait_until(lambda: "clone refused" in browser.js(
        "document.getElementById('error-list').textContent"), 10, "the dead letter listed")
    assert "closed" in browser.js("document.getElementById('provider-rows').textContent")
    # an anonymous viewer sees the request's pools, never its id nor its user
    rows = "document.getElementById('request-rows').textContent"
    wait_until(lambda: "beta" in browser.js(rows), 10, "the request listed")
    assert "hidden" in browser.js(rows)
    assert request_id not in browser.js(rows) and "alice" not in browser.js(rows)

    wait_until(lambda: browser.js("document.querySelectorAll('#user-rows td.num').length") == 2,
               20, "the Users panel listing the requester (by an opaque name: no token)")
    screenshot(browser, 1280, 800, artifacts / "dashboard-1280x800.png")
    screenshot(browser, 1280, 1400, artifacts / "dashboard-1280x1400.png")
    assert clipped(browser) == [], "every column of the bottom row readable at 1280 px"
    screenshot(browser, 390, 844, artifacts / "dashboard-390x844.png")
    assert browser.js("document.documentElement.scrollWidth") <= 390, "no sideways scroll"
    assert clipped(browser) == [], "every column of the bottom row readable at 390 px"
    labels = browser.js("[...document.querySelectorAll('#request-rows td')]"
                        ".map(td => td.dataset.label)")
    assert labels[:3] == ["Request", "User", "Priority"], labels
    assert browser.problems() == []
