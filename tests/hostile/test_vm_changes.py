"""Changing and returning VMs as a hostile client, over TCP against real processes.

* 2,000 unauthenticated ``PUT /vm/<name>`` of as many tags as a body holds: the VM's hash and
  the day's tag statistics stay within ``max_tags_per_vm`` (32), the statistics expire after
  ``data_ttl`` and ``GET /summary`` stays small (before: 124k fields, 46 MB, no expiry, a
  44.6 MB ``/summary``);
* a ready VM whose name was guessed: returned without a token by default, as vmpooler does
  (documented), refused with ``require_token_for_vm_changes`` (401) and with
  ``enforce_vm_ownership`` (401 without a token, 403 for another user's token on a VM
  someone checked out).
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.harness import wait_until
from tests.hostile.service import Service, start_service

pytestmark = pytest.mark.integration

PUTS = 2000
TAGS_PER_PUT = 30  # 30 tags of 50 + 255 characters: just under the 10240-byte body limit
MAX_TAGS = 32  # max_tags_per_vm's default
DATA_TTL = 168 * 3600  # :redis: data_ttl's default, in seconds


def ready_vm(service: Service, pool: str = "beta") -> str:
    """A ready VM's name, as a guesser finds it (GET /vm/<name> tells which names exist)."""
    client = service.redis_client()
    wait_until(lambda: client.scard(f"vmpooler__ready__{pool}") > 0, 30, f"a ready {pool} VM")
    vm = sorted(client.smembers(f"vmpooler__ready__{pool}"))[0]
    probe = service.request("GET", f"/api/v3/vm/{vm}")
    assert probe.status == 200, probe.body
    return vm


def token_of(service: Service, user: str) -> str:
    basic = base64.b64encode(f"{user}:{user}-password".encode()).decode()
    answer = service.request("POST", "/api/v3/token", headers={"Authorization": f"Basic {basic}"})
    assert answer.status == 200, answer.body
    return str(answer.json["token"])


def tag_body(n: int) -> str:
    tags = {f"{n:05d}-{i:02d}".ljust(50, "k"): "v" * 255 for i in range(TAGS_PER_PUT)}
    return json.dumps({"tags": tags})


def day_fields(client: redis.Redis, vm: str) -> tuple[str | None, int, int]:
    """The day's tag hash holding ``vm``'s tags: its name, ``vm``'s fields in it, its TTL."""
    for key in client.scan_iter(match="vmpooler__tag__*"):
        fields = sum(1 for field in client.hkeys(key) if field.startswith(f"{vm}:"))
        if fields:
            return key, fields, client.ttl(key)
    return None, 0, -2


def test_two_thousand_tag_puts_stay_bounded(run_service: Service) -> None:
    vm = ready_vm(run_service)
    client = run_service.redis_client()
    statuses: dict[int, int] = {}
    connection = http.client.HTTPConnection(run_service.host, run_service.port, timeout=10)
    try:
        for n in range(PUTS):
            connection.request("PUT", f"/api/v3/vm/{vm}", body=tag_body(n),
                               headers={"Content-Type": "application/json"})
            answer = connection.getresponse()
            body = answer.read()
            statuses[answer.status] = statuses.get(answer.status, 0) + 1
            if answer.status == 400:
                assert json.loads(body)["failure"] == [
                    f"A VM may carry at most {MAX_TAGS} tags (this one has {TAGS_PER_PUT}; "
                    f"the request adds {TAGS_PER_PUT})."]
    finally:
        connection.close()
    assert statuses == {200: 1, 400: PUTS - 1}
    fields = client.hgetall(f"vmpooler__vm__{vm}")
    assert sum(1 for field in fields if field.startswith("tag:")) == TAGS_PER_PUT
    assert client.memory_usage(f"vmpooler__vm__{vm}") < 32 * 1024
    key, in_day, ttl = day_fields(client, vm)
    assert key is not None and in_day == TAGS_PER_PUT
    assert 0 < ttl <= DATA_TTL, "the day's statistics expire after data_ttl"
    summary = run_service.request("GET", "/api/v3/summary")
    assert summary.status == 200 and len(summary.body) < 256 * 1024
    assert run_service.answering()


def test_a_guessed_ready_vm_is_returned_without_a_token_by_default(run_service: Service) -> None:
    """vmpooler's behaviour, kept by default (docs/compatibility.md): a ready VM carries no
    token, so anyone may return it (the manager then destroys it)."""
    vm = ready_vm(run_service)
    answer = run_service.request("DELETE", f"/api/v3/vm/{vm}")
    assert (answer.status, answer.json) == (200, {"ok": True})
    client = run_service.redis_client()
    assert not client.sismember("vmpooler__ready__beta", vm)


@pytest.fixture(scope="module")
def strict_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``vmpooler run`` with ``require_token_for_vm_changes``."""
    service = start_service(Path(tmp_path_factory.mktemp("hostile-strict")), "run",
                            {":config": {"require_token_for_vm_changes": True}})
    yield service
    service.stop()


@pytest.fixture(scope="module")
def owned_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``vmpooler run`` with ``enforce_vm_ownership``."""
    service = start_service(Path(tmp_path_factory.mktemp("hostile-owned")), "run",
                            {":config": {"enforce_vm_ownership": True}})
    yield service
    service.stop()


def test_require_token_for_vm_changes_refuses_a_guesser(strict_service: Service) -> None:
    vm = ready_vm(strict_service)
    for headers in ({}, {"X-AUTH-TOKEN": "guessed-token"}):
        assert strict_service.request("DELETE", f"/api/v3/vm/{vm}", headers=headers).status == 401
        put = strict_service.request("PUT", f"/api/v3/vm/{vm}", {"tags": {"a": "b"}},
                                     headers=headers)
        assert put.status == 401 and put.json["ok"] is False
    client = strict_service.redis_client()
    assert client.sismember("vmpooler__ready__beta", vm)
    assert not client.hexists(f"vmpooler__vm__{vm}", "tag:a")
    mine = {"X-AUTH-TOKEN": token_of(strict_service, "alice")}
    assert strict_service.request("PUT", f"/api/v3/vm/{vm}", {"tags": {"a": "b"}},
                                  headers=mine).status == 200
    assert strict_service.request("DELETE", f"/api/v3/vm/{vm}", headers=mine).status == 200


def test_enforce_vm_ownership_refuses_a_guesser_and_another_user(owned_service: Service) -> None:
    service = owned_service
    alice = {"X-AUTH-TOKEN": token_of(service, "alice")}
    mallory = {"X-AUTH-TOKEN": token_of(service, "mallory")}
    vm = ready_vm(service)
    assert service.request("DELETE", f"/api/v3/vm/{vm}").status == 401, "a ready VM"
    wait_until(lambda: service.redis_client().scard("vmpooler__ready__alpha") > 0, 30,
               "a ready alpha VM")
    checkout = service.request("POST", "/api/v3/vm/alpha", headers=alice)
    assert checkout.status == 200, checkout.body
    hers = checkout.json["alpha"]["hostname"].split(".")[0]
    for headers, status in ((mallory, 403), ({}, 401)):
        assert service.request("DELETE", f"/api/v3/vm/{hers}", headers=headers).status == status
        assert service.request("PUT", f"/api/v3/vm/{hers}", {"tags": {"owner": "mallory"}},
                               headers=headers).status == status
    client = service.redis_client()
    assert client.sismember("vmpooler__running__alpha", hers)
    assert not client.hexists(f"vmpooler__vm__{hers}", "tag:owner")
    assert service.request("DELETE", f"/api/v3/vm/{hers}", headers=alice).status == 200
    assert service.request("DELETE", f"/api/v3/vm/{vm}", headers=mallory).status == 200
