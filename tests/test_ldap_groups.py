"""A user's LDAP groups recorded on its token (``:quotas: ldap_groups``) against a real
OpenLDAP ``slapd`` with the ``memberof`` overlay, and the quota they give through the API.

The directory holds ``alice`` (``uid`` under ``ou=people``) and ``bob`` (``cn`` under
``ou=staff``); ``qa`` and ``release`` are ``groupOfNames`` under ``ou=groups``: alice is in
both, bob in none. Install slapd with ``.ci/install-packages``.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.api_harness import Api, api, api_config, api_pool
from tests.quota_harness import policy
from tests.test_ldap_auth import (
    ALICE_PW,
    BOB_PW,
    CONF,
    PEOPLE,
    ROOT_DN,
    ROOT_PW,
    SLAPD,
    SUFFIX,
    _populate,
    _root_bind,
    free_port,
    ldap_conf,
)
from vmpooler.actors.fairness.quota_policy import LdapGroups
from vmpooler.actors.storage import schema
from vmpooler.web.auth import ldap_login
from vmpooler.web.ldap_groups import group_name, under

GROUPS = f"ou=groups,{SUFFIX}"
ALICE_DN = f"uid=alice,{PEOPLE}"
MEMBEROF = "moduleload memberof\noverlay memberof\n"
STAR_PW = "star-pw"


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A populated slapd with the memberof overlay on a free loopback port."""
    tmp = tmp_path_factory.mktemp("slapd-groups")
    (tmp / "db").mkdir()
    conf = tmp / "slapd.conf"
    text = CONF.format(tmp=tmp, suffix=SUFFIX, rootdn=ROOT_DN, rootpw=ROOT_PW)
    conf.write_text(text.replace("access to attrs=", MEMBEROF + "access to attrs=", 1))
    port = free_port()
    with (tmp / "slapd.log").open("wb") as out:
        proc = subprocess.Popen([str(SLAPD), "-h", f"ldap://127.0.0.1:{port}/", "-f",
                                 str(conf), "-d", "0"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        conn = _root_bind(port)
        while conn is None:
            try:
                proc.wait(timeout=0.05)
                pytest.fail(f"slapd exited: {(tmp / 'slapd.log').read_text()}")
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"slapd not answering: {(tmp / 'slapd.log').read_text()}")
            conn = _root_bind(port)
        _populate(conn)
        assert conn.add(GROUPS, ["organizationalUnit"], {"ou": "groups"}), conn.result
        assert conn.add(f"uid=q*,{PEOPLE}", ["inetOrgPerson"], {
            "uid": "q*", "cn": "Q", "sn": "Q", "userPassword": STAR_PW}), conn.result
        for name in ("qa", "release"):
            assert conn.add(f"cn={name},{GROUPS}", ["groupOfNames"],
                            {"cn": name, "member": [ALICE_DN]}), conn.result
        conn.unbind()
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


BY_SEARCH = LdapGroups(search_base=GROUPS, search_filter="(member={dn})")


@pytest.mark.integration
@pytest.mark.parametrize("service", [False, True])
@pytest.mark.parametrize("spec", [LdapGroups(), BY_SEARCH], ids=["memberOf", "search"])
def test_groups_are_read_in_both_bind_modes(slapd: int, service: bool,
                                            spec: LdapGroups) -> None:
    conf = ldap_conf(slapd, service=service)
    assert ldap_login(conf, "alice", ALICE_PW, groups=spec) == ("qa", "release")
    assert ldap_login(conf, "bob", BOB_PW, groups=spec) == ()
    assert ldap_login(conf, "alice", "wrong", groups=spec) is None


@pytest.mark.integration
def test_the_search_filter_is_escaped(slapd: int) -> None:
    """User ``q*`` (a real entry) would match group ``qa`` if ``{user}`` were not escaped."""
    spec = LdapGroups(search_base=GROUPS, search_filter="(cn={user})")
    assert ldap_login(ldap_conf(slapd), "q*", STAR_PW, groups=spec) == ()
    assert ldap_login(ldap_conf(slapd), "alice", ALICE_PW, groups=LdapGroups(
        search_base=GROUPS, search_filter="(cn=qa)")) == ("qa",)


@pytest.mark.integration
def test_a_group_read_that_fails_is_logged_and_gives_no_group(
        slapd: int, caplog: pytest.LogCaptureFixture) -> None:
    spec = LdapGroups(search_base="ou=nowhere,dc=example,dc=com", search_filter="({oops)")
    with caplog.at_level(logging.WARNING, logger="vmpooler.web.auth"):
        assert ldap_login(ldap_conf(slapd), "alice", ALICE_PW, groups=spec) == ()
    assert "groups of 'alice' could not be read" in caplog.text


def test_group_names_come_from_the_name_attribute() -> None:
    assert group_name(f"cn=qa,{GROUPS}", "cn") == "qa"
    assert group_name(f"ou=x,cn=qa,{GROUPS}", "CN") == "qa"
    assert group_name(f"ou=x,{GROUPS}", "cn") is None
    assert group_name("release", "cn") == "release"


def _api(redis_client: redis.Redis, slapd: int, section: dict[str, Any]) -> Api:
    config = dataclasses.replace(
        api_config([api_pool("pool1", 4)], experimental_features=True),
        auth={"provider": "ldap", "ldap": ldap_conf(slapd, service=True)},
        quotas=policy(section))
    a = api(redis_client, config)
    for i in range(4):
        a.add_vm("pool1", f"vm{i}")
    return a


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.mark.integration
def test_a_token_records_the_groups_and_they_set_the_quota(
        slapd: int, redis_client: redis.Redis) -> None:
    a = _api(redis_client, slapd, {"ldap_groups": {"attribute": "memberOf"},
                                   "default": {"vms_held": 1},
                                   "groups": {"release": {"vms_held": 2}}})
    tokens = {}
    for user, password in (("alice", ALICE_PW), ("bob", BOB_PW)):
        r = a.client.simulate_post("/api/v3/token", headers=_basic(user, password))
        assert r.status_code == 200, r.text
        tokens[user] = r.json["token"]
    assert a.redis.hget(schema.token(tokens["alice"]), "groups") == "qa,release"
    assert a.redis.hget(schema.token(tokens["bob"]), "groups") == ""

    def take(user: str) -> int:
        return a.client.simulate_post("/api/v3/vm", json={"pool1": 1},
                                      headers={"X-AUTH-TOKEN": tokens[user]}).status_code

    assert [take("alice") for _ in range(3)] == [200, 200, 429]
    assert [take("bob") for _ in range(2)] == [200, 429]


@pytest.mark.integration
def test_without_ldap_groups_the_token_records_none(slapd: int,
                                                    redis_client: redis.Redis) -> None:
    a = _api(redis_client, slapd, {"default": {"vms_held": 1}})
    r = a.client.simulate_post("/api/v3/token", headers=_basic("alice", ALICE_PW))
    assert not a.redis.hexists(schema.token(r.json["token"]), "groups")


@pytest.mark.integration
@pytest.mark.parametrize("service", [False, True])
def test_with_a_base_a_group_elsewhere_is_not_the_configured_one(slapd: int,
                                                                  service: bool) -> None:
    """``cn=release,ou=elsewhere`` is not group ``release`` once ``base`` names where the
    groups live; without ``base`` it is (documented)."""
    mallory_dn, elsewhere = f"uid=mallory,{PEOPLE}", f"ou=elsewhere,{SUFFIX}"
    root = _root_bind(slapd)
    assert root is not None
    if not root.search(mallory_dn, "(objectClass=*)"):
        assert root.add(mallory_dn, ["inetOrgPerson"], {
            "uid": "mallory", "cn": "M", "sn": "M", "userPassword": "mallory-pw"}), root.result
        assert root.add(elsewhere, ["organizationalUnit"], {"ou": "elsewhere"}), root.result
        assert root.add(f"cn=release,{elsewhere}", ["groupOfNames"],
                        {"cn": "release", "member": [mallory_dn]}), root.result
    root.unbind()
    conf = ldap_conf(slapd, service=service)
    assert ldap_login(conf, "mallory", "mallory-pw", groups=LdapGroups()) == ("release",)
    based = LdapGroups(base=GROUPS.upper())  # compared without regard to case
    assert ldap_login(conf, "mallory", "mallory-pw", groups=based) == ()
    assert ldap_login(conf, "alice", ALICE_PW, groups=based) == ("qa", "release")


def test_under_compares_rdn_by_rdn() -> None:
    assert under(f"cn=qa,{GROUPS}", GROUPS)
    assert under(f"CN=qa, OU=Groups,{SUFFIX}", GROUPS)
    assert not under(GROUPS, GROUPS)
    assert not under(f"cn=qa,ou=xgroups,{SUFFIX}", GROUPS)
    assert not under("release", GROUPS)
