"""One account is one user: spellings of a name that the directory (or the dummy provider)
accepts for the same account must not become separate users for quotas, fair share, the
``:quotas:`` names, ``GET /token`` or the failed-login guard.

OpenLDAP compares ``cn``/``uid`` without regard to case, insignificant spaces or width, so
bob's password binds as ``BOB``, `` bob``, ``bob `` and ``ｂｏｂ`` too. A real ``slapd``
(``tests.test_ldap_auth``), the real redis-server, the API through Falcon's test client, and
once through ``vmpooler api`` + ``vmpooler manager`` as processes.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.api_harness import Api, api, api_config, api_pool
from tests.api_manager import api_and_manager, http
from tests.harness import wait_until
from tests.quota_harness import policy
from tests.test_ldap_auth import BOB_PW, PEOPLE, _root_bind, ldap_conf
from tests.test_ldap_auth import slapd as slapd  # the module's directory, reused
from tests.test_manager_process import write_config
from vmpooler.actors.config._check import Checker
from vmpooler.actors.config._quotas import quota_policy
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis

pytestmark = pytest.mark.integration

P = "/api/v3"
SPELLINGS = ("Bob", "BOB", " bob", "bob ", "ｂｏｂ", "bOb", "\u3000BoB")
"""Seven spellings of bob's name that OpenLDAP binds with bob's password (the last with a
leading ideographic space)."""

CAROL_DN, CAROL_PW = f"uid=carol,{PEOPLE}", "carol-pw"

LIMITED = {"default": {"vms_held": 20}, "groups": {"limited": {"vms_held": 1}},
           "members": {"limited": ["bob"]}}
"""bob is in a group that may hold one VM; everybody else twenty."""


def basic(user: str, password: str) -> dict[str, str]:
    raw = f"{user}:{password}".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


def ldap_api(redis_client: redis.Redis, port: int, section: dict[str, Any], *,
             service: bool, vms: int = 8) -> Api:
    config = dataclasses.replace(
        api_config([api_pool("pool1", vms)], experimental_features=True),
        auth={"provider": "ldap", "ldap": ldap_conf(port, service=service)},
        quotas=policy(section))
    a = api(redis_client, config)
    for i in range(vms):
        a.add_vm("pool1", f"vm{i}")
    return a


def tokens(a: Api, password: str) -> list[str]:
    """A token per spelling of bob's name (each login must succeed)."""
    made = []
    for spelling in SPELLINGS:
        r = a.client.simulate_post(f"{P}/token", headers=basic(spelling, password))
        assert r.status_code == 200, (spelling, r.status_code, r.text)
        made.append(r.json["token"])
    return made


@pytest.mark.parametrize("service", [False, True], ids=["plain", "service-account"])
def test_every_spelling_of_an_ldap_account_is_one_user(
        slapd: int, redis_client: redis.Redis, service: bool) -> None:
    a = ldap_api(redis_client, slapd, LIMITED, service=service)
    made = tokens(a, BOB_PW)
    statuses = [a.client.simulate_post(f"{P}/vm", json={"pool1": 1},
                                       headers={"X-AUTH-TOKEN": t}).status_code for t in made]
    held = statuses.count(200)
    assert held == 1, f"VMs held through {len(SPELLINGS)} spellings: {held} ({statuses})"
    assert statuses == [200] + [429] * (len(SPELLINGS) - 1)
    assert {a.redis.hget(schema.token(t), "user") for t in made} == {"bob"}
    listed = a.client.simulate_get(f"{P}/token", headers=basic("ＢＯＢ", BOB_PW))
    assert sorted(k for k in listed.json if k != "ok") == sorted(made)


def test_the_user_is_the_entrys_own_identifier(slapd: int, redis_client: redis.Redis) -> None:
    """carol's entry (``uid=carol``) also has ``uid: cjones``: the service account finds it
    by either, and both logins are user ``carol``, the entry's naming value."""
    root = _root_bind(slapd)
    assert root is not None
    assert root.add(CAROL_DN, ["inetOrgPerson"], {
        "uid": ["carol", "cjones"], "cn": "Carol", "sn": "C", "userPassword": CAROL_PW})
    root.unbind()
    a = ldap_api(redis_client, slapd, LIMITED, service=True)
    users = []
    for typed in ("CJones", "carol", " Carol"):
        r = a.client.simulate_post(f"{P}/token", headers=basic(typed, CAROL_PW))
        assert r.status_code == 200, (typed, r.text)
        users.append(a.redis.hget(schema.token(r.json["token"]), "user"))
    assert users == ["carol"] * 3


def test_the_fair_share_queue_sees_one_user(slapd: int, redis_client: redis.Redis) -> None:
    a = ldap_api(redis_client, slapd, {"groups": {"big": {"share": 3}}}, service=False)
    made = tokens(a, BOB_PW)
    users = set()
    for n, token in enumerate(made):
        r = a.client.simulate_post(f"{P}/ondemandvm", json={"pool1": 1, "request_id": f"r{n}"},
                                   headers={"X-AUTH-TOKEN": token})
        assert r.status_code == 201, r.text
        users.add(a.redis.hget(schema.odrequest(f"r{n}"), "user"))
    assert users == {"bob"}, f"fair-share users of one account: {len(users)}: {users}"


def dummy_api(redis_client: redis.Redis, section: dict[str, Any] | None = None,
              **settings: Any) -> Api:
    config = api_config([api_pool("pool1", 8)], auth=True, experimental_features=True,
                        **settings)
    a = api(redis_client, dataclasses.replace(config, quotas=policy(section or {})))
    for i in range(8):
        a.add_vm("pool1", f"vm{i}")
    return a


def test_the_login_guard_counts_every_spelling_as_one_user(redis_client: redis.Redis) -> None:
    """The dummy provider refuses a password equal to the name: three failures spelled three
    ways lock the name out, so a good password for ``bob`` is refused unasked."""
    a = dummy_api(redis_client, login_failures_per_user=3, login_failures_per_address=100)
    for spelling in ("ｂｏｂ", " BOB", "Bob"):
        assert a.client.simulate_post(f"{P}/token", headers=basic(spelling, spelling)
                                      ).status_code == 401
    assert a.client.simulate_post(f"{P}/token", headers=basic("bob", "right")
                                  ).status_code == 429


def test_dummy_logins_name_the_user_in_its_normal_form(redis_client: redis.Redis) -> None:
    a = dummy_api(redis_client, LIMITED)
    made = tokens(a, "pw")
    assert {a.redis.hget(schema.token(t), "user") for t in made} == {"bob"}
    assert [a.client.simulate_post(f"{P}/vm", json={"pool1": 1}, headers={
        "X-AUTH-TOKEN": t}).status_code for t in made] == [200] + [429] * (len(SPELLINGS) - 1)
    blank = a.client.simulate_post(f"{P}/token", headers=basic("\u3000 ", "pw"))
    assert blank.status_code == 401  # a name that is nothing once normalised is no user


def test_max_ondemand_requests_per_user_counts_every_spelling_once(
        redis_client: redis.Redis) -> None:
    a = dummy_api(redis_client, max_ondemand_requests_per_user=1)
    made = tokens(a, "pw")
    statuses = [a.client.simulate_post(f"{P}/ondemandvm", json={"pool1": 1}, headers={
        "X-AUTH-TOKEN": t}).status_code for t in made]
    assert statuses == [201] + [429] * (len(SPELLINGS) - 1)


def test_a_configured_name_applies_to_its_user_in_any_spelling(
        redis_client: redis.Redis) -> None:
    a = dummy_api(redis_client, {"default": {"vms_held": 5}, "users": {"Bob": {"vms_held": 1}},
                                 "high_priority": {"users": ["ＢＯＢ "]}})
    a.add_token("t" * 32, "bob")
    take = [a.client.simulate_post(f"{P}/vm", json={"pool1": 1}, headers={
        "X-AUTH-TOKEN": "t" * 32}).status_code for _ in range(2)]
    assert take == [200, 429]
    a.redis.delete(schema.quota_held("bob"))
    high = a.client.simulate_post(f"{P}/ondemandvm", json={"pool1": 1, "priority": "high"},
                                  headers={"X-AUTH-TOKEN": "t" * 32})
    assert high.status_code == 201, high.text


def test_an_old_token_written_with_another_spelling_is_the_same_user(
        redis_client: redis.Redis) -> None:
    """Token hashes written by an older version (or Ruby vmpooler) hold the name as typed:
    they keep working, and count as the one user."""
    a = dummy_api(redis_client, {"default": {"vms_held": 5}, "users": {"bob": {"vms_held": 1}}})
    old, other = "o" * 32, "p" * 32
    a.add_token(old, "Bob")
    a.add_token(other, " ｂｏｂ")
    statuses = [a.client.simulate_post(f"{P}/vm", json={"pool1": 1}, headers={
        "X-AUTH-TOKEN": t}).status_code for t in (old, other)]
    assert statuses == [200, 429]
    assert a.redis.hget(schema.token(old), "user") == "Bob"  # not rewritten
    listed = a.client.simulate_get(f"{P}/token", headers=basic("bob", "pw"))
    assert sorted(k for k in listed.json if k != "ok") == [old, other]


def test_two_configured_names_of_one_user_are_a_problem_naming_the_key() -> None:
    chk = Checker()
    parsed = quota_policy({"users": {"Bob": {"vms_held": 1}, "ｂｏｂ": {"vms_held": 9}}}, chk)
    assert [(issue.path, issue.message) for issue in chk.issues] == [(
        ("quotas", "users", "ｂｏｂ"),
        "user 'ｂｏｂ' is the same user as 'Bob' (user names are compared NFKC, case-folded "
        "and trimmed: 'bob')")]
    assert dict(parsed.users) == {"bob": {"vms_held": 1}}


@pytest.fixture
def base(tmp_path: Path, redis_server: EmbeddedRedis,
         redis_client: redis.Redis) -> Iterator[str]:
    """A manager and a 2-worker API with the dummy provider and bob's one-VM group."""
    path = write_config(tmp_path / "users.yaml", redis_port=redis_server.port,
                        pools={"alpha": 8}, dummy={"createvm_max_time": 1})
    document = yaml.safe_load(path.read_text())
    document[":auth"] = {"provider": "dummy"}
    document[":quotas"] = LIMITED
    path.write_text(yaml.safe_dump(document, allow_unicode=True))
    with api_and_manager(tmp_path, path) as url:
        wait_until(lambda: redis_client.scard(schema.ready("alpha")) == 8, 30,
                   "the pool to fill")
        yield url
    for log in ("manager.log", "api.log"):
        assert "Traceback" not in (tmp_path / log).read_text(), log


def test_spellings_hold_one_quota_across_api_processes(base: str) -> None:
    made = []
    for spelling in SPELLINGS:
        status, body = http("POST", f"{base}/token", basic=f"{spelling}:pw")
        assert status == 200, body
        made.append(body["token"])
    statuses = [http("POST", f"{base}/vm", {"alpha": 1}, token=t)[0] for t in made]
    held = statuses.count(200)
    assert held == 1, f"VMs held through {len(SPELLINGS)} spellings: {held} ({statuses})"
