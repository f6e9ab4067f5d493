"""The embedded redis-server persists across a restart and listens on loopback only."""

from __future__ import annotations

from pathlib import Path

import redis

from vmpooler.actors.storage.embedded_redis import EmbeddedRedis


def test_restart_finds_previous_state(tmp_path: Path) -> None:
    server = EmbeddedRedis(data_dir=tmp_path / "data").start()
    try:
        client = redis.Redis(port=server.port, decode_responses=True)
        client.sadd("vmpooler__ready__pool1", "vm1", "vm2")
        client.close()
    finally:
        server.stop()
    assert (tmp_path / "data").exists()
    again = EmbeddedRedis(data_dir=tmp_path / "data").start()
    try:
        client = redis.Redis(port=again.port, decode_responses=True)
        assert client.smembers("vmpooler__ready__pool1") == {"vm1", "vm2"}
        assert client.config_get("bind")["bind"] == "127.0.0.1"
        client.close()
    finally:
        again.stop()


def test_one_data_dir_serves_one_server(tmp_path: Path) -> None:
    import pytest

    from vmpooler.actors.storage.embedded_redis import EmbeddedRedisError

    first = EmbeddedRedis(data_dir=tmp_path).start()
    try:
        assert (tmp_path / "redis.port").read_text().strip() == str(first.port)
        with pytest.raises(EmbeddedRedisError, match="in use by another vmpooler"):
            EmbeddedRedis(data_dir=tmp_path).start()
    finally:
        first.stop()
    EmbeddedRedis(data_dir=tmp_path).start().stop()
