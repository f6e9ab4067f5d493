"""``max_pool_size`` (global and per provider) and ``max_ondemand_requests_per_user`` in the
configuration: defaults, validation with file, line and key, and ``vmpooler check-config``
as a process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_config import line_of, load, only, problems

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]

POOLS = """\
:providers:
  :dummy:
    provider_class: 'dummy'
{provider}
:pools:
  - name: 'small'
    size: 3
  - name: 'big'
    size: {size}
"""


def document(size: int | str, provider: str = "", config: str = "") -> str:
    return (f":config:\n{config}\n" if config else "") + POOLS.format(size=size,
                                                                       provider=provider)


def test_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, document(10_000))
    assert config.settings.max_pool_size == 10_000
    assert config.settings.max_ondemand_requests_per_user is None
    assert config.max_pool_size(config.pool("big")) == 10_000


@pytest.mark.parametrize("size", [10_001, 10**300, "0x100000"])
def test_a_pool_larger_than_max_pool_size_is_refused_at_its_line(tmp_path: Path,
                                                                 size: int | str) -> None:
    text = document(size)
    problem = only(problems(tmp_path, text))
    assert problem.key == "pools[1].size"
    assert problem.line == line_of(text, "size: " + str(size)[:10])
    assert "above the largest allowed, 10000 (max_pool_size)" in problem.message


def test_a_providers_own_limit_wins(tmp_path: Path) -> None:
    text = document(15, provider="    max_pool_size: 20", config="  max_pool_size: 10")
    config = load(tmp_path, text)
    assert config.max_pool_size(config.pool("big")) == 20
    text = document(25, provider="    max_pool_size: '20'", config="  max_pool_size: 30")
    problem = only(problems(tmp_path, text))
    assert problem.key == "pools[1].size"
    assert problem.message == ("pool size 25 is above the largest allowed, 20 "
                               "(providers.dummy.max_pool_size)")


@pytest.mark.parametrize(("where", "value"), [
    ("provider", "0"), ("provider", "'many'"), ("provider", "2.5"), ("config", "0"),
    ("config", "-5"), ("config", "'lots'"),
])
def test_bad_limits_are_refused(tmp_path: Path, where: str, value: str) -> None:
    if where == "provider":
        text, key = document(1, provider=f"    max_pool_size: {value}"), \
            "providers.dummy.max_pool_size"
    else:
        text, key = document(1, config=f"  max_pool_size: {value}"), "config.max_pool_size"
    problem = only(problems(tmp_path, text))
    assert problem.key == key
    assert problem.line == line_of(text, f"max_pool_size: {value}")


@pytest.mark.parametrize("value", ["0", "-1", "'x'", "1.5"])
def test_a_bad_per_user_limit_is_refused(tmp_path: Path, value: str) -> None:
    text = document(1, config=f"  max_ondemand_requests_per_user: {value}")
    problem = only(problems(tmp_path, text))
    assert problem.key == "config.max_ondemand_requests_per_user"


def test_both_limits_come_from_the_environment(tmp_path: Path) -> None:
    config = load(tmp_path, document(40), environ={"MAX_POOL_SIZE": "40",
                                                   "MAX_ONDEMAND_REQUESTS_PER_USER": "3"})
    assert (config.settings.max_pool_size, config.settings.max_ondemand_requests_per_user) == (
        40, 3)
    found = only(problems(tmp_path, document(41), environ={"MAX_POOL_SIZE": "40"}))
    assert found.key == "pools[1].size"


def test_check_config_names_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(document(20_000))
    result = subprocess.run([*VMPOOLER, "check-config", "--config", str(path)],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode != 0
    line = line_of(document(20_000), "size: 20000")
    assert (f"{path}:{line}: pools[1].size: pool size 20000 is above the largest allowed, "
            "10000 (max_pool_size)") in result.stdout + result.stderr
