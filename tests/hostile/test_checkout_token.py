"""With ``:auth:``, a token user also gets the per-address quota by leaving the token off;
``require_token_for_checkout`` closes that: every checkout needs a valid token (401).

Real Redis and Falcon's TestClient, then once over HTTP through ``vmpooler run``.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import falcon.testing
import pytest
import redis

from tests.harness import wait_until
from tests.hostile.service import Service, start_service
from tests.quota_harness import ALICE, P, checkout, ondemand, quota_api
from vmpooler.actors.config import load_config
from vmpooler.actors.config.unacted import unacted_warnings
from vmpooler.actors.storage import schema

HELD = {"default": {"vms_held": 3}}
UNAUTHORIZED = {"ok": False}


def taken(a_checkout: Callable[[], falcon.testing.Result], tries: int = 4) -> int:
    """Successes among ``tries`` calls of ``a_checkout``."""
    return sum(a_checkout().status_code == 200 for _ in range(tries))


def test_without_the_setting_leaving_the_token_off_buys_the_address_quota(
        redis_client: redis.Redis) -> None:
    """vmpooler's rule, still the default: a checkout needs no token."""
    a = quota_api(redis_client, HELD, vms=4)
    assert taken(lambda: checkout(a, {"pool1": 1})) == 3
    assert taken(lambda: checkout(a, {"pool2": 1}, None)) == 3  # 6 VMs for alice


def test_require_token_for_checkout_refuses_every_checkout_without_a_valid_token(
        redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, HELD, vms=4, require_token_for_checkout=True)
    assert taken(lambda: checkout(a, {"pool1": 1})) == 3
    for result in (checkout(a, {"pool2": 1}, None),  # before: 200, by address
                   a.client.simulate_post(f"{P}/vm/pool2"),
                   a.client.simulate_post(f"{P}/vm/pool2+pool1"),
                   a.client.simulate_post(f"{P}/vm/nosuchpool"),
                   checkout(a, {"pool2": 1}, ""),
                   checkout(a, {"pool2": 1}, "u" * 32),  # well-formed, unknown
                   ondemand(a, {"pool2": 1}, None)):  # POST /ondemandvm: always with :auth:
        assert (result.status_code, result.json) == (401, UNAUTHORIZED), result.text
        assert result.headers["WWW-Authenticate"].startswith("Basic")
    assert a.redis.scard(schema.ready("pool2")) == 4  # nothing was taken
    assert not a.redis.keys(schema.quota_held("127.0.0.1"))


def test_a_valid_token_checks_out_without_quotas(redis_client: redis.Redis) -> None:
    a = quota_api(redis_client, {}, vms=2, require_token_for_checkout=True)
    assert checkout(a, {"pool1": 1}).status_code == 200
    assert a.client.simulate_post(f"{P}/vm/pool1", headers={
        "X-AUTH-TOKEN": ALICE}).status_code == 200
    assert checkout(a, {"pool2": 1}, None).status_code == 401


def test_without_auth_the_setting_does_nothing_and_check_config_says_so(
        redis_client: redis.Redis, tmp_path: Path) -> None:
    a = quota_api(redis_client, {}, auth=False, vms=1, require_token_for_checkout=True)
    assert checkout(a, {"pool1": 1}, None).status_code == 200
    path = tmp_path / "vmpooler.yaml"
    path.write_text(":config:\n  require_token_for_checkout: true\n:pools:\n  - name: 'a'\n"
                    "    size: 1\n    provider: 'dummy'\n:providers:\n  :dummy:\n"
                    "    provider_class: dummy\n")
    warnings = unacted_warnings(load_config(path, environ={}, cwd=tmp_path), environ={})
    assert [(w.key, w.line) for w in warnings] == [("config.require_token_for_checkout", 2)]
    assert "without :auth:" in warnings[0].message
    result = subprocess.run([sys.executable, "-m", "vmpooler.web.cli", "check-config",
                             "--config", str(path)], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)
    assert result.returncode == 0
    assert "config.require_token_for_checkout: has no effect without :auth:" in result.stderr


def test_the_environment_sets_it(tmp_path: Path) -> None:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(":pools: []\n")
    assert load_config(path, environ={"REQUIRE_TOKEN_FOR_CHECKOUT": "true"},
                       cwd=tmp_path).settings.require_token_for_checkout is True
    assert load_config(path, environ={}, cwd=tmp_path).settings.require_token_for_checkout \
        is False


# -- over HTTP ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``vmpooler run`` with dummy auth, ``vms_held: 3`` and ``require_token_for_checkout``."""
    service = start_service(tmp_path_factory.mktemp("hostile-checkout-token"), "run",
                            overrides={":config": {"require_token_for_checkout": True},
                                       ":quotas": HELD})
    yield service
    service.stop()


def test_a_checkout_without_a_token_is_401_over_http(strict: Service) -> None:
    for path, body in (("/api/v3/vm", {"alpha": 1}), ("/api/v3/vm/alpha", None),
                       ("/api/v3/vm/beta+alpha", None)):
        answer = strict.request("POST", path, body)
        assert (answer.status, answer.json) == (401, UNAUTHORIZED), answer.body
    raw = base64.b64encode(b"carol:secret").decode()
    token = strict.request("POST", "/api/v3/token",
                           headers={"Authorization": f"Basic {raw}"}).json["token"]
    client = strict.redis_client()
    try:
        wait_until(lambda: client.scard(schema.ready("alpha")) > 0, 30, "a ready VM")
    finally:
        client.close()
    answer = strict.request("POST", "/api/v3/vm", {"alpha": 1}, headers={"X-AUTH-TOKEN": token})
    assert answer.status == 200, answer.body
