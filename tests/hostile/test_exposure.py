"""What a hostile client can read, over TCP against a real ``vmpooler run`` of its own
configuration: dummy auth, a DNS plugin carrying secrets, and on-demand requests that stay in
flight (``ondemand_clone_limit: 0``).

* ``/dashboard/stats/activity`` names request ids and users only to a valid token (before:
  to anyone, and an id names the request's VMs through ``GET /ondemandvm/<id>``);
* ``/api/v3/readiness`` names the managers (``host:pid:started``) only to loopback or a
  token: checked from loopback, from loopback through a proxy header, and from this host's
  own non-loopback address (a client that is not local);
* ``/full_config``, ``/config``, ``check-config`` and the logs never show the DNS plugin's
  ``secret_key``, ``credentials``, ``private_key``, ``access_key`` or ``passphrase``
  (before: ``/full_config`` returned all five).
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import wait_until
from tests.hostile.service import Answer, Service, start_service

pytestmark = pytest.mark.integration

SECRETS = {"secret_key": "dns-S3CR3T", "credentials": "dns-CREDENTIALS",
           "private_key": "dns-PRIVATE", "access_key": "dns-ACCESS",
           "passphrase": "dns-PASSPHRASE"}


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    service = start_service(Path(tmp_path_factory.mktemp("hostile-exposure")), "run", {
        ":config": {"ondemand_clone_limit": 0},
        ":dns_configs": {":local": {"dns_class": "dynamic-dns", "domain": "example.test",
                                    **SECRETS}},
    })
    yield service
    service.stop()


def token_of(service: Service, user: str) -> str:
    basic = base64.b64encode(f"{user}:{user}-password".encode()).decode()
    answer = service.request("POST", "/api/v3/token", headers={"Authorization": f"Basic {basic}"})
    assert answer.status == 200, answer.body
    return str(answer.json["token"])


def non_loopback_address() -> str | None:
    """An address of this host that is not loopback (None when it has none)."""
    for probe in ("192.0.2.1", "10.255.255.255", "203.0.113.1"):
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                udp.connect((probe, 9))  # no packet is sent: this only picks a route
                address = str(udp.getsockname()[0])
        except OSError:
            continue
        if not ipaddress.ip_address(address).is_loopback:
            return address
    return None


def request_from(service: Service, source: str, method: str, path: str,
                 headers: dict[str, str] | None = None) -> Answer:
    """One request whose TCP peer, as the service sees it, is ``source``."""
    connection = http.client.HTTPConnection(service.host, service.port, timeout=10,
                                            source_address=(source, 0))
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()},
                      response.read())
    finally:
        connection.close()


# -- the dashboard's activity -------------------------------------------------------------------
def test_activity_names_requests_and_users_only_with_a_token(exposed: Service) -> None:
    alice = {"X-AUTH-TOKEN": token_of(exposed, "alice")}
    created = exposed.request("POST", "/api/v3/ondemandvm", {"beta": 1}, headers=alice)
    assert created.status == 201, created.body
    request_id = created.json["request_id"]

    def listed(headers: dict[str, str] | None = None) -> Any:
        answer = exposed.request("GET", "/dashboard/stats/activity", headers=headers)
        assert answer.status == 200
        return answer.json

    wait_until(lambda: listed()["requests"], 10, "the request in flight")
    for headers in (None, {"X-AUTH-TOKEN": "guessed"}):
        anonymous = listed(headers)
        assert anonymous["requesters"] is False
        assert [r["requested"] for r in anonymous["requests"]] == ["beta:beta:1"]
        assert all("id" not in r and "user" not in r for r in anonymous["requests"])
        assert request_id not in json.dumps(anonymous) and "alice" not in json.dumps(anonymous)
    shown = listed(alice)
    assert shown["requesters"] is True
    assert [(r["id"], r["user"]) for r in shown["requests"]] == [(request_id, "alice")]


# -- readiness ------------------------------------------------------------------------------------
def members(answer: Answer) -> list[dict[str, Any]]:
    assert answer.status == 200, answer.body
    return list(answer.json["managers"]["members"])


def test_readiness_names_managers_to_loopback_only(exposed: Service) -> None:
    wait_until(lambda: exposed.request("GET", "/api/v3/readiness").status == 200, 20,
               "a manager heartbeat")
    local = members(exposed.request("GET", "/api/v3/readiness"))
    assert local and all(":" in m["id"] for m in local)
    proxied = exposed.request("GET", "/api/v3/readiness",
                              headers={"X-Forwarded-For": "198.51.100.9"})
    assert members(proxied) and all("id" not in m for m in members(proxied))
    address = non_loopback_address()
    if address is None:
        pytest.skip("this host has no non-loopback address to connect from")
    remote = request_from(exposed, address, "GET", "/api/v3/readiness")
    assert members(remote) and all("id" not in m for m in members(remote))
    assert remote.json["ok"] is True
    token = {"X-AUTH-TOKEN": token_of(exposed, "operator")}
    with_token = request_from(exposed, address, "GET", "/api/v3/readiness", headers=token)
    assert [m["id"] for m in members(with_token)] == [m["id"] for m in local]


# -- secrets --------------------------------------------------------------------------------------
def test_no_secret_of_a_dns_plugin_is_shown(exposed: Service) -> None:
    full = exposed.request("GET", "/api/v3/full_config")
    assert full.status == 200
    dns = full.json["full_config"]["dns_configs"]["local"]
    assert {key: dns[key] for key in SECRETS} == {key: "********" for key in SECRETS}
    assert dns["domain"] == "example.test"
    config = exposed.request("GET", "/api/v3/config")
    pools = {p["name"]: p for p in config.json["pool_configuration"]}
    assert pools["alpha"]["alias"] == ["alpha-alias"] and pools["alpha"]["size"] == 2
    assert pools["alpha"]["dns_plugin"] == "local"
    checked = subprocess.run(
        [sys.executable, "-m", "vmpooler.web.cli", "check-config", "--config",
         str(exposed.config_path)], capture_output=True, text=True, timeout=60,
        env={"VMPOOLER_DEBUG": "1", "PATH": "/usr/bin:/bin"}, check=False)
    assert checked.returncode == 0, checked.stderr
    assert "secret_key: '********'" in checked.stdout
    for text in (full.body.decode(), config.body.decode(), checked.stdout, checked.stderr,
                 exposed.log_text()):
        for secret in SECRETS.values():
            assert secret not in text
