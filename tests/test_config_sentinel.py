"""``:redis: sentinels``, ``sentinel_master`` and ``sentinel_password``: accepted forms, and
errors naming file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_config import MINIMAL, line_of, load, only, problems
from vmpooler.actors.config import render_config
from vmpooler.actors.config.unacted import unacted_warnings
from vmpooler.actors.storage.connection import BlockingSentinelPool, connect_configured

SENTINELS = """\
:redis:
  sentinels:
    - 'sentinel-a:26379'
    - {host: 'sentinel-b', port: 26380}
    - {host: 'sentinel-c'}
  sentinel_master: 'vmpooler'
  sentinel_password: 'sentinel-secret'
"""


def test_sentinels_in_both_forms(tmp_path: Path) -> None:
    config = load(tmp_path, SENTINELS + MINIMAL)
    redis = config.redis
    assert redis.sentinels == ("sentinel-a:26379", "sentinel-b:26380", "sentinel-c:26379")
    assert redis.sentinel_addresses == (("sentinel-a", 26379), ("sentinel-b", 26380),
                                        ("sentinel-c", 26379))
    assert redis.sentinel_master == "vmpooler" and redis.sentinel_password == "sentinel-secret"
    assert not redis.embedded
    assert unacted_warnings(config, cwd=tmp_path, environ={}) == []
    client = connect_configured(redis)
    assert isinstance(client.connection_pool, BlockingSentinelPool)
    assert client.connection_pool.service_name == "vmpooler"
    client.close()


def test_check_config_masks_the_sentinel_password_and_loads_back(tmp_path: Path) -> None:
    config = load(tmp_path, SENTINELS + MINIMAL)
    text = render_config(config)
    assert "sentinel-secret" not in text
    again = load(tmp_path, text.replace("'********'", "'x'"))
    assert again.redis.sentinels == config.redis.sentinels


def test_the_master_name_may_come_from_the_environment(tmp_path: Path) -> None:
    text = ":redis:\n  sentinels: ['s1:26379']\n" + MINIMAL
    config = load(tmp_path, text, environ={"REDIS_SENTINEL_MASTER": "mymaster"})
    assert config.redis.sentinel_master == "mymaster"


@pytest.mark.parametrize(("section", "key", "words"), [
    ("  sentinels: 'sentinel-a:26379'\n  sentinel_master: 'm'\n", "redis.sentinels",
     "expected a list of host:port"),
    ("  sentinels: ['sentinel-a']\n  sentinel_master: 'm'\n", "redis.sentinels[0]",
     "expected host:port"),
    ("  sentinels: ['sentinel-a:nope']\n  sentinel_master: 'm'\n", "redis.sentinels[0]",
     "port: expected an integer between 1 and 65535"),
    ("  sentinels: [{host: 'a', port: 70000}]\n  sentinel_master: 'm'\n", "redis.sentinels[0]",
     "between 1 and 65535"),
    ("  sentinels: [{host: 'a', prot: 1}]\n  sentinel_master: 'm'\n", "redis.sentinels[0]",
     "unknown key(s) prot"),
    ("  sentinels: ['a:26379']\n", "redis.sentinel_master", "required with sentinels"),
    ("  server: 'r'\n  sentinels: ['a:26379']\n  sentinel_master: 'm'\n", "redis.server",
     "either server or sentinels"),
    ("  sentinel_master: 'm'\n", "redis.sentinel_master", "no effect without sentinels"),
    ("  sentinel_password: 'p'\n", "redis.sentinel_password", "no effect without sentinels"),
])
def test_bad_sentinel_settings_name_file_line_and_key(
    tmp_path: Path, section: str, key: str, words: str,
) -> None:
    text = ":redis:\n" + section + MINIMAL
    problem = only(problems(tmp_path, text))
    assert problem.source == str(tmp_path / "vmpooler.yaml")
    assert problem.key == key, problem
    assert words in problem.message, problem
    marker = key.rsplit(".", 1)[-1].split("[")[0] + ":"
    if marker not in text:  # a missing key: the line of its section
        marker = ":redis:"
    assert problem.line == line_of(text, marker), problem
