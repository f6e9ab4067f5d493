"""Pools read from Redis when the file has no ``:pools:`` (vmpooler's load_pools_from_redis),
against a real redis-server; and once through ``vmpooler check-config`` as a process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis

from vmpooler.actors.config import ConfigError, load_config
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis
from vmpooler.actors.storage.published_pools import redis_pool_reader

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]


def publish(client: redis.Redis, pools: dict[str, dict[str, str]]) -> None:
    """Pools as vmpooler's manager publishes them: a set of names, one string hash each."""
    for name, fields in pools.items():
        client.sadd(schema.pools(), name)
        if fields:
            client.hset(schema.pool_hash(name), mapping=fields)


def write(tmp_path: Path, port: int, extra: str = "") -> Path:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(f":redis:\n  server: 127.0.0.1\n  port: {port}\n{extra}")
    return path


def test_pools_come_from_redis_when_the_file_has_none(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
) -> None:
    publish(redis_client, {
        "pool1": {"size": "5", "alias": "poolone,pool2,genericpool", "template": "t1",
                  "provider": "dummy", "domain": "stale.example", "ready_ttl": "60"},
        "pool2": {"size": "5", "template": "t2"},  # no alias: vmpooler crashed here
        "pool3": {"size": "0", "alias": "genericpool"},
    })
    config = load_config(write(tmp_path, redis_server.port), environ={}, cwd=tmp_path,
                         pool_reader=redis_pool_reader)
    assert config.pool_names == ("pool1", "pool2", "pool3")
    assert [p.size for p in config.pools] == [5, 5, 0]
    assert dict(config.aliases) == {"poolone": ("pool1",), "pool2": ("pool1",),
                                    "genericpool": ("pool1", "pool3")}
    assert config.pool("pool1").domain is None  # the published domain is derived, not kept
    assert config.pool("pool1").ready_ttl == 60
    assert any("pools read from redis" in note and "pool1, pool2, pool3" in note
               for note in config.notes)


def test_a_file_with_pools_never_reads_redis(tmp_path: Path, redis_server: EmbeddedRedis,
                                             redis_client: redis.Redis) -> None:
    publish(redis_client, {"fromredis": {"size": "1"}})
    path = write(tmp_path, redis_server.port, ":pools:\n  - {name: fromfile, size: 1}\n")
    config = load_config(path, environ={}, cwd=tmp_path, pool_reader=redis_pool_reader)
    assert config.pool_names == ("fromfile",)


def test_an_empty_redis_gives_no_pools_and_a_note(tmp_path: Path, redis_server: EmbeddedRedis,
                                                  redis_client: redis.Redis) -> None:
    config = load_config(write(tmp_path, redis_server.port), environ={}, cwd=tmp_path,
                         pool_reader=redis_pool_reader)
    assert config.pools == ()
    assert any("no pools are configured" in note for note in config.notes)


def test_a_bad_pool_in_redis_names_its_hash_and_field(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
) -> None:
    publish(redis_client, {"good": {"size": "1"}, "bad": {"size": "five"}, "bare": {}})
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, redis_server.port), environ={}, cwd=tmp_path,
                    pool_reader=redis_pool_reader)
    found = {(p.source, p.key) for p in caught.value.problems}
    where = f"redis 127.0.0.1:{redis_server.port}"
    assert found == {(f"{where} vmpooler__pool__bad", "size"),
                     (f"{where} vmpooler__pool__bare", "size")}


def test_an_unreachable_redis_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, 1), environ={}, cwd=tmp_path,
                    pool_reader=redis_pool_reader)
    problem = caught.value.problems[0]
    assert problem.key == "pools" and "redis 127.0.0.1:1" in problem.message


def test_check_config_shows_the_pools_redis_holds(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
) -> None:
    publish(redis_client, {"pool1": {"size": "3", "alias": "one"}})
    result = subprocess.run([*VMPOOLER, "check-config", "--config",
                             str(write(tmp_path, redis_server.port))],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "pool1" in result.stdout and "one" in result.stdout
