"""``:redis: username``, ``password`` and the TLS keys (``ssl``, ``ssl_ca_file``,
``ssl_cert_file``, ``ssl_key_file``, ``ssl_verify``): from the file and the environment,
errors naming file, line and key, and the clients they make (direct and through Sentinel).
The embedded server's password comes from its data directory unless one is configured."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from redis.sentinel import SentinelManagedSSLConnection

from tests.test_config import MINIMAL, line_of, load, only, problems
from vmpooler.actors.storage.connection import (
    connect_configured,
    describe,
    effective_password,
    sibling,
    tls_options,
)
from vmpooler.actors.storage.embedded_files import write_private


@pytest.fixture
def pem(tmp_path: Path) -> Path:
    """A readable file standing for a PEM file (the loader only checks it can be read)."""
    path = tmp_path / "file.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return path


def test_tls_and_user_from_the_file(tmp_path: Path, pem: Path) -> None:
    text = (f":redis:\n  server: 'redis.example'\n  username: 'pooler'\n  password: 'pw'\n"
            f"  ssl: true\n  ssl_ca_file: '{pem}'\n  ssl_cert_file: '{pem}'\n"
            f"  ssl_key_file: '{pem}'\n" + MINIMAL)
    settings = load(tmp_path, text).redis
    assert (settings.username, settings.ssl, settings.ssl_verify) == ("pooler", True, True)
    assert tls_options(settings) == {
        "ssl_ca_certs": str(pem), "ssl_certfile": str(pem), "ssl_keyfile": str(pem),
        "ssl_cert_reqs": "required", "ssl_check_hostname": True}
    client = connect_configured(settings)
    pool = client.connection_pool
    assert pool.connection_class is redis.SSLConnection
    assert pool.connection_kwargs["username"] == "pooler"
    assert pool.connection_kwargs["ssl_ca_certs"] == str(pem)
    assert sibling(client, max_connections=2).connection_pool.connection_class \
        is redis.SSLConnection
    assert describe(settings) == "redis.example:6379 (TLS)"
    client.close()


def test_tls_and_user_from_the_environment(tmp_path: Path, pem: Path) -> None:
    settings = load(tmp_path, ":redis:\n  server: 'redis.example'\n" + MINIMAL, environ={
        "REDIS_USERNAME": "pooler", "REDIS_SSL": "yes", "REDIS_SSL_CA_FILE": str(pem),
        "REDIS_SSL_CERT_FILE": str(pem), "REDIS_SSL_KEY_FILE": str(pem),
        "REDIS_SSL_VERIFY": "false"}).redis
    assert settings.username == "pooler" and settings.ssl and not settings.ssl_verify
    assert settings.ssl_ca_file == settings.ssl_cert_file == settings.ssl_key_file == str(pem)
    options = tls_options(settings)
    assert options is not None
    assert options["ssl_cert_reqs"] == "none" and options["ssl_check_hostname"] is False


def test_without_ssl_connections_are_plain(tmp_path: Path) -> None:
    settings = load(tmp_path, ":redis:\n  server: 'redis.example'\n" + MINIMAL).redis
    assert tls_options(settings) is None and not settings.ssl and settings.ssl_verify
    client = connect_configured(settings)
    assert client.connection_pool.connection_class is redis.Connection
    client.close()


def test_sentinels_and_master_both_over_tls(tmp_path: Path, pem: Path) -> None:
    text = (":redis:\n  sentinels: ['s1:26379']\n  sentinel_master: 'm'\n  ssl: true\n"
            f"  ssl_ca_file: '{pem}'\n" + MINIMAL)
    client = connect_configured(load(tmp_path, text).redis)
    pool = client.connection_pool
    assert pool.connection_class is SentinelManagedSSLConnection
    assert pool.connection_kwargs["ssl_ca_certs"] == str(pem)
    sentinel = pool.sentinel_manager.sentinels[0].connection_pool
    assert sentinel.connection_class is redis.SSLConnection
    assert sentinel.connection_kwargs["ssl_ca_certs"] == str(pem)
    again = sibling(client, max_connections=2)  # the relay's and the stream's clients
    assert again.connection_pool.connection_class is SentinelManagedSSLConnection
    client.close()


@pytest.mark.parametrize(("section", "key", "words"), [
    ("  username: 'u'\n", "redis.username", "needs :redis: server or sentinels"),
    ("  ssl: true\n", "redis.ssl", "needs :redis: server or sentinels"),
    ("  server: 'r'\n  ssl_ca_file: '{pem}'\n", "redis.ssl_ca_file",
     "has no effect without ssl: true"),
    ("  server: 'r'\n  ssl: true\n  ssl_ca_file: '/nowhere/ca.pem'\n", "redis.ssl_ca_file",
     "'/nowhere/ca.pem' is not a readable file"),
    ("  server: 'r'\n  ssl: true\n  ssl_cert_file: '{pem}'\n", "redis.ssl_key_file",
     "required with ssl_cert_file"),
    ("  server: 'r'\n  ssl: true\n  ssl_key_file: '{pem}'\n", "redis.ssl_cert_file",
     "required with ssl_key_file"),
    ("  server: 'r'\n  ssl: 'sometimes'\n", "redis.ssl", "expected true or false"),
])
def test_bad_access_settings_name_file_line_and_key(
    tmp_path: Path, pem: Path, section: str, key: str, words: str,
) -> None:
    text = ":redis:\n" + section.format(pem=pem) + MINIMAL
    problem = only(problems(tmp_path, text))
    assert problem.source == str(tmp_path / "vmpooler.yaml")
    assert problem.key == key, problem
    assert words in problem.message, problem
    marker = key.rsplit(".", 1)[-1] + ":"
    if marker not in text:  # a missing key: the line of its section
        marker = ":redis:"
    assert problem.line == line_of(text, marker), problem


def test_embedded_password_comes_from_the_data_dir_unless_configured(tmp_path: Path) -> None:
    data = tmp_path / "redis"
    data.mkdir(mode=0o700)
    text = f":redis:\n  data_dir: '{data}'\n" + MINIMAL
    settings = load(tmp_path, text).redis
    assert effective_password(settings) is None  # no server ever started there
    write_private(data / "redis.password", "generated")
    assert effective_password(settings) == "generated"
    client = connect_configured(settings, address=("127.0.0.1", 1))
    assert client.connection_pool.connection_kwargs["password"] == "generated"
    client.close()
    explicit = load(tmp_path, text, environ={"REDIS_PASSWORD": "mine"}).redis
    assert effective_password(explicit) == "mine"
    configured = load(tmp_path, ":redis:\n  server: 'r'\n" + MINIMAL).redis
    assert effective_password(configured) is None  # a site's Redis: only what is configured
