"""LDAP authentication against a real OpenLDAP ``slapd`` on a loopback port.

A throwaway directory (mdb, ``dc=example,dc=com``) holds ``alice`` under ``ou=people``,
``bob`` under ``ou=staff`` (``cn`` naming) and a service account. Both bind modes of
``web.auth`` are checked directly and through ``POST /api/v3/token``.
Install slapd with ``.ci/install-packages``.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ldap3
import pytest
import redis

from tests.api_harness import api, api_config, api_pool
from vmpooler.actors.storage import schema
from vmpooler.web.auth import check_credentials, check_ldap

SLAPD = Path("/usr/sbin/slapd")
if not SLAPD.exists():
    pytest.skip("OpenLDAP slapd is not installed (/usr/sbin/slapd missing): "
                "run .ci/install-packages", allow_module_level=True)

SUFFIX = "dc=example,dc=com"
ROOT_DN, ROOT_PW = f"cn=admin,{SUFFIX}", "rootsecret"
PEOPLE, STAFF = f"ou=people,{SUFFIX}", f"ou=staff,{SUFFIX}"
SERVICE_DN, SERVICE_PW = f"cn=vmpooler,ou=services,{SUFFIX}", "svc-secret"
ALICE_PW, BOB_PW = "alice-pw", "bob-pw"

CONF = """\
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
pidfile {tmp}/slapd.pid
argsfile {tmp}/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb
database mdb
maxsize 16777216
suffix "{suffix}"
rootdn "{rootdn}"
rootpw {rootpw}
directory {tmp}/db
access to attrs=userPassword by self write by anonymous auth by * none
access to * by users read by * none
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _root_bind(port: int) -> ldap3.Connection | None:
    server = ldap3.Server("127.0.0.1", port=port, get_info=ldap3.NONE, connect_timeout=1)
    conn = ldap3.Connection(server, ROOT_DN, ROOT_PW, receive_timeout=2)
    try:
        if conn.bind():
            return conn
    except ldap3.core.exceptions.LDAPException:
        pass
    if conn.socket is not None:  # ldap3 leaves it open when connecting failed
        conn.socket.close()
    return None


def _populate(conn: ldap3.Connection) -> None:
    entries: list[tuple[str, list[str], dict[str, Any]]] = [
        (SUFFIX, ["dcObject", "organization"], {"dc": "example", "o": "Example"}),
        (PEOPLE, ["organizationalUnit"], {"ou": "people"}),
        (STAFF, ["organizationalUnit"], {"ou": "staff"}),
        (f"ou=services,{SUFFIX}", ["organizationalUnit"], {"ou": "services"}),
        (f"uid=alice,{PEOPLE}", ["inetOrgPerson"],
         {"uid": "alice", "cn": "Alice", "sn": "A", "userPassword": ALICE_PW}),
        (f"cn=bob,{STAFF}", ["inetOrgPerson"],
         {"uid": "bob", "cn": "bob", "sn": "B", "userPassword": BOB_PW}),
        (SERVICE_DN, ["inetOrgPerson"],
         {"cn": "vmpooler", "sn": "svc", "userPassword": SERVICE_PW}),
    ]
    for dn, classes, attributes in entries:
        assert conn.add(dn, classes, attributes), (dn, conn.result)


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A populated slapd on a free loopback port; yields the port."""
    tmp = tmp_path_factory.mktemp("slapd")
    (tmp / "db").mkdir()
    conf = tmp / "slapd.conf"
    conf.write_text(CONF.format(tmp=tmp, suffix=SUFFIX, rootdn=ROOT_DN, rootpw=ROOT_PW))
    port = free_port()
    with (tmp / "slapd.log").open("wb") as out:
        proc = subprocess.Popen([str(SLAPD), "-h", f"ldap://127.0.0.1:{port}/", "-f",
                                 str(conf), "-d", "0"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        conn = _root_bind(port)
        while conn is None:
            try:  # waits on slapd exiting, with a short deadline, between attempts
                proc.wait(timeout=0.05)
                pytest.fail(f"slapd exited: {(tmp / 'slapd.log').read_text()}")
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"slapd not answering: {(tmp / 'slapd.log').read_text()}")
            conn = _root_bind(port)
        _populate(conn)
        conn.unbind()
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def ldap_conf(port: int, *, service: bool = False, **overrides: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {"host": "127.0.0.1", "port": port,
                            "base": f"{STAFF} {PEOPLE}", "user_object": ["cn", "uid"],
                            "encryption": {}}
    if service:
        conf["service_account_hash"] = {"user_dn": SERVICE_DN, "password": SERVICE_PW}
    conf.update(overrides)
    return conf


@pytest.mark.integration
class TestPlainBind:
    def test_good_password_is_accepted(self, slapd: int) -> None:
        assert check_ldap(ldap_conf(slapd), "alice", ALICE_PW)
        assert check_ldap(ldap_conf(slapd), "bob", BOB_PW)  # second base, first user_object

    def test_wrong_password_is_refused(self, slapd: int) -> None:
        assert not check_ldap(ldap_conf(slapd), "alice", BOB_PW)

    def test_unknown_user_is_refused(self, slapd: int) -> None:
        assert not check_ldap(ldap_conf(slapd), "mallory", ALICE_PW)

    def test_empty_password_is_refused_not_an_anonymous_bind(self, slapd: int) -> None:
        assert not check_ldap(ldap_conf(slapd), "alice", "")

    def test_user_is_escaped_in_the_dn(self, slapd: int) -> None:
        assert not check_ldap(ldap_conf(slapd, base="dc=com"), "alice,ou=people,dc=example",
                              ALICE_PW)

    def test_only_configured_bases_are_tried(self, slapd: int) -> None:
        assert not check_ldap(ldap_conf(slapd, base=[STAFF]), "alice", ALICE_PW)


@pytest.mark.integration
class TestServiceAccountBind:
    def test_good_password_is_accepted(self, slapd: int) -> None:
        assert check_ldap(ldap_conf(slapd, service=True), "alice", ALICE_PW)
        assert check_ldap(ldap_conf(slapd, service=True, base=SUFFIX, user_object="uid"),
                          "bob", BOB_PW)

    def test_wrong_password_is_refused(self, slapd: int) -> None:
        assert not check_ldap(ldap_conf(slapd, service=True), "alice", "nope")

    def test_unknown_user_is_refused(self, slapd: int) -> None:
        assert not check_ldap(ldap_conf(slapd, service=True), "mallory", ALICE_PW)

    def test_filter_is_escaped(self, slapd: int) -> None:
        assert not check_ldap(ldap_conf(slapd, service=True), "*", ALICE_PW)
        assert not check_ldap(ldap_conf(slapd, service=True), "al*", ALICE_PW)

    def test_refused_service_account_is_logged(self, slapd: int,
                                               caplog: pytest.LogCaptureFixture) -> None:
        conf = ldap_conf(slapd, service=True)
        conf["service_account_hash"] = {"user_dn": SERVICE_DN, "password": "wrong"}
        with caplog.at_level(logging.WARNING, logger="vmpooler.web.auth"):
            assert not check_ldap(conf, "alice", ALICE_PW)
        assert "service account" in caplog.text


@pytest.mark.integration
class TestServerDown:
    @pytest.mark.parametrize("service", [False, True])
    def test_closed_port_is_a_logged_refusal(self, service: bool,
                                             caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.WARNING, logger="vmpooler.web.auth"):
            assert not check_ldap(ldap_conf(free_port(), service=service), "alice", ALICE_PW)
        assert "[auth] ldap 127.0.0.1" in caplog.text

    def test_silent_server_times_out(self, caplog: pytest.LogCaptureFixture) -> None:
        with socket.socket() as listener:  # accepts connections, never answers
            listener.bind(("127.0.0.1", 0))
            listener.listen(8)
            port = listener.getsockname()[1]
            started = time.monotonic()
            with caplog.at_level(logging.WARNING, logger="vmpooler.web.auth"):
                assert not check_ldap(ldap_conf(port), "alice", ALICE_PW, timeout=1)
            assert time.monotonic() - started < 5
        assert "[auth] ldap" in caplog.text


@pytest.mark.integration
class TestThroughTheApi:
    def _client(self, redis_client: redis.Redis, ldap: dict[str, Any]) -> Any:
        config = dataclasses.replace(api_config([api_pool("pool1")]),
                                     auth={"provider": "ldap", "ldap": ldap})
        return api(redis_client, config)

    @staticmethod
    def _basic(user: str, password: str) -> dict[str, str]:
        raw = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {raw}"}

    @pytest.mark.parametrize("service", [False, True])
    def test_post_token(self, slapd: int, redis_client: redis.Redis, service: bool) -> None:
        harness = self._client(redis_client, ldap_conf(slapd, service=service))
        ok = harness.client.simulate_post("/api/v3/token",
                                          headers=self._basic("alice", ALICE_PW))
        assert ok.status_code == 200
        assert redis_client.hget(schema.token(ok.json["token"]), "user") == "alice"
        for user, password in (("alice", "wrong"), ("nobody", ALICE_PW), ("alice", "")):
            refused = harness.client.simulate_post("/api/v3/token",
                                                   headers=self._basic(user, password))
            assert refused.status_code == 401
            assert refused.headers["WWW-Authenticate"] == \
                'Basic realm="Authentication required"'

    def test_server_down_is_401_not_500(self, redis_client: redis.Redis) -> None:
        harness = self._client(redis_client, ldap_conf(free_port(), service=True))
        result = harness.client.simulate_get("/api/v3/token",
                                             headers=self._basic("alice", ALICE_PW))
        assert result.status_code == 401
        assert result.json == {"ok": False}


def test_concurrent_logins(slapd: int) -> None:
    """Each request opens its own connections: parallel checks do not interfere."""
    results: list[bool] = []
    lock = threading.Lock()

    def login(user: str, password: str) -> None:
        outcome = check_credentials({"provider": "ldap", "ldap": ldap_conf(slapd)}, user,
                                    password)
        with lock:
            results.append(outcome == (password != "bad"))

    threads = [threading.Thread(target=login, args=(u, p)) for u, p in
               [("alice", ALICE_PW), ("bob", BOB_PW), ("alice", "bad"), ("bob", "bad")] * 3]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == [True] * len(threads)
